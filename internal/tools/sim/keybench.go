package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Issue 13's scenarios for per-key limits: a noisy key's backlog beside quiet keys (isolation), and
// keys with backlogs and nothing else (work conservation).

// The noisy key's name; quiet keys are quiet-01, quiet-02, ...
const NoisyKey = "noisy"

// QuietKey is the name of quiet key q, 0-based.
func QuietKey(q int) string { return fmt.Sprintf("quiet-%02d", q+1) }

// KeyIsolation is the isolation scenario: the noisy key submits NoisyJobs jobs at time 0, and each of
// QuietKeys quiet keys submits QuietJobs jobs at once, as one burst at a time drawn uniformly over
// [0, Window). Bursts make quiet keys overlap, so that they wait for one another even without the
// noisy key: a quiet wait of 0 with and without it would make the ratio of the two say nothing. The
// window sets how often they overlap: see QuietLoad.
type KeyIsolation struct {
	Limit     int     `json:"limit"`
	KeyLimit  int     `json:"keyLimit"`
	NoisyJobs int     `json:"noisyJobs"`
	QuietKeys int     `json:"quietKeys"`
	QuietJobs int     `json:"quietJobs"` // per quiet key
	Window    float64 `json:"window"`    // in mean durations
	Sigma     float64 `json:"sigma"`
	Runs      int     `json:"runs"`
}

// IsolationWindow is the window of the headline isolation scenario: the time the type's lanes take
// to run the quiet keys' jobs (QuietKeys x QuietJobs mean durations over Limit lanes), so that the
// quiet keys alone load the lanes fully over the window (QuietLoad 1). A longer window thins them out:
// at the noisy backlog's drain time (NoisyJobs / KeyLimit) they seldom overlap and wait almost never
// without the noisy key.
func (c KeyIsolation) IsolationWindow() float64 {
	return float64(c.QuietKeys*c.QuietJobs) / float64(c.Limit)
}

// DrainTime is how long the noisy key's backlog takes to run at its cap, in mean durations.
func (c KeyIsolation) DrainTime() float64 { return float64(c.NoisyJobs) / float64(c.KeyLimit) }

// QuietLoad is the quiet keys' work over the window as a share of the type's lanes.
func (c KeyIsolation) QuietLoad() float64 {
	return float64(c.QuietKeys*c.QuietJobs) / (float64(c.Limit) * c.Window)
}

// Limits are the scenario's limits: Limit lanes, every key capped at KeyLimit.
func (c KeyIsolation) Limits() KeyLimits { return KeyLimits{Limit: c.Limit, KeyLimit: c.KeyLimit} }

// DefaultKeyIsolation is issue 13's scenario: limit 10, key cap 5, a noisy key with 1,000 jobs and 20
// quiet keys with 5 jobs each over the headline window, durations of sigma 1, 200 runs.
func DefaultKeyIsolation() KeyIsolation {
	c := KeyIsolation{Limit: 10, KeyLimit: 5, NoisyJobs: 1000, QuietKeys: 20, QuietJobs: 5, Sigma: 1, Runs: 200}
	c.Window = c.IsolationWindow()
	return c
}

func (c KeyIsolation) validate() error {
	switch {
	case c.Limit < 1 || c.KeyLimit < 1:
		return fmt.Errorf("isolation scenario: limit %d and key limit %d must be at least 1", c.Limit, c.KeyLimit)
	case c.NoisyJobs < 1 || c.QuietKeys < 1 || c.QuietJobs < 1 || c.Runs < 1:
		return fmt.Errorf("isolation scenario: noisy jobs, quiet keys, quiet jobs and runs must be at least 1 (%d, %d, %d, %d)",
			c.NoisyJobs, c.QuietKeys, c.QuietJobs, c.Runs)
	case !(c.Window > 0) || math.IsInf(c.Window, 0):
		return fmt.Errorf("isolation scenario: window %g must be finite and above 0", c.Window)
	case !(c.Sigma >= 0) || math.IsInf(c.Sigma, 0):
		return fmt.Errorf("isolation scenario: sigma %g must be finite and at least 0", c.Sigma)
	}
	return nil
}

// Workload draws run r's jobs: the noisy key's durations, then each quiet key's burst time and
// durations, from the random source (seed, r).
func (c KeyIsolation) Workload(seed uint64, r int) KeyedWorkload {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	w := KeyedWorkload{Workload: Workload{Name: fmt.Sprintf("keys-s%d-r%d", seed, r)}}
	add := func(at, d float64, key string) {
		w.Arrivals = append(w.Arrivals, at)
		w.Durations = append(w.Durations, d)
		w.Keys = append(w.Keys, key)
	}
	for range c.NoisyJobs {
		add(0, Lognormal(rng, c.Sigma), NoisyKey)
	}
	type burst struct {
		at  float64
		key string
		ds  []float64
	}
	bursts := make([]burst, c.QuietKeys)
	for q := range bursts {
		bursts[q] = burst{at: rng.Float64() * c.Window, key: QuietKey(q), ds: make([]float64, c.QuietJobs)}
		for k := range bursts[q].ds {
			bursts[q].ds[k] = Lognormal(rng, c.Sigma)
		}
	}
	// Submission order is arrival order; the noisy key's jobs at 0 come first.
	slices.SortStableFunc(bursts, func(a, b burst) int { return cmp.Compare(a.at, b.at) })
	for _, b := range bursts {
		for _, d := range b.ds {
			add(b.at, d, b.key)
		}
	}
	return w
}

// WaitFigures are pooled waits.
type WaitFigures struct {
	Jobs int     `json:"jobs"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
}

func waitFigures(waits []float64) WaitFigures {
	f := WaitFigures{Jobs: len(waits), P50: quantile(waits, 0.5), P99: quantile(waits, 0.99)}
	for _, v := range waits {
		f.Mean += v / float64(len(waits))
	}
	return f
}

// Utilization is pooled lane use: busy lanes over the limit while jobs waited.
type Utilization struct {
	// Backlogged is the time, over all runs, during which any job waited, and Share the lanes busy
	// during it; a key's cap leaves lanes free on purpose when only that key waits.
	Backlogged float64 `json:"backlogged"`
	Share      float64 `json:"share"`
	// Startable is the time during which a job waited that its key's cap let start, and
	// StartableShare the lanes busy during it: below 1, a lane was free while such a job waited.
	Startable      float64 `json:"startable"`
	StartableShare float64 `json:"startableShare"`
	busy, sbusy    float64
	slots          int
}

func (u *Utilization) add(r KeyedResult) {
	u.Backlogged += r.Backlogged
	u.busy += r.Busy
	u.Startable += r.Startable
	u.sbusy += r.StartableBusy
	u.slots = r.Slots
	if u.Backlogged > 0 {
		u.Share = u.busy / (u.Backlogged * float64(u.slots))
	}
	if u.Startable > 0 {
		u.StartableShare = u.sbusy / (u.Startable * float64(u.slots))
	}
}

// KeyRunning is how many of one key's jobs ran at once, over a scenario's runs.
type KeyRunning struct {
	Cap int `json:"cap"`
	// Max is the most that ran at once in any run; MinBacklogged the fewest that ran while one of its
	// jobs waited, in any run; MeanBacklogged the time-weighted mean while one waited, pooled.
	Max            int     `json:"max"`
	MinBacklogged  int     `json:"minBacklogged"`
	MeanBacklogged float64 `json:"meanBacklogged"`
	backlogged     float64
	busy           float64
}

func (k *KeyRunning) add(s KeyStats) {
	if s.Backlogged > 0 && (k.backlogged == 0 || s.MinRunning < k.MinBacklogged) {
		k.MinBacklogged = s.MinRunning
	}
	k.Cap = s.Cap
	k.Max = max(k.Max, s.MaxRunning)
	k.backlogged += s.Backlogged
	k.busy += s.Busy
	if k.backlogged > 0 {
		k.MeanBacklogged = k.busy / k.backlogged
	}
}

// IsolationFigures are one order's figures in the isolation scenario.
type IsolationFigures struct {
	Order KeyOrder `json:"order"`
	// With and Without are the quiet keys' waits with the noisy key and without it, on the same
	// quiet jobs.
	With    WaitFigures `json:"with"`
	Without WaitFigures `json:"without"`
	// Noisy is the noisy key's running jobs beside the quiet keys, NoisyAlone with no quiet key.
	Noisy      KeyRunning `json:"noisy"`
	NoisyAlone KeyRunning `json:"noisyAlone"`
	// Utilization is the lanes' use with the noisy and the quiet keys.
	Utilization Utilization `json:"utilization"`
	// MaxRunning is the most jobs that ran at once, and MaxKeyOverCap the most that any key ran above
	// its cap (0 under a keyed order), over every run with or without the noisy key.
	MaxRunning    int `json:"maxRunning"`
	MaxKeyOverCap int `json:"maxKeyOverCap"`
}

// P99Ratio is the quiet keys' p99 wait with the noisy key over their p99 without it (Ratio).
func (f IsolationFigures) P99Ratio() (float64, bool) { return Ratio(f.With.P99, f.Without.P99) }

// KeyIsolationResult is the isolation scenario's figures for each order.
type KeyIsolationResult struct {
	Scenario KeyIsolation       `json:"scenario"`
	Seed     uint64             `json:"seed"`
	Orders   []IsolationFigures `json:"orders"`
}

// RunKeyIsolation runs scenario c under each order: each run's workload (c.Workload(seed, r)) with
// the noisy key, without it, and the noisy key alone.
func RunKeyIsolation(ctx context.Context, c KeyIsolation, seed uint64, orders []KeyOrder) (KeyIsolationResult, error) {
	if err := c.validate(); err != nil {
		return KeyIsolationResult{}, err
	}
	out := KeyIsolationResult{Scenario: c, Seed: seed, Orders: make([]IsolationFigures, len(orders))}
	with := make([][]float64, len(orders))
	without := make([][]float64, len(orders))
	for r := range c.Runs {
		w := c.Workload(seed, r)
		quiet := w.Without(NoisyKey)
		// The noisy key's jobs come first in w, all at 0.
		alone := KeyedWorkload{Workload: Workload{Name: w.Name + "-alone", Arrivals: make([]float64, c.NoisyJobs), Durations: w.Durations[:c.NoisyJobs]}, Keys: w.Keys[:c.NoisyJobs]}
		// The same jobs three ways: with the noisy key, without it, and the noisy key alone.
		variants := []KeyedWorkload{w, quiet, alone}
		for k, o := range orders {
			f := &out.Orders[k]
			f.Order = o
			for v, vw := range variants {
				res, err := RunKeyed(ctx, vw, c.Limits(), o, Always)
				if err != nil {
					return KeyIsolationResult{}, fmt.Errorf("isolation scenario, order %s: %w", o, err)
				}
				f.MaxRunning = max(f.MaxRunning, res.MaxRunning)
				for key, s := range res.Keys {
					f.MaxKeyOverCap = max(f.MaxKeyOverCap, s.MaxRunning-c.Limits().Cap(key))
				}
				switch v {
				case 0:
					f.Noisy.add(res.Keys[NoisyKey])
					f.Utilization.add(res)
					with[k] = appendQuietWaits(with[k], vw, res)
				case 1:
					without[k] = appendQuietWaits(without[k], vw, res)
				case 2:
					f.NoisyAlone.add(res.Keys[NoisyKey])
				}
			}
		}
	}
	for k := range orders {
		out.Orders[k].With = waitFigures(with[k])
		out.Orders[k].Without = waitFigures(without[k])
	}
	return out, nil
}

func appendQuietWaits(waits []float64, w KeyedWorkload, r KeyedResult) []float64 {
	for i, key := range w.Keys {
		if key != NoisyKey {
			waits = append(waits, r.Wait(w.Workload, i))
		}
	}
	return waits
}

// KeyBacklog is a work conservation scenario: keys whose backlogs all arrive at time 0, and nothing
// else.
type KeyBacklog struct {
	Name     string `json:"name"`
	Limit    int    `json:"limit"`
	KeyLimit int    `json:"keyLimit"`
	// Backlogs is each key's jobs; key k is "key-{k+1}".
	Backlogs []int   `json:"backlogs"`
	Sigma    float64 `json:"sigma"`
	Runs     int     `json:"runs"`
}

// BacklogKey is the name of a backlog scenario's key k, 0-based.
func BacklogKey(k int) string { return fmt.Sprintf("key-%d", k+1) }

// DefaultKeyBacklogs are issue 13's work conservation scenarios at limit 10 and key cap 5: one key
// with 200 jobs, which must run exactly 5 at a time; and several keys with backlogs, which must keep
// the lanes busy, with equal backlogs and with unequal ones (whose largest is left alone at the end,
// capped at half the lanes).
func DefaultKeyBacklogs() []KeyBacklog {
	return []KeyBacklog{
		{Name: "one key", Limit: 10, KeyLimit: 5, Backlogs: []int{200}, Sigma: 1, Runs: 200},
		{Name: "four keys, equal", Limit: 10, KeyLimit: 5, Backlogs: []int{100, 100, 100, 100}, Sigma: 1, Runs: 200},
		{Name: "three keys, unequal", Limit: 10, KeyLimit: 5, Backlogs: []int{50, 100, 150}, Sigma: 1, Runs: 200},
	}
}

func (c KeyBacklog) validate() error {
	switch {
	case c.Limit < 1 || c.KeyLimit < 1 || c.Runs < 1 || len(c.Backlogs) == 0:
		return fmt.Errorf("backlog scenario %q: limit %d, key limit %d, runs %d and keys %d must be at least 1", c.Name, c.Limit, c.KeyLimit, c.Runs, len(c.Backlogs))
	case slices.ContainsFunc(c.Backlogs, func(n int) bool { return n < 1 }):
		return fmt.Errorf("backlog scenario %q: every key needs a job (%v)", c.Name, c.Backlogs)
	case !(c.Sigma >= 0) || math.IsInf(c.Sigma, 0):
		return fmt.Errorf("backlog scenario %q: sigma %g must be finite and at least 0", c.Name, c.Sigma)
	}
	return nil
}

// Limits are the scenario's limits.
func (c KeyBacklog) Limits() KeyLimits { return KeyLimits{Limit: c.Limit, KeyLimit: c.KeyLimit} }

// Workload draws run r's jobs: every key's jobs at time 0, the keys' interleaved round-robin in
// submission order (as several clients submitting at once), from the random source (seed, r).
func (c KeyBacklog) Workload(seed uint64, r int) KeyedWorkload {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	w := KeyedWorkload{Workload: Workload{Name: fmt.Sprintf("backlog-s%d-r%d", seed, r)}}
	left := slices.Clone(c.Backlogs)
	for more := true; more; {
		more = false
		for k := range left {
			if left[k] == 0 {
				continue
			}
			left[k]--
			more = true
			w.Arrivals = append(w.Arrivals, 0)
			w.Durations = append(w.Durations, Lognormal(rng, c.Sigma))
			w.Keys = append(w.Keys, BacklogKey(k))
		}
	}
	return w
}

// KeyBacklogResult is a backlog scenario's figures under one order.
type KeyBacklogResult struct {
	Scenario    KeyBacklog   `json:"scenario"`
	Order       KeyOrder     `json:"order"`
	Seed        uint64       `json:"seed"`
	MaxRunning  int          `json:"maxRunning"`
	Keys        []KeyRunning `json:"keys"`
	Utilization Utilization  `json:"utilization"`
	Makespan    float64      `json:"makespan"` // mean over runs
}

// RunKeyBacklog runs scenario c under order o.
func RunKeyBacklog(ctx context.Context, c KeyBacklog, seed uint64, o KeyOrder) (KeyBacklogResult, error) {
	if err := c.validate(); err != nil {
		return KeyBacklogResult{}, err
	}
	out := KeyBacklogResult{Scenario: c, Order: o, Seed: seed, Keys: make([]KeyRunning, len(c.Backlogs))}
	for r := range c.Runs {
		res, err := RunKeyed(ctx, c.Workload(seed, r), c.Limits(), o, Always)
		if err != nil {
			return KeyBacklogResult{}, fmt.Errorf("backlog scenario %q: %w", c.Name, err)
		}
		out.MaxRunning = max(out.MaxRunning, res.MaxRunning)
		for k := range out.Keys {
			out.Keys[k].add(res.Keys[BacklogKey(k)])
		}
		out.Utilization.add(res)
		out.Makespan += res.Makespan / float64(c.Runs)
	}
	return out, nil
}
