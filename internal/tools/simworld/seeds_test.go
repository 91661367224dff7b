package simworld

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var (
	flagSeeds = flag.Int("seeds", 0, "seeds for TestSurvey (0: skip)")
	flagFrom  = flag.Uint64("from", 1, "first seed of TestSurvey")
	flagProf  = flag.String("profile", "all", "fault profile of TestSurvey and TestOneSeed (see Profiles)")
)

// TestSurvey runs -seeds seeds with every fault class on and counts violations by kind (a tool
// for looking, not a gate).
func TestSurvey(t *testing.T) {
	if *flagSeeds == 0 {
		t.Skip("-seeds not set")
	}
	kinds := map[string][]uint64{}
	start := time.Now()
	for s := *flagFrom; s < *flagFrom+uint64(*flagSeeds); s++ {
		var vs []Violation
		synctest.Test(t, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Trace = false
			f, err := Profile(*flagProf)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Faults = f
			vs = New(s, cfg).Run()
		})
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
		fmt.Fprintf(&b, "%-32s %4d seeds, first %v\n", k, len(kinds[k]), kinds[k][:min(8, len(kinds[k]))])
	}
	fmt.Fprintf(os.Stderr, "%d seeds in %s\n%s", *flagSeeds, time.Since(start).Round(time.Millisecond), b.String())
}
