package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// simPackage is the simulation whose seeds judge a mutation.
const simPackage = "./internal/tools/simworld"

// Probe builds the simulation's test binary, with or without a mutation, and runs its seeds.
type Probe struct {
	Root    string // the module root
	From    uint64 // the first seed
	Seeds   int
	Profile string
	Timeout time.Duration // one run of the binary
}

// Outcome is what a run of the seeds found.
type Outcome struct {
	Seed      uint64 // the first seed that broke an invariant; 0: none did
	Violation string
	Ran       int // seeds run, up to and including Seed
}

// Build compiles the simulation's test binary to out, with the overlay file when it is not "".
func (p Probe) Build(ctx context.Context, overlay, out string) error {
	args := []string{"test", "-c", "-o", out}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, simPackage)...)
	cmd.Dir = p.Root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, msg)
	}
	return nil
}

var (
	firstRE = regexp.MustCompile(`(?m)^first violation: seed (\d+) after (\d+) seeds: (.*)$`)
	noneRE  = regexp.MustCompile(`(?m)^no violation in (\d+) seeds$`)
)

// Run runs p.Seeds seeds from p.From but except with bin, and stops at the first that breaks an
// invariant (simworld's TestFirstViolation).
func (p Probe) Run(ctx context.Context, bin string, except []uint64) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^TestFirstViolation$", "-test.count", "1",
		"-test.timeout", p.Timeout.String(), "-seeds", strconv.Itoa(p.Seeds), "-from", strconv.FormatUint(p.From, 10),
		"-profile", p.Profile, "-except", joinSeeds(except))
	cmd.Dir = filepath.Join(p.Root, simPackage)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	text := out.String()
	if m := firstRE.FindStringSubmatch(text); m != nil {
		seed, _ := strconv.ParseUint(m[1], 10, 64)
		ran, _ := strconv.Atoi(m[2])
		return Outcome{Seed: seed, Ran: ran, Violation: m[3]}, nil
	}
	if m := noneRE.FindStringSubmatch(text); m != nil && runErr == nil {
		ran, _ := strconv.Atoi(m[1])
		return Outcome{Ran: ran}, nil
	}
	return Outcome{}, fmt.Errorf("the simulation ended without an answer (%v):\n%s", runErr, tail(text, 40))
}

// Baseline runs every seed with the unmutated binary and returns the seeds that fail without any
// mutation: a mutation is judged on the others only.
func (p Probe) Baseline(ctx context.Context, bin string, progress func(Outcome)) ([]uint64, error) {
	var failing []uint64
	for {
		o, err := p.Run(ctx, bin, failing)
		if err != nil {
			return nil, err
		}
		if o.Seed == 0 {
			return failing, nil
		}
		progress(o)
		failing = append(failing, o.Seed)
	}
}

func joinSeeds(seeds []uint64) string {
	s := append([]uint64{}, seeds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(parts, ",")
}

func tail(text string, lines int) string {
	ls := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// writeTemp makes a fresh directory under parent for one mutation's files.
func writeTemp(parent, name string) (string, error) {
	dir, err := os.MkdirTemp(parent, name)
	if err != nil {
		return "", fmt.Errorf("make a directory for %s: %w", name, err)
	}
	return dir, nil
}
