package lane_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// idFamilies are shapes of job ids producers use.
var idFamilies = map[string]func(i int) string{
	"sequential": func(i int) string { return fmt.Sprintf("job-%d", i) },
	"padded":     func(i int) string { return fmt.Sprintf("order-%08d", i) },
	"even only":  func(i int) string { return fmt.Sprintf("order-%08d", 2*i) },
	"decimal":    func(i int) string { return fmt.Sprintf("%d", i) },
	"uuid-like":  func(i int) string { return fmt.Sprintf("%08x-87a3-44ab-83d2-%012x", uint32(i*2654435761), i) },
}

func TestHashedChooseInRange(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		giveLimit int
	}{
		{name: "one lane", giveLimit: 1},
		{name: "two lanes", giveLimit: 2},
		{name: "seven lanes", giveLimit: 7},
		{name: "fifty lanes", giveLimit: 50},
		{name: "the in-flight quota", giveLimit: 120000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for fam, id := range idFamilies {
				for i := range 2000 {
					j := job.Job{Type: "payments", ID: id(i), Attempts: i % 3}
					got, err := lane.Hashed{}.Choose(ctx, j, tt.giveLimit)
					if err != nil || got < 1 || got > tt.giveLimit {
						t.Fatalf("Choose(%s id %q, %d) = %d, %v, want 1..%d", fam, j.ID, tt.giveLimit, got, err, tt.giveLimit)
					}
				}
			}
		})
	}
}

func TestHashedChooseSameJobSameLane(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		give      job.Job
		giveLimit int
	}{
		{name: "plain", give: job.Job{Type: "payments", ID: "order-1"}, giveLimit: 50},
		{name: "uuid", give: job.Job{Type: "reports", ID: "059f36b4-87a3-44ab-83d2-661975830a7d"}, giveLimit: 5},
		{name: "moved job", give: job.Job{Type: "reports", ID: "r-9", Attempts: 2}, giveLimit: 13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, err := lane.Hashed{}.Choose(ctx, tt.give, tt.giveLimit)
			if err != nil {
				t.Fatalf("Choose(%+v, %d) error = %v", tt.give, tt.giveLimit, err)
			}
			for range 20 {
				// The same job delivered again, perhaps with another input or time: same lane.
				again := tt.give
				again.Input = []byte(`{"retry":true}`)
				if got, err := (lane.Hashed{}).Choose(ctx, again, tt.giveLimit); err != nil || got != first {
					t.Fatalf("Choose(%+v, %d) = %d, %v, want %d as before", again, tt.giveLimit, got, err, first)
				}
			}
		})
	}
}

// Lanes spread jobs about evenly: a chi-square statistic far below what an uneven spread gives.
func TestHashedChooseSpread(t *testing.T) {
	ctx := context.Background()
	const ids = 10000
	for _, limit := range []int{2, 3, 7, 10, 16, 50} {
		for fam, id := range idFamilies {
			t.Run(fmt.Sprintf("%s over %d lanes", fam, limit), func(t *testing.T) {
				counts := make([]int, limit+1)
				for i := range ids {
					ln, err := lane.Hashed{}.Choose(ctx, job.Job{Type: "payments", ID: id(i)}, limit)
					if err != nil {
						t.Fatalf("Choose error = %v", err)
					}
					counts[ln]++
				}
				want := float64(ids) / float64(limit)
				chi2 := 0.0
				for ln := 1; ln <= limit; ln++ {
					d := float64(counts[ln]) - want
					chi2 += d * d / want
				}
				// Degrees of freedom plus ten standard deviations: a uniform spread is far below it
				// (p < 1e-9), while one lane with a quarter more jobs than its share is above it at 10 lanes.
				df := float64(limit - 1)
				if bound := df + 10*math.Sqrt(2*df); chi2 > bound {
					t.Errorf("%d %s ids over %d lanes: chi-square %.1f > %.1f, counts %v", ids, fam, limit, chi2, bound, counts[1:])
				}
			})
		}
	}
}

func TestHashedChooseBadLimit(t *testing.T) {
	for _, limit := range []int{0, -1, math.MinInt} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			got, err := lane.Hashed{}.Choose(context.Background(), job.Job{Type: "payments", ID: "order-1"}, limit)
			if err == nil {
				t.Errorf("Choose(payments/order-1, %d) = %d, nil, want error", limit, got)
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr bool
	}{
		{name: "random", give: "random"},
		{name: "least-loaded is first-free now: no chooser", give: "least-loaded", wantErr: true},
		{name: "the default is first-free: no chooser", give: "", wantErr: true},
		{name: "bogus", give: "bogus", wantErr: true},
		{name: "capitalised", give: "Random", wantErr: true},
		{name: "round-robin is not known", give: "round-robin", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := lane.New(tt.give)
			if tt.wantErr {
				if err == nil {
					t.Errorf("New(%q) = %T, nil, want error", tt.give, c)
				}
				return
			}
			if err != nil || c == nil {
				t.Fatalf("New(%q) = %v, %v, want a chooser", tt.give, c, err)
			}
			seen := map[int]bool{}
			for i := range 1000 {
				ln, err := c.Choose(context.Background(), job.Job{Type: "t", ID: fmt.Sprint(i)}, 4)
				if err != nil || ln < 1 || ln > 4 {
					t.Fatalf("New(%q).Choose(t/%d, 4) = %d, %v, want 1..4", tt.give, i, ln, err)
				}
				seen[ln] = true
			}
			if len(seen) != 4 {
				t.Errorf("New(%q).Choose over 1000 jobs used lanes %v, want all of 1..4", tt.give, seen)
			}
		})
	}
}

// Sequential ids (order numbers) spread evenly over many lanes too.
func TestHashedSpreadsSequentialIDsOverManyLanes(t *testing.T) {
	for _, limit := range []int{500, 1000} {
		const perLane = 100
		n := limit * perLane
		counts := make([]int, limit+1)
		for i := range n {
			ln, err := lane.Hashed{}.Choose(context.Background(), job.Job{Type: "orders", ID: fmt.Sprintf("order-%d", i)}, limit)
			if err != nil {
				t.Fatal(err)
			}
			counts[ln]++
		}
		chi := 0.0
		for _, c := range counts[1:] {
			d := float64(c - perLane)
			chi += d * d / perLane
		}
		// Chi-square with limit-1 degrees of freedom: mean limit-1, sd sqrt(2(limit-1)). Six sd is
		// far beyond chance and well below the 867-1256 the unmixed hash gave for 500 lanes.
		if bound := float64(limit-1) + 6*math.Sqrt(2*float64(limit-1)); chi > bound {
			t.Errorf("limit %d: chi-square %.0f over %d lanes, want at most %.0f (uneven lanes)", limit, chi, limit, bound)
		}
	}
}

// A type's waiting groups grow with its limit, one per JobsPerWaitingGroup lanes; a job's group
// depends only on the job (so a job routed twice is deduplicated in its group) and jobs spread
// evenly over the groups.
func TestWaitingGroup(t *testing.T) {
	for _, tt := range []struct{ limit, want int }{{1, 1}, {5, 1}, {10, 1}, {11, 2}, {50, 5}, {300, 30}} {
		if got := lane.WaitingGroups(tt.limit); got != tt.want {
			t.Errorf("WaitingGroups(%d) = %d, want %d", tt.limit, got, tt.want)
		}
	}
	const limit, jobs = 50, 5000
	hits := map[int]int{}
	for i := range jobs {
		j := job.Job{Type: "llm", ID: fmt.Sprintf("doc-%d", i)}
		k := lane.WaitingGroup(j, limit)
		if again := lane.WaitingGroup(j, limit); again != k || k < 0 || k >= 5 {
			t.Fatalf("WaitingGroup(%s, %d) = %d then %d, want the same group in 0..4", j.ID, limit, k, again)
		}
		hits[k]++
	}
	for k := range 5 {
		if share := float64(jobs) / 5; float64(hits[k]) < 0.8*share || float64(hits[k]) > 1.2*share {
			t.Errorf("group %d got %d of %d jobs, want about %.0f", k, hits[k], jobs, share)
		}
	}
}

// Spread lists every lane once, from a start that depends on the job, so concurrent binders try
// different free lanes first.
func TestSpread(t *testing.T) {
	starts := map[int]bool{}
	for i := range 200 {
		j := job.Job{Type: "llm", ID: fmt.Sprintf("doc-%d", i)}
		got := lane.Spread(j, 7)
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		if !slices.Equal(sorted, []int{1, 2, 3, 4, 5, 6, 7}) {
			t.Fatalf("Spread(%s, 7) = %v, want each of 1..7 once", j.ID, got)
		}
		for i := 1; i < len(got); i++ {
			if got[i] != got[i-1]%7+1 {
				t.Fatalf("Spread(%s, 7) = %v, want consecutive lanes wrapping around", j.ID, got)
			}
		}
		starts[got[0]] = true
	}
	if len(starts) != 7 {
		t.Errorf("Spread started at lanes %v over 200 jobs, want all 7", starts)
	}
	if got := lane.Spread(job.Job{Type: "llm", ID: "x"}, 0); got != nil {
		t.Errorf("Spread(limit 0) = %v, want none", got)
	}
}

// least-loaded is retired: a configured one reads as first-free, and choosing it anew is refused
// with the reason.
func TestParseStrategy(t *testing.T) {
	for give, want := range map[string]string{"": lane.FirstFree, "random": "random", "hashed": "random", "first-free": "first-free", "least-loaded": "first-free"} {
		if got, err := lane.ParseStrategy(give); err != nil || got != want {
			t.Errorf("ParseStrategy(%q) = %q, %v; want %q", give, got, err, want)
		}
	}
	if _, err := lane.ParseStrategy("shortest"); err == nil || !strings.Contains(err.Error(), "first-free") {
		t.Errorf("ParseStrategy(shortest) error = %v, want one listing the strategies", err)
	}
	if got, err := lane.CheckChoosable("least-loaded"); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Errorf("CheckChoosable(least-loaded) = %q, %v, want the retirement error", got, err)
	}
	if got, err := lane.CheckChoosable("random"); err != nil || got != "random" {
		t.Errorf("CheckChoosable(random) = %q, %v, want random", got, err)
	}
	if !slices.Equal(lane.Strategies, []string{"first-free", "random"}) || lane.DefaultStrategy != lane.FirstFree {
		t.Errorf("Strategies = %q (default %q), want first-free (the default) and random", lane.Strategies, lane.DefaultStrategy)
	}
}

// A redriven job is a new run: its lane choice (random's hash) and its waiting group are drawn
// afresh, while generation 0 keeps the choice jobs routed before generations existed had.
func TestRedriveGenerationDrawsAFreshLane(t *testing.T) {
	ctx := context.Background()
	// oldHash is the hash of type and id (and attempts) as it was before generations were mixed in.
	oldHash := func(j job.Job) uint64 {
		h := fnv.New64a()
		h.Write([]byte(j.Type))
		h.Write([]byte{0})
		h.Write([]byte(j.ID))
		if j.Attempts > 0 {
			fmt.Fprintf(h, "#%d", j.Attempts)
		}
		x := h.Sum64()
		x ^= x >> 33
		x *= 0xff51afd7ed558ccd
		x ^= x >> 33
		x *= 0xc4ceb9fe1a85ec53
		x ^= x >> 33
		return x
	}
	const limit = 97
	differ, tiesDiffer := 0, 0
	for i := range 200 {
		j := job.Job{Type: "llm", ID: "job-" + strconv.Itoa(i), Attempts: i % 3}
		g0, err := lane.Hashed{}.Choose(ctx, j, limit)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 + int(oldHash(j)%limit); g0 != want {
			t.Fatalf("generation 0 of %+v: lane %d, want %d as before", j, g0, want)
		}
		r := j
		r.Redrive = 1
		g1, _ := lane.Hashed{}.Choose(ctx, r, limit)
		if g1 != g0 {
			differ++
		}
		j.Attempts = 0
		r.Attempts = 0
		l0, l1 := lane.WaitingGroup(j, limit*lane.JobsPerWaitingGroup), lane.WaitingGroup(r, limit*lane.JobsPerWaitingGroup)
		if want := int(oldHash(j) % limit); l0 != want {
			t.Fatalf("generation 0 of %+v: waiting group %d, want %d", j, l0, want)
		}
		if l1 != l0 {
			tiesDiffer++
		}
	}
	// Independent draws from 97 lanes agree about 2 times in 200; the same draw agrees 200 times.
	if differ < 150 || tiesDiffer < 150 {
		t.Errorf("redrive 1 chose another lane than generation 0 for %d (random) and another waiting group for %d of 200 jobs, want most", differ, tiesDiffer)
	}
}
