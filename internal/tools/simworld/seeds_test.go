package simworld

import (
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var (
	flagSeeds = flag.Int("seeds", 0, "seeds for TestSurvey and BenchmarkSeeds (0: TestSurvey skips)")
	flagFrom  = flag.Uint64("from", 1, "first seed of TestSurvey")
	flagBatch = flag.Float64("batches", -1, "share of jobs in batches of TestOneSeed (-1: DefaultConfig's; 0: none, the world before batches were modelled)")
	flagProf  = flag.String("profile", GateProfile, "fault profile of TestSurvey and TestOneSeed (see Profiles; \"a-b\" turns b off, \"a+b\" adds)")
)

// GateProfile is the fault profile of the fixed seed set: every class. (Duplicate deliveries were
// left out while, with kills, they found a defect not fixed yet: finds_test.go.)
const GateProfile = "all"

// gateSeeds is the fixed set: 500 seeds; 250 under the race detector, which makes a run about
// four times slower (500 took about 3.5 minutes on the shared 2-core machine).
func gateSeeds() int {
	if raceOn {
		return 250
	}
	return 500
}

func runQuiet(t *testing.T, seed uint64, f Faults) (Stats, []Violation) {
	var st Stats
	var vs []Violation
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Trace = false
		cfg.Faults = f
		w := New(seed, cfg)
		vs = w.Run()
		st = w.Stats
	})
	return st, vs
}

// report replays seed with its trace on (a run is decided by its seed alone) and returns the
// failure report.
func report(t *testing.T, seed uint64, f Faults) string {
	var out string
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Faults = f
		w := New(seed, cfg)
		vs := w.Run()
		out = w.Report(vs, 60)
	})
	return out
}

// forSeeds runs seeds from..from+n-1 on GOMAXPROCS workers and returns each failing seed's
// violations.
func forSeeds(t *testing.T, from uint64, n int, f Faults) map[uint64][]Violation {
	return forSeedsProgress(t, from, n, f, 0)
}

// forSeedsProgress is forSeeds, printing to stderr every `every` seeds (0: never) how many ran, how
// many broke an invariant, and the rate: the long run's progress.
func forSeedsProgress(t *testing.T, from uint64, n int, f Faults, every int) map[uint64][]Violation {
	var (
		mu     sync.Mutex
		failed = map[uint64][]Violation{}
		next   atomic.Uint64
		done   atomic.Int64
		wg     sync.WaitGroup
		start  = time.Now()
	)
	next.Store(from)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				s := next.Add(1) - 1
				if s >= from+uint64(n) {
					return
				}
				_, vs := runQuiet(t, s, f)
				mu.Lock()
				if len(vs) > 0 {
					failed[s] = vs
					if every > 0 {
						fmt.Fprintf(os.Stderr, "seed %d broken: %s\n", s, vs[0])
					}
				}
				if d := done.Add(1); every > 0 && d%int64(every) == 0 {
					fmt.Fprintf(os.Stderr, "%d of %d seeds, %d broken, %.0f runs a minute\n", d, n, len(failed), float64(d)/time.Since(start).Minutes())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

// TestSeeds is the fixed seed set: every seed must keep every invariant. A failing seed is
// replayed with its trace for the report; `SEED=n go test ./internal/tools/simworld -run
// TestOneSeed -v` replays it alone.
func TestSeeds(t *testing.T) {
	f, err := Profile(GateProfile)
	if err != nil {
		t.Fatal(err)
	}
	n := gateSeeds()
	start := time.Now()
	failed := forSeeds(t, 1, n, f)
	t.Logf("%d seeds (profile %s) in %s", n, GateProfile, time.Since(start).Round(time.Millisecond))
	expectOpenFindings(t, failed, n)
	seeds := make([]uint64, 0, len(failed))
	for s := range failed {
		seeds = append(seeds, s)
	}
	sort.Slice(seeds, func(i, j int) bool { return seeds[i] < seeds[j] })
	for i, s := range seeds {
		if i < 3 {
			t.Errorf("%s\nreplay: SEED=%d go test ./internal/tools/simworld -run TestOneSeed -v", report(t, s, f), s)
		} else {
			t.Errorf("seed %d: %s", s, failed[s][0])
		}
	}
}

// TestOneSeed runs one seed with its trace: SEED=n, -profile (default GateProfile), TRACE=text to
// follow something else than the first violation's job (a group: "alpha-3"). Without SEED it
// skips: the fixed set runs every gate seed already, and seed 1, its old default, is one of the
// open findings pinned there.
func TestOneSeed(t *testing.T) {
	s := os.Getenv("SEED")
	if s == "" {
		t.Skip("SEED not set: SEED=n replays seed n")
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("SEED=%q: %v", s, err)
	}
	f, err := Profile(*flagProf)
	if err != nil {
		t.Fatal(err)
	}
	var w *World
	var vs []Violation
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Faults = f
		if *flagBatch >= 0 {
			cfg.BatchShare = *flagBatch
		}
		w = New(seed, cfg)
		if path := os.Getenv("SIMDEBUG"); path != "" {
			out, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			w.debug = out
		}
		vs = w.Run()
	})
	t.Logf("seed %d (profile %s): %+v", seed, *flagProf, w.Stats)
	if len(vs) > 0 || os.Getenv("TRACE") != "" {
		max := 120
		if n, err := strconv.Atoi(os.Getenv("TRACEMAX")); err == nil {
			max = n
		}
		t.Errorf("%s", w.ReportOn(vs, os.Getenv("TRACE"), max))
	}
}

// fingerprint is a run's whole trace, hashed.
func fingerprint(w *World) string {
	h := fnv.New64a()
	for _, l := range w.traceLog {
		fmt.Fprintf(h, "%d %s %s\n", l.at, l.subject, l.text)
	}
	return fmt.Sprintf("%x/%d", h.Sum64(), len(w.traceLog))
}

// TestReplay: one seed decides everything, so a seed replays bit for bit (every trace line,
// handler logs included, at the same virtual instant).
func TestReplay(t *testing.T) {
	f, err := Profile("all")
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range []uint64{3, 63} {
		var prints [2]string
		for i := range prints {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Faults = f
				w := New(seed, cfg)
				w.Run()
				prints[i] = fingerprint(w)
			})
		}
		if prints[0] != prints[1] {
			t.Errorf("seed %d ran twice: fingerprints %s and %s, want the same", seed, prints[0], prints[1])
		}
	}
}

// TestSurvey runs -seeds seeds of -profile on GOMAXPROCS workers, counts violations by kind and
// prints runs per minute: the long run and the benchmark (testing/synctest needs a *testing.T, so
// a Benchmark cannot host the runs):
//
//	go test ./internal/tools/simworld -run TestSurvey -args -seeds 100000 -profile all
func TestSurvey(t *testing.T) {
	if *flagSeeds == 0 {
		t.Skip("-seeds not set")
	}
	f, err := Profile(*flagProf)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	failed := forSeedsProgress(t, *flagFrom, *flagSeeds, f, max(*flagSeeds/20, 100))
	kinds := map[string][]uint64{}
	for s, vs := range failed {
		seen := map[string]bool{}
		for _, v := range vs {
			if !seen[v.Kind] {
				seen[v.Kind] = true
				kinds[v.Kind] = append(kinds[v.Kind], s)
			}
		}
	}
	var b strings.Builder
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ss := kinds[k]
		sort.Slice(ss, func(i, j int) bool { return ss[i] < ss[j] })
		fmt.Fprintf(&b, "%-32s %4d seeds, first %v\n", k, len(ss), ss[:min(8, len(ss))])
	}
	d := time.Since(start)
	fmt.Fprintf(os.Stderr, "%d seeds (profile %s) in %s: %.0f runs a minute\n%s", *flagSeeds, *flagProf, d.Round(time.Millisecond),
		float64(*flagSeeds)/d.Minutes(), b.String())
}

var flagExcept = flag.String("except", "", "seeds TestFirstViolation does not run (comma-separated: seeds that fail without the change under test)")

// TestFirstViolation runs -seeds seeds of -profile from -from, but the -except ones, and stops at
// the first (lowest) seed that breaks an invariant: the mutation check's probe (internal/tools/mutate).
// It prints one line the check reads, "first violation: seed S after R seeds: V" or "no violation
// in R seeds", and passes either way; seeds run in parallel, but the answer is the lowest failing
// seed, so it does not depend on scheduling.
func TestFirstViolation(t *testing.T) {
	if *flagSeeds == 0 {
		t.Skip("-seeds not set")
	}
	f, err := Profile(*flagProf)
	if err != nil {
		t.Fatal(err)
	}
	except, err := parseSeeds(*flagExcept)
	if err != nil {
		t.Fatal(err)
	}
	seed, v, ran := firstViolation(t, *flagFrom, *flagSeeds, f, except)
	if v == nil {
		fmt.Printf("no violation in %d seeds\n", ran)
		return
	}
	fmt.Printf("first violation: seed %d after %d seeds: %s\n", seed, ran, v)
}

func parseSeeds(list string) (map[uint64]bool, error) {
	out := map[uint64]bool{}
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-except %q: %w", list, err)
		}
		out[n] = true
	}
	return out, nil
}

// firstViolation runs seeds from..from+n-1 but except on GOMAXPROCS workers until one breaks an
// invariant, and returns the lowest failing seed, its first violation (nil: none) and how many
// seeds up to it ran. Seeds are handed out in order, so when seed s fails every seed below it is
// run or running; no seed above the lowest failure is started.
func firstViolation(t *testing.T, from uint64, n int, f Faults, except map[uint64]bool) (uint64, *Violation, int) {
	var (
		mu    sync.Mutex
		first = from + uint64(n) // the lowest failing seed, or past the last
		found *Violation
		next  atomic.Uint64
		wg    sync.WaitGroup
	)
	next.Store(from)
	limit := func() uint64 { mu.Lock(); defer mu.Unlock(); return first }
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				s := next.Add(1) - 1
				if s >= limit() {
					return
				}
				if except[s] {
					continue
				}
				if _, vs := runQuiet(t, s, f); len(vs) > 0 {
					mu.Lock()
					if s < first {
						first, found = s, &vs[0]
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	last := min(first, from+uint64(n)-1)
	ran := 0
	for s := from; s <= last; s++ {
		if !except[s] {
			ran++
		}
	}
	if found == nil {
		return 0, nil, ran
	}
	return first, found, ran
}
