package tests

// The documents' examples work when pasted: TestDocsExamples runs the command blocks of README.md
// and docs/*.md, in order, one bash session per document, against the local stack the document
// itself starts. The conventions it reads are in docs/development.md, "Examples in the documents".

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docBlock is one fenced block of a document that the test may run.
type docBlock struct {
	line    int    // line of the opening fence, from 1
	lang    string // the fence's info string: sh, bash, shell or console
	script  string // the commands to run (for console, the lines after "$ ")
	skipWhy string // the reason of a <!-- not run: ... --> marker, "" to run it
}

var (
	notRunMarker = regexp.MustCompile(`^<!--\s*not run:\s*(.*?)\s*-->$`)
	// localUp is a command line that starts the local stack: the test starts it in the background,
	// as the document's reader does in another terminal.
	localUp = regexp.MustCompile(`^(\s*)(?:go run \./cmd/sfnlimit|sfnlimit) local up\b`)
)

// runnableLangs are the fences whose commands run; any other fence (json, yaml, text, mermaid, none)
// is sample output or data and is never run.
var runnableLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// parseDocBlocks returns the runnable blocks of a Markdown document, in order.
func parseDocBlocks(text string) ([]docBlock, error) {
	var (
		blocks   []docBlock
		in       bool
		cur      docBlock
		body     []string
		lastText string // the last non-blank line outside a block
	)
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if !in {
			if strings.HasPrefix(l, "```") {
				in = true
				cur = docBlock{line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(l, "```"))}
				if m := notRunMarker.FindStringSubmatch(lastText); m != nil {
					if m[1] == "" {
						return nil, fmt.Errorf("line %d: a not-run marker must say why", i)
					}
					cur.skipWhy = m[1]
				}
				body = nil
				continue
			}
			if trimmed != "" {
				lastText = trimmed
			}
			continue
		}
		if strings.HasPrefix(l, "```") {
			in = false
			if runnableLangs[cur.lang] {
				if cur.lang == "console" {
					cur.script = consoleCommands(body)
				} else {
					cur.script = strings.Join(body, "\n")
				}
				if cur.skipWhy == "" && andList(cur.script) {
					return nil, fmt.Errorf("line %d: a command chained with &&: put each command on a line of its own (under set -e, a failure before the last command of an && list does not stop the session)", cur.line)
				}
				blocks = append(blocks, cur)
			} else if cur.skipWhy != "" {
				return nil, fmt.Errorf("line %d: a not-run marker before a %q block, which never runs", cur.line, cur.lang)
			}
			lastText = ""
			continue
		}
		body = append(body, l)
	}
	if in {
		return nil, fmt.Errorf("line %d: block not closed", cur.line)
	}
	return blocks, nil
}

// consoleCommands returns the commands of a console transcript: each line that begins with "$ ",
// with the lines that continue it (after a trailing \ or |). The rest is sample output. A command
// that announces its failure (`|| echo "exit $?..."`) and whose sample output shows `exit N` is
// checked to exit N: a refusal the document shows must still be one.
func consoleCommands(body []string) string {
	var cmds []string
	var outs [][]string
	cont := false
	for _, l := range body {
		switch {
		case cont:
			cmds[len(cmds)-1] += "\n" + l
		case strings.HasPrefix(l, "$ "):
			cmds = append(cmds, strings.TrimPrefix(l, "$ "))
			outs = append(outs, nil)
		default:
			if len(outs) > 0 {
				outs[len(outs)-1] = append(outs[len(outs)-1], l)
			}
			continue
		}
		t := strings.TrimSpace(stripComment(l))
		cont = strings.HasSuffix(t, `\`) || strings.HasSuffix(t, "|")
	}
	for i, c := range cmds {
		cmds[i] = checkAnnouncedExit(c, outs[i])
	}
	return strings.Join(cmds, "\n")
}

var (
	announcedFailure = regexp.MustCompile(`(?s)^(.*\S)\s*\|\|\s*echo "exit \$\?([^"]*)"\s*$`)
	sampleExit       = regexp.MustCompile(`^exit (\d+)\b`)
)

// checkAnnouncedExit rewrites `CMD || echo "exit $?REST"` into a command that prints the same line
// and fails the session unless CMD exited as the sample output after it says (`exit N`).
func checkAnnouncedExit(cmd string, out []string) string {
	m := announcedFailure.FindStringSubmatch(stripComment(cmd))
	if m == nil {
		return cmd
	}
	for _, l := range out {
		if e := sampleExit.FindStringSubmatch(l); e != nil {
			return fmt.Sprintf("if %s; then __docs_rc=0; else __docs_rc=$?; fi; echo \"exit ${__docs_rc}%s\"; __docs_want_exit %s \"$__docs_rc\" %q",
				m[1], m[2], e[1], strings.SplitN(m[1], "\n", 2)[0])
		}
	}
	return cmd
}

// andList reports whether a runnable line chains commands with &&: under set -e a failure of any
// but the last command of such a list does not stop the session, so a documented command could
// fail unseen.
func andList(script string) bool {
	for _, l := range strings.Split(script, "\n") {
		l = stripComment(l)
		if unquoted(l, func(i int) bool { return l[i] == '&' && i+1 < len(l) && l[i+1] == '&' }) >= 0 {
			return true
		}
	}
	return false
}

// stripComment drops a trailing " # ..." comment outside quotes, roughly: enough to see how a
// command line ends.
func stripComment(l string) string {
	if i := unquoted(l, func(i int) bool { return l[i] == '#' && (i == 0 || l[i-1] == ' ') }); i >= 0 {
		return l[:i]
	}
	return l
}

// unquoted returns the first byte index of l outside single or double quotes at which at holds, or
// -1. (The characters looked for are ASCII, which no byte of a multi-byte character equals.)
func unquoted(l string, at func(i int) bool) int {
	var q byte
	for i := 0; i < len(l); i++ {
		switch c := l[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case at(i):
			return i
		}
	}
	return -1
}

// docPrelude is the start of each document's session. The documents name two go commands that the
// test answers with the sfnlimit it built: "go run ./cmd/sfnlimit ARGS" runs it, and "go install
// ./cmd/sfnlimit" finds it on PATH already. A local up line starts the stack in the background and
// returns once its info file names the queues.
const docPrelude = `set -euo pipefail
trap 'echo "docs: exit $? from: $BASH_COMMAND" >&2' ERR
__docs_want_exit() {
	if [ "$2" != "$1" ]; then echo "docs: the document shows exit $1 for: $3; it exited $2" >&2; return 1; fi
}
go() {
	if [ "${1-}" = run ] && [ "${2-}" = ./cmd/sfnlimit ]; then shift 2; sfnlimit "$@"; return; fi
	if [ "${1-}" = install ] && [ "${2-}" = ./cmd/sfnlimit ]; then echo "(sfnlimit is on PATH: $(command -v sfnlimit))"; return; fi
	command go "$@"
}
__docs_local_up() {
	local info="" prev=""
	for a in "$@"; do
		if [ "$prev" = --info ]; then info=$a; fi
		case $a in --info=*) info=${a#--info=};; esac
		prev=$a
	done
	if [ -z "$info" ]; then echo "docs: local up without --info: the examples cannot find it" >&2; return 1; fi
	echo "docs: starting the local stack in the background: sfnlimit local up $*"
	sfnlimit local up "$@" >"$DOCS_STACK_LOG" 2>&1 &
	echo $! >"$DOCS_STACK_PID"
	for _ in $(seq 1 240); do
		if [ -s "$info" ] && jq -e .outputs.GeneralQueueUrl "$info" >/dev/null 2>&1; then return 0; fi
		if ! kill -0 "$(cat "$DOCS_STACK_PID")" 2>/dev/null; then cat "$DOCS_STACK_LOG" >&2; return 1; fi
		sleep 0.5
	done
	echo "docs: the local stack did not start within 2 minutes" >&2
	cat "$DOCS_STACK_LOG" >&2
	return 1
}
`

// docScript turns a document's runnable blocks into one bash script and returns the blocks it
// skipped, with their reasons.
func docScript(doc string, blocks []docBlock) (script string, skipped []string) {
	var b strings.Builder
	b.WriteString(docPrelude)
	if os.Getenv(transcriptsEnv) != "" {
		b.WriteString("set -v\n") // each command line before its output, for the samples
	}
	for _, bl := range blocks {
		if bl.skipWhy != "" {
			skipped = append(skipped, fmt.Sprintf("%s:%d (%s): not run: %s", doc, bl.line, bl.lang, bl.skipWhy))
			continue
		}
		fmt.Fprintf(&b, "\necho %q >\"$DOCS_BLOCK\"\necho %q\n", strconv.Itoa(bl.line), fmt.Sprintf("==> %s:%d", doc, bl.line))
		for _, l := range strings.Split(bl.script, "\n") {
			if m := localUp.FindStringSubmatch(l); m != nil {
				l = m[1] + "__docs_local_up" + l[len(m[0]):]
			}
			b.WriteString(l + "\n")
		}
	}
	b.WriteString("\necho done >\"$DOCS_BLOCK\"\n")
	return b.String(), skipped
}

// transcriptsEnv names a directory where TestDocsExamples writes each document's transcript (every
// command line, then its output), to copy the samples of the documents from; unset, it writes none.
const transcriptsEnv = "SFNLIMIT_DOCS_TRANSCRIPTS"

// TestDocsExamples runs every runnable block of README.md and docs/*.md as pasted, in order, and
// fails on a non-zero exit the text does not announce (an announced one is caught in the text:
// `|| echo "exit $?: ..."`).
func TestDocsExamples(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// The documents' commands use these as a reader would; a missing one fails the test rather than
	// skipping the documents.
	for _, tool := range []string{"bash", "jq", "aws", "moto_server"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the documents' examples need %s on PATH: %v", tool, err)
		}
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "sfnlimit"), "./cmd/sfnlimit")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sfnlimit: %v\n%s", err, out)
	}

	docs := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(more)
	for _, m := range more {
		docs = append(docs, filepath.Join("docs", filepath.Base(m)))
	}

	var skippedAll []string
	for _, doc := range docs {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseDocBlocks(string(text))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		script, skipped := docScript(doc, blocks)
		skippedAll = append(skippedAll, skipped...)
		if len(skipped) == len(blocks) {
			continue // nothing to run
		}
		t.Run(strings.TrimSuffix(filepath.Base(doc), ".md"), func(t *testing.T) {
			runDocSession(t, root, bin, doc, script)
		})
	}
	for _, s := range skippedAll {
		t.Logf("skipped %s", s)
	}
}

// runDocSession runs one document's script in a fresh directory that looks like the repository
// (its top-level entries linked), so that the commands read template.yaml and examples/ and write
// their own files beside them.
func runDocSession(t *testing.T, root, bin, doc, script string) {
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case ".git", "local.json", "out":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	state := t.TempDir()
	scriptPath := filepath.Join(state, "doc.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	pidFile, blockFile := filepath.Join(state, "stack.pid"), filepath.Join(state, "block")
	stackLog := filepath.Join(state, "stack.log")

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", scriptPath)
	cmd.Dir = dir
	cmd.Env = docEnv(bin, state, map[string]string{
		"DOCS_STACK_PID": pidFile, "DOCS_BLOCK": blockFile, "DOCS_STACK_LOG": stackLog,
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	outPath := filepath.Join(state, "out.log")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	began := time.Now()
	runErr := cmd.Run()
	out.Close()
	stopDocStack(t, pidFile)
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything the session left behind
	}

	transcript, _ := os.ReadFile(outPath)
	block, _ := os.ReadFile(blockFile)
	if dir := os.Getenv(transcriptsEnv); dir != "" {
		name := filepath.Join(dir, strings.ReplaceAll(doc, "/", "_")+".txt")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Error(err)
		} else if err := os.WriteFile(name, transcript, 0o644); err != nil {
			t.Error(err)
		} else {
			t.Logf("%s: transcript written to %s", doc, name)
		}
	}
	if testing.Verbose() {
		t.Logf("%s: transcript\n%s", doc, transcript)
	}
	if runErr != nil || strings.TrimSpace(string(block)) != "done" {
		stack, _ := os.ReadFile(stackLog)
		t.Fatalf("%s: the block at line %s failed (%v) after %s; transcript:\n%s\nlocal stack's log (tail):\n%s",
			doc, strings.TrimSpace(string(block)), runErr, time.Since(began).Round(time.Second), tail(string(transcript), 80), tail(string(stack), 30))
	}
	t.Logf("%s: every runnable block ran as pasted in %s", doc, time.Since(began).Round(time.Second))
}

// docEnv is the session's environment: the user's, with sfnlimit on PATH, and nothing that points
// at an AWS account. AWS_ENDPOINT_URL names a closed port, so a command that was meant for a
// deployed stack fails instead of reaching AWS; the local stack's commands name its endpoint.
func docEnv(bin, state string, extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "SFNLIMIT_") || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"AWS_ENDPOINT_URL=http://127.0.0.1:9",
		"AWS_CONFIG_FILE="+filepath.Join(state, "aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(state, "aws-credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_PAGER=",
	)
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// stopDocStack stops the local stack a session started, as Ctrl-C would, and waits for it to remove
// its info file and stop its emulators.
func stopDocStack(t *testing.T, pidFile string) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return // the document started none
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Errorf("stack pid file: %v", err)
		return
	}
	began := time.Now()
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, 20 * time.Second}, {syscall.SIGTERM, 10 * time.Second}} {
		_ = syscall.Kill(pid, step.sig)
		for deadline := time.Now().Add(step.wait); time.Now().Before(deadline); {
			if syscall.Kill(pid, 0) != nil {
				t.Logf("the local stack stopped on %v in %s", step.sig, time.Since(began).Round(time.Millisecond))
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Errorf("the local stack (pid %d) did not stop on SIGINT or SIGTERM within 30s: killed", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// TestDocsReadable holds the README to one sitting and every document to the code as it is, not to
// how it came to be.
func TestDocsReadable(t *testing.T) {
	const maxReadme = 250
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > maxReadme {
		t.Errorf("README.md has %d lines, want at most %d: move detail to docs/ and link it", n, maxReadme)
	}
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range append([]string{"../README.md"}, docs...) {
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			if why := historyReference(sc.Text()); why != "" {
				t.Errorf("%s:%d refers to the project's history (%s): %s", strings.TrimPrefix(doc, "../"), n, why, sc.Text())
			}
		}
		f.Close()
	}
}

// TestDocsLinks checks that every relative link of README.md and docs/*.md names a file that exists
// and, with #anchor, a heading of it: sections move between documents, and links must follow.
func TestDocsLinks(t *testing.T) {
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // file -> its headings' anchors
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		b, err := os.ReadFile(path)
		if err == nil {
			in := false
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "```") {
					in = !in
				}
				if !in && strings.HasPrefix(l, "#") {
					a[headingAnchor(strings.TrimLeft(l, "#"))] = true
				}
			}
		}
		anchors[path] = a
		return a
	}
	for _, doc := range append([]string{"../README.md"}, docs...) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", strings.TrimPrefix(doc, "../"), target)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", strings.TrimPrefix(doc, "../"), target, strings.TrimPrefix(path, "../"), anchor)
			}
		}
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// headingAnchor is GitHub's anchor of a Markdown heading: lower case, spaces to hyphens, and
// punctuation other than hyphens and underscores dropped.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	hexWord     = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
	historyWord = regexp.MustCompile(`(?i)\bissue\s+#?\d+|\bat commit\b|\b(?:last|this|previous) session\b|\bthe review\b|\breview\s*\d+`)
)

// historyReference says why a line refers to the project's own history, or "".
func historyReference(line string) string {
	for _, w := range hexWord.FindAllString(line, -1) {
		if strings.ContainsAny(w, "abcdef") && strings.ContainsAny(w, "0123456789") {
			return "a commit hash " + w
		}
	}
	if m := historyWord.FindString(line); m != "" {
		return strconv.Quote(m)
	}
	return ""
}

func TestDocsHistoryReference(t *testing.T) {
	tests := []struct {
		name string
		give string
		want bool
	}{
		{name: "commit", give: "at commit 96a8be4, whose report", want: true},
		{name: "issue", give: "fixed in issue 13", want: true},
		{name: "session", give: "as the last session measured", want: true},
		{name: "review", give: "found by the review", want: true},
		{name: "account id", give: "arn:aws:states:us-east-1:123456789012:stateMachine:x", want: false},
		{name: "another project's issue", give: "([aws/aws-sam-cli#2380](https://github.com/aws/aws-sam-cli/issues/2380))", want: false},
		{name: "plain text", give: "a review of one parameter shows it", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := historyReference(tt.give) != ""; got != tt.want {
				t.Errorf("historyReference(%q) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}

func TestDocsParseBlocks(t *testing.T) {
	doc := "intro\n\n<!-- not run: needs a deployed stack -->\n```sh\nsam deploy\n```\n\n```console\n$ sfnlimit status\nTYPE LIMIT\n$ printf x |\n  sfnlimit submit -\nsent 1\n```\n\n```json\n{}\n```\n"
	blocks, err := parseDocBlocks(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("parseDocBlocks = %d blocks, want 2", len(blocks))
	}
	if got, want := blocks[0].skipWhy, "needs a deployed stack"; got != want {
		t.Errorf("blocks[0].skipWhy = %q, want %q", got, want)
	}
	if got, want := blocks[1].script, "sfnlimit status\nprintf x |\n  sfnlimit submit -"; got != want {
		t.Errorf("blocks[1].script = %q, want %q", got, want)
	}
	script, _ := docScript("d.md", []docBlock{{line: 1, lang: "sh", script: "go run ./cmd/sfnlimit local up --info l.json  # in another terminal"}})
	if !strings.Contains(script, "\n__docs_local_up --info l.json  # in another terminal\n") {
		t.Errorf("docScript does not start the local stack in the background:\n%s", script)
	}
}

// A refusal the document shows (`CMD || echo "exit $?"` followed by `exit N`) must still be one,
// with that exit code: a command that starts to succeed, or fails otherwise, fails the session.
func TestDocsAnnouncedExitIsChecked(t *testing.T) {
	tests := []struct {
		name    string
		block   string
		wantErr bool
	}{
		{name: "refused as shown", block: "$ (exit 2) || echo \"exit $?\"\nexit 2\n"},
		{name: "refused as shown, with a note", block: "$ (exit 3) || echo \"exit $?: r-2 failed\"  # a note\nexit 3: r-2 failed\n"},
		{name: "now accepted", block: "$ true || echo \"exit $?\"\nexit 2\n", wantErr: true},
		{name: "refused with another code", block: "$ (exit 1) || echo \"exit $?\"\nexit 2\n", wantErr: true},
		{name: "no exit shown: not checked", block: "$ true || echo \"exit $?\"\nok\n"},
		{name: "a plain failure", block: "$ false\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blocks, err := parseDocBlocks("```console\n" + tt.block + "```\n")
			if err != nil {
				t.Fatal(err)
			}
			script, _ := docScript("d.md", blocks)
			cmd := exec.Command("bash", "-c", script)
			cmd.Env = append(os.Environ(), "DOCS_BLOCK="+filepath.Join(t.TempDir(), "block"))
			out, err := cmd.CombinedOutput()
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Errorf("session error = %v, want error %v; output:\n%s", err, tt.wantErr, out)
			}
		})
	}
}

// Under set -e, a failure of any but the last command of an && list does not stop the session:
// the documents put each command on a line of its own, and the test refuses a chain.
func TestDocsRefuseAndLists(t *testing.T) {
	for _, doc := range []string{
		"```console\n$ false && echo never\n```\n",
		"```sh\nfalse && echo never\n```\n",
		"```console\n$ sfnlimit config set a --limit 1 &&\n  sfnlimit config set b --limit 2\n```\n",
	} {
		if _, err := parseDocBlocks(doc); err == nil || !strings.Contains(err.Error(), "&&") {
			t.Errorf("parseDocBlocks(%q) error = %v, want a refusal of the && chain", doc, err)
		}
	}
	for _, doc := range []string{
		"<!-- not run: needs AWS -->\n```sh\nsam build && sam deploy\n```\n",
		"```sh\necho 'a && b' \"c && d\"  # && in a comment\n```\n",
	} {
		if _, err := parseDocBlocks(doc); err != nil {
			t.Errorf("parseDocBlocks(%q) error = %v, want none", doc, err)
		}
	}
}
