// Command mutate is the mutation check of issue 22: it removes, one at a time, each condition (and
// each clause of one joined by AND or OR) of the conditional writes of the leases, the park
// records and the batch ledger, and runs the deterministic simulation (internal/tools/simworld)
// on each mutant until a seed breaks an invariant. A mutant no seed catches is a finding: the
// clause is redundant, or the simulation does not reach what it protects.
//
// The source tree is never edited: each mutant is a copy of one file given to go test -c through
// -overlay. Seeds that fail without any mutation (found first, the baseline) are not run for the
// mutants. The table goes to stdout (Markdown, for docs/simulation.md), progress to stderr.
//
//	go run ./internal/tools/mutate [-seeds 300] [-from 1] [-profile all] [-match 'lease.go:(180|247)'] [-list]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() {
	var (
		root    = flag.String("root", ".", "the module root")
		from    = flag.Uint64("from", 1, "the first seed")
		seeds   = flag.Int("seeds", 300, "seeds run on each mutant (at most), from -from")
		profile = flag.String("profile", "all", "the simulation's fault profile")
		match   = flag.String("match", "", "only the mutations whose name (file:line -[clause]) matches this regular expression")
		list    = flag.Bool("list", false, "list the mutations and stop")
		timeout = flag.Duration("timeout", 20*time.Minute, "one run of the simulation's seeds")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	absRoot, err := filepath.Abs(*root)
	if err == nil {
		p := Probe{Root: absRoot, From: *from, Seeds: *seeds, Profile: *profile, Timeout: *timeout}
		err = run(ctx, p, *match, *list, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

// Result is one mutant's verdict.
type Result struct {
	Mutation
	Outcome
	Err  error // the mutant did not build, or the simulation gave no answer
	Took time.Duration
}

func run(ctx context.Context, p Probe, match string, listOnly bool, stdout, stderr io.Writer) error {
	ms, err := Enumerate(p.Root, Targets)
	if err != nil {
		return fmt.Errorf("enumerate the conditions: %w", err)
	}
	if ms, err = filter(ms, match); err != nil {
		return err
	}
	if len(ms) == 0 {
		return fmt.Errorf("no mutation matches %q", match)
	}
	if listOnly {
		for _, m := range ms {
			fmt.Fprintf(stdout, "%s:%d\t%s\t-> %s\n", m.Rel, m.Line, m.Removed, orNone(m.Mutated))
		}
		return nil
	}
	work, err := os.MkdirTemp("", "sfnlimit-mutate-")
	if err != nil {
		return fmt.Errorf("make a work directory: %w", err)
	}
	defer os.RemoveAll(work)
	start := time.Now()
	except, err := baseline(ctx, p, work, stderr)
	if err != nil {
		return err
	}
	results := make([]Result, 0, len(ms))
	for i, m := range ms {
		fmt.Fprintf(stderr, "[%d/%d] %s: building the mutant, then up to %d seeds\n", i+1, len(ms), m.Name(), p.Seeds)
		r := judge(ctx, p, work, m, except)
		fmt.Fprintf(stderr, "[%d/%d] %s: %s (%s)\n", i+1, len(ms), m.Name(), verdict(r), r.Took.Round(time.Second))
		if r.Err != nil {
			fmt.Fprintln(stderr, r.Err)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	printTable(stdout, p, except, results, time.Since(start))
	return nil
}

func filter(ms []Mutation, match string) ([]Mutation, error) {
	re, err := regexp.Compile(match)
	if err != nil {
		return nil, fmt.Errorf("-match: %w", err)
	}
	var out []Mutation
	for _, m := range ms {
		if re.MatchString(m.Name()) {
			out = append(out, m)
		}
	}
	return out, nil
}

// baseline builds the unmutated simulation and finds the seeds that fail without a mutation.
func baseline(ctx context.Context, p Probe, work string, stderr io.Writer) ([]uint64, error) {
	fmt.Fprintf(stderr, "baseline: %d seeds from %d of profile %s, unmutated\n", p.Seeds, p.From, p.Profile)
	start := time.Now()
	bin := filepath.Join(work, "baseline.test")
	if err := p.Build(ctx, "", bin); err != nil {
		return nil, fmt.Errorf("build the unmutated simulation: %w", err)
	}
	except, err := p.Baseline(ctx, bin, func(o Outcome) {
		fmt.Fprintf(stderr, "baseline: seed %d fails unmutated (%s); the mutants skip it\n", o.Seed, o.Violation)
	})
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	fmt.Fprintf(stderr, "baseline: %d failing seeds, %s\n", len(except), time.Since(start).Round(time.Second))
	return except, nil
}

// judge builds m's mutant and runs its seeds. A mutant that does not build, or whose simulation
// crashes or hangs, gives an error (with the end of the simulation's output), not a seed.
func judge(ctx context.Context, p Probe, work string, m Mutation, except []uint64) Result {
	start := time.Now()
	r := Result{Mutation: m}
	r.Outcome, r.Err = probeMutant(ctx, p, work, m, except)
	r.Took = time.Since(start)
	return r
}

func probeMutant(ctx context.Context, p Probe, work string, m Mutation, except []uint64) (Outcome, error) {
	dir, err := writeTemp(work, "mutant-")
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(dir)
	overlay, err := Overlay(m, dir)
	if err != nil {
		return Outcome{}, err
	}
	bin := filepath.Join(dir, "mutant.test")
	if err := p.Build(ctx, overlay, bin); err != nil {
		return Outcome{}, fmt.Errorf("build the mutant: %w", err)
	}
	return p.Run(ctx, bin, except)
}

func verdict(r Result) string {
	switch {
	case r.Err != nil:
		return "error: " + firstLine(r.Err.Error())
	case r.Seed == 0:
		return fmt.Sprintf("not caught in %d seeds", r.Ran)
	}
	return fmt.Sprintf("caught at seed %d: %s", r.Seed, r.Violation)
}

func printTable(w io.Writer, p Probe, except []uint64, results []Result, took time.Duration) {
	fmt.Fprintf(w, "Mutation check: seeds %d-%d of profile %s, %d mutations, %s", p.From, p.From+uint64(p.Seeds)-1, p.Profile, len(results), took.Round(time.Second))
	if len(except) > 0 {
		fmt.Fprintf(w, "; seeds failing unmutated, not run: %s", joinSeeds(except))
	}
	fmt.Fprintf(w, "\n\n| mutation | clause removed | condition left | first seed catching it | seeds run | time |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		first := fmt.Sprintf("%d (%s)", r.Seed, kindOf(r.Violation))
		switch {
		case r.Err != nil:
			first = "error: " + firstLine(r.Err.Error())
		case r.Seed == 0:
			first = fmt.Sprintf("not caught in %d", p.Seeds)
		}
		fmt.Fprintf(w, "| %s:%d | `%s` | %s | %s | %d | %s |\n", r.Rel, r.Line, r.Removed, orNone(r.Mutated), first, r.Ran, r.Took.Round(time.Second))
	}
}

func orNone(cond string) string {
	if cond == "" {
		return "(none: unconditional)"
	}
	return "`" + cond + "`"
}

// kindOf is a violation's kind: what comes before " at " (simworld's Violation.String).
func kindOf(v string) string {
	kind, _, _ := strings.Cut(v, " at ")
	return kind
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
