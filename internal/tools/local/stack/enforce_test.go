package stack_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// The local stack runs each function with its role from template.yaml: a role without
// states:StartExecution makes the starter's start AccessDenied, as on AWS, and no job runs. The same
// job runs with the template as it is.
func TestRoleMissingAnActionIsAccessDenied(t *testing.T) {
	root, err := emulator.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mutated, n := removeAction(string(text), "StarterRole", "states:StartExecution")
	if n != 1 {
		t.Fatalf("states:StartExecution written %d times in StarterRole, want 1", n)
	}
	// The functions' EventBridge client is checked too: without events:PutEvents the router cannot
	// send the completion event of the batch its refusal of a job closes.
	noEvents, n := removeAction(string(text), "RouterRole", "events:PutEvents")
	if n != 1 {
		t.Fatalf("events:PutEvents written %d times in RouterRole, want 1", n)
	}
	for _, c := range []struct {
		name     string
		template string
		denied   string // the action denied, "" none
		key      string // the job's key
	}{
		{"the template's roles", string(text), "", ""},
		{"a starter role without states:StartExecution", mutated, "states:StartExecution", ""},
		{"a router role without events:PutEvents", noEvents, "events:PutEvents", "bad key!"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"statemachine", "functions"} {
				if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "template.yaml"), []byte(c.template), 0o600); err != nil {
				t.Fatal(err)
			}
			logs := &lockedBuffer{}
			s, err := stack.Start(t.Context(), stack.Options{
				Root: dir, Parameters: map[string]string{"TypeLimits": "d=1"},
				FunctionEnv: map[string]string{"START_RETRY_SECONDS": "1"},
				Log:         slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			if err != nil {
				t.Fatalf("stack.Start() = %v", err)
			}
			t.Cleanup(s.Close)
			if err := s.StartRuntime(t.Context()); err != nil {
				t.Fatal(err)
			}
			c2 := s.Clients()
			body, _ := json.Marshal(map[string]any{"type": "d", "id": "j1", "input": map[string]any{"seconds": 0}, "batch": "b1", "batchSize": 1, "key": c.key})
			general := s.Info().Output("GeneralQueueUrl")
			if _, err := c2.SQS.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: &general, MessageBody: aws.String(string(body))}); err != nil {
				t.Fatal(err)
			}
			sm := s.Info().Output("SampleStateMachineArn")
			if c.denied != "" {
				waitFor(t, 2*time.Minute, "a call to be denied", func() bool {
					return strings.Contains(logs.String(), "AccessDeniedException") && strings.Contains(logs.String(), c.denied)
				})
				t.Logf("denied: %s", strings.SplitN(grep(logs.String(), "AccessDeniedException"), "\n", 2)[0])
				if xs := executions(t, c2.SFN, sm, "", ""); c.denied == "states:StartExecution" && len(xs) != 0 {
					t.Errorf("executions %v started although the starter may not start any", xs)
				}
				if evs := s.Events(); len(evs) != 0 {
					t.Errorf("events %+v were sent although a role was refused", evs)
				}
				return
			}
			waitFor(t, 2*time.Minute, "the job to succeed", func() bool {
				return len(executions(t, c2.SFN, sm, "d", sfntypes.ExecutionStatusSucceeded)) == 1
			})
			if strings.Contains(logs.String(), "AccessDenied") {
				t.Errorf("a call was denied with the template's roles:\n%s", grep(logs.String(), "AccessDenied"))
			}
			waitFor(t, time.Minute, "the batch's completion event", func() bool { return len(s.Events()) == 1 })
		})
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func grep(text, word string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, word) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
