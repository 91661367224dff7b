package simworld

import (
	"cmp"
	"context"
	"maps"
	"slices"

	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// Faults are the probabilities of each fault class (0: off).
type Faults struct {
	// DDBAmbiguous: a write applied whose answer is lost, then the SDK's retry of the same request
	// answered (ConditionalCheckFailed when the write was conditional on the state it changed).
	DDBAmbiguous float64
	// DDBLost: a write applied whose answer is lost, and the SDK gives up (an error).
	DDBLost float64
	// DDBThrottle: a call throttled past the SDK's retries, not applied.
	DDBThrottle float64
	// DDBConflict: a transaction cancelled with TransactionConflict.
	DDBConflict float64
	// SFNThrottle: a Step Functions call throttled; SFNLost: a start that went through, its answer
	// lost; SFNStale: a DescribeExecution or ListExecutions answer up to StaleWindow behind.
	SFNThrottle, SFNLost, SFNStale float64
	// Duplicate: the event source hands a batch to two invocations.
	Duplicate float64
	// Kill: an invocation killed at one of its AWS calls (before it, or after it with its answer
	// lost): its batch comes back after the visibility timeout.
	Kill float64
	// EventDrop, EventDup, EventDelay: status-change events lost, sent twice, or up to 30 s late
	// (so out of order).
	EventDrop, EventDup, EventDelay float64
	// Slow: a call that takes 0.5-5 s instead of milliseconds (a network stall, an SDK retry
	// after a timeout), which widens every window between a read and the write that depends on it.
	Slow float64
	// LimitChanges is how many times an operator changes a type's limit during a run.
	LimitChanges int
	// Actions is how many other operator actions a run has (operator.go): pause and resume, start
	// rates, key caps, config reset, dead-letter redrive, StopExecution.
	Actions int
	// Skew bounds each function container's clock offset from true time (skew.go).
	Skew time.Duration
	// Bus: EventBridge's PutEvents refused whole, an entry refused, an outage (events.go).
	Bus BusFaults
	// Interlopers is how many jobs another tenant sends naming the workload's batches
	// (interloper.go).
	Interlopers int
	// Pools turns shared pools on (pools.go), with as many live changes of a pool's cap.
	Pools int
	// SharedIDs: the share of keyed jobs whose producer names them as another key's job of their
	// type was named (reuseOtherKeysID). Not a fault: a job is its type, key and id, and both must run.
	SharedIDs float64
	// Cancels is how many bursts of jobs of a type with the overflow rule cancel the world has
	// (cancel.go; 0: no such type).
	Cancels int
	// Skips is how many bursts of jobs of a type with the overflow rule skip the world has
	// (skip.go; 0: no such type).
	Skips int
}

// Config is one run's shape. Seeded fields are drawn from the seed; the rest are fixed.
type Config struct {
	Jobs int
	// BatchShare is about the share of jobs sent in batches (batches.go; 0: none).
	BatchShare float64
	// BatchBurst is the share of batches whose jobs are all sent within 2 s of the first (0: none,
	// and nothing is drawn for it, so that runs without it stay as they were).
	BatchBurst float64
	Faults     Faults
	// Visibility is the lanes queue's visibility timeout (FIFO_VISIBILITY_TIMEOUT).
	Visibility       time.Duration
	SweepEvery       time.Duration
	ExecutionTimeout time.Duration
	ReleaserTimeout  time.Duration
	FunctionTimeout  time.Duration
	// IdleBound is the work-conservation bound: no type may have a free lane for longer than this
	// while one of its jobs that may run waits (0: derived from the faults on).
	IdleBound time.Duration
	// LanesBacklog is MAX_LANES_BACKLOG (0: no bound on the lanes queue's backlog); the router
	// then holds jobs back in the general queue, BACKLOG_HOLD_SECONDS 60.
	LanesBacklog int
	// Flood names a type whose jobs all arrive in the run's first second (others keep theirs).
	Flood string
	// MaxTime ends a run that has not settled.
	MaxTime time.Duration
	// Override adjusts each type's live override at the start (nil: the workload's alone), as an
	// operator's `config set` would before the first job: benchmarks set rates with it.
	Override func(*config.Override)
	// Trace keeps a trace for failure reports.
	Trace bool
	// AWS, when set, gives the services AWS's own latencies and quotas (awsmodel.go); nil is the
	// default world, whose draws the fixed seeds and the finds pin.
	AWS *AWSModel
	// StarterConcurrency is the lanes event source's MaximumConcurrency (0: 5).
	StarterConcurrency int
	// Shape, when set, is the workload instead of the drawn one (benchmarks): its types, jobs and
	// deployment settings.
	Shape *Shape
}

// Shape is a workload a benchmark sets: first-free step-mode types with their limits, the jobs
// (each succeeds on its first attempt), and environment settings of the deployment (POOL_CAPS, ...).
type Shape struct {
	Types map[string]int // limit of each type
	// KeyLimits caps each key of a type (TYPE_KEY_LIMITS; none: keys uncapped).
	KeyLimits map[string]int
	Jobs      []ShapeJob
	Env       map[string]string
}

// ShapeJob is one job of a Shape: its type, when it is submitted after the run's start, and how
// long its execution works.
type ShapeJob struct {
	Type     string
	Key      string
	At       time.Duration
	Duration time.Duration
}

// shaped is the Shape's workload, as workload draws one.
func (w *World) shaped() []typeSpec {
	var ts []typeSpec
	for _, name := range slices.Sorted(maps.Keys(w.cfg.Shape.Types)) {
		ts = append(ts, typeSpec{name: name, limit: w.cfg.Shape.Types[name], keyLimit: w.cfg.Shape.KeyLimits[name], release: "step", strategy: "first-free"})
	}
	for i, sj := range w.cfg.Shape.Jobs {
		j := &jobSpec{typ: sj.Type, key: sj.Key, id: fmt.Sprintf("j%05d", i), submitAt: sj.At, duration: sj.Duration}
		j.k = jobKey(j.typ, j.key, j.id)
		w.jobs[j.k] = j
		w.order = append(w.order, j)
	}
	return ts
}

// DefaultConfig is the fixed set's shape: about 100 jobs, every fault class on.
func DefaultConfig() Config {
	return Config{
		Jobs: 100,
		Faults: Faults{
			DDBAmbiguous: 0.01, DDBLost: 0.005, DDBThrottle: 0.01, DDBConflict: 0.01,
			SFNThrottle: 0.02, SFNLost: 0.01, SFNStale: 0.05,
			Duplicate: 0.03, Kill: 0.003,
			EventDrop: 0.05, EventDup: 0.05, EventDelay: 0.2,
			Slow: 0.005, LimitChanges: 2, Actions: 4, Skew: time.Second,
			Bus:       BusFaults{Throttle: 0.05, EntryFailed: 0.05, Outage: 0.2},
			SharedIDs: 0.2,
		},
		BatchShare: 0.3,
		Visibility: 300 * time.Second, SweepEvery: time.Minute, ExecutionTimeout: 10 * time.Minute,
		ReleaserTimeout: 120 * time.Second, FunctionTimeout: 30 * time.Second, MaxTime: 8 * time.Hour,
		Trace: true,
	}
}

// typeSpec is a job type of the workload.
type typeSpec struct {
	name     string
	limit    int
	keyLimit int
	keys     []string
	// keyCaps are the caps of keys with their own (the live override's KeyLimits).
	keyCaps  map[string]int
	release  string // step or events
	strategy string
}

type jobSpec struct {
	typ, id, key string
	k            string // type/id (jobKeyOf)
	// senderID is the SenderId of whoever sends the job ("": the workload's producer,
	// ProducerSenderID).
	senderID     string
	submitAt     time.Duration
	duration     time.Duration
	fail         bool
	failAttempts int
}

func (w *World) workload() []typeSpec {
	if w.cfg.Shape != nil {
		return w.shaped()
	}
	r := w.rng
	ts := []typeSpec{
		{name: "alpha", limit: 1 + r.IntN(4), release: "step", strategy: "first-free"},
		{name: "beta", limit: 2 + r.IntN(4), keyLimit: 1 + r.IntN(2), keys: []string{"k1", "k2", "k3"}, release: "step", strategy: "first-free"},
		{name: "gamma", limit: 1 + r.IntN(3), release: "events", strategy: []string{"first-free", "random"}[r.IntN(2)]},
	}
	span := time.Duration(5+r.IntN(20)) * time.Minute
	reuse := rand.New(rand.NewPCG(w.seed, 0x1d5))
	for i := range w.cfg.Jobs {
		t := ts[r.IntN(len(ts))]
		j := &jobSpec{typ: t.name, id: fmt.Sprintf("j%03d", i), submitAt: time.Duration(r.Int64N(int64(span)))}
		if t.name == w.cfg.Flood {
			j.submitAt %= time.Second
		}
		if len(t.keys) > 0 {
			j.key = t.keys[r.IntN(len(t.keys))]
		}
		secs := math.Exp(r.NormFloat64()*1.2 + math.Log(40))
		j.duration = time.Duration(min(secs, 900) * float64(time.Second))
		switch x := r.Float64(); {
		case x < 0.05:
			j.fail = true
		case x < 0.15:
			j.failAttempts = 1
		}
		reuseOtherKeysID(reuse, w.cfg.Faults.SharedIDs, j, w.order)
		j.k = jobKey(j.typ, j.key, j.id)
		w.jobs[j.k] = j
		w.order = append(w.order, j)
	}
	return ts
}

// reuseOtherKeysID is a producer that names its job as another key's job of its type was named,
// a few seconds to minutes after it (within SQS's five-minute deduplication window, often while
// the other runs): a share of keyed jobs take the id of an earlier job of another key. Both are
// jobs of their own, and the invariants hold them to it: each runs and ends once. It draws from
// its own stream (reuse), so the rest of a seed's workload is as without it.
func reuseOtherKeysID(reuse *rand.Rand, share float64, j *jobSpec, earlier []*jobSpec) {
	if j.key == "" || reuse.Float64() >= share {
		return
	}
	var others []*jobSpec
	taken := map[string]bool{} // ids j's key has already: the same key and id is one job
	for _, o := range earlier {
		if o.typ == j.typ && o.key == j.key {
			taken[o.id] = true
		}
	}
	for _, o := range earlier {
		if o.typ == j.typ && o.key != "" && o.key != j.key && !taken[o.id] {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		return
	}
	o := others[reuse.IntN(len(others))]
	j.id, j.submitAt = o.id, o.submitAt+time.Duration(reuse.Int64N(int64(4*time.Minute)))
}

// New builds a world for seed. Call Run inside a synctest bubble.
func New(seed uint64, cfg Config) *World {
	w := &World{cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), sched: newSched(),
		queues: map[string]*queue{}, jobs: map[string]*jobSpec{}, batches: newBatchWorld(seed), metrics: metrics.NewCollector()}
	w.log = slog.New(traceHandler{w: w})
	mk := func(name string, fifo bool, vis time.Duration) *queue {
		q := &queue{w: w, name: name, url: "https://sqs.us-east-1.amazonaws.com/123456789012/" + name, fifo: fifo, visibility: vis, dedup: map[string]dedupEntry{}}
		w.queues[q.url] = q
		return q
	}
	w.dlq = mk("dlq", false, 30*time.Second)
	w.general = mk("general", false, 180*time.Second)
	w.general.maxRecv, w.general.dlq = 5, w.dlq
	w.lanes = mk("lanes.fifo", true, cfg.Visibility)
	w.lanes.groupDedup = true
	w.table = fakes.NewDynamoDB("sim")
	w.sfn = &sfnService{w: w, execs: map[string]*execution{}}
	w.svc = app.Services{SQS: sqsClient{w}, SFN: sfnClient{w}, DDB: ddbClient{w: w, t: w.table}, Events: eventsClient{w}}
	w.check = newChecker(w)
	if cfg.AWS != nil {
		w.aws = newAWSState(*cfg.AWS)
	}
	return w
}

// Run plays the world until every job has ended and the world has settled, then checks the
// quiescence invariants. It must run inside synctest.Test.
func (w *World) Run() []Violation {
	ts := w.workload()
	w.batchWorkload()
	w.interloperReuses()
	cts := append(w.cancelWorkload(), w.skipWorkload()...)
	limits, keyLimits, modes := "", "", ""
	for _, t := range append(ts[:len(ts):len(ts)], cts...) {
		limits += fmt.Sprintf("%s=%d,", t.name, t.limit)
		if t.keyLimit > 0 {
			keyLimits += fmt.Sprintf("%s=%d,", t.name, t.keyLimit)
		}
		if t.release == "events" {
			modes += t.name + "=events,"
		}
		w.check.setLimit(t.name, t.limit, t.keyLimit)
	}
	trim := func(s string) string {
		if s != "" {
			return s[:len(s)-1]
		}
		return s
	}
	w.env = map[string]string{
		"FIFO_QUEUE_URL": w.lanes.url, "DLQ_URL": w.dlq.url, "GENERAL_QUEUE_URL": w.general.url, "TABLE_NAME": "sim",
		"STATE_MACHINE_ARN": sampleSM, "TYPE_LIMITS": trim(limits), "TYPE_KEY_LIMITS": trim(keyLimits),
		"TYPE_RELEASE_MODES": trim(modes), "DEFAULT_MAX_ATTEMPTS": "3", "CONFIG_CACHE_SECONDS": "10",
		"FIFO_VISIBILITY_TIMEOUT": strconv.Itoa(int(w.cfg.Visibility / time.Second)), "START_RETRY_SECONDS": "5",
		"SWEEP_MIN_AGE_SECONDS": "60", "STACK_NAME": "sim", "METRICS_NAMESPACE": "sim", "ROUTER_ROLE_ID": RouterRoleID,
	}
	if w.cfg.LanesBacklog > 0 {
		w.env["MAX_LANES_BACKLOG"], w.env["BACKLOG_HOLD_SECONDS"] = strconv.Itoa(w.cfg.LanesBacklog), "60"
	}
	var overflows []string
	for _, t := range cts {
		rule := config.OverflowCancel
		if t.name == skipType {
			rule = config.OverflowSkip
		}
		overflows = append(overflows, t.name+"="+rule)
	}
	if len(overflows) > 0 {
		w.env["TYPE_OVERFLOW"] = strings.Join(overflows, ",")
	}
	for _, t := range append(ts[:len(ts):len(ts)], cts...) {
		o := config.Override{Type: t.name, Strategy: t.strategy, KeyLimits: t.keyCaps}
		if t.release == "events" {
			o.StateMachineArn, o.Release = bareSM, "events"
		}
		if w.cfg.Override != nil {
			w.cfg.Override(&o)
		}
		w.setOverride(o)
		w.check.overrides[t.name] = o
		if w.cfg.Override != nil || len(t.keyCaps) > 0 {
			w.check.configChanged(t.name)
		}
	}
	w.setUpPools(ts, w.now())
	if w.cfg.Shape != nil && len(w.cfg.Shape.Env) > 0 {
		maps.Copy(w.env, w.cfg.Shape.Env)
		if w.env["POOL_CAPS"] != "" {
			w.check.poolsOn = true
			w.check.poolsChanged()
		}
	}
	w.genESM = &mapping{w: w, name: "router", q: w.general, size: 10, maxConc: 5, timeout: w.cfg.FunctionTimeout}
	routers := pool[*router.Router]{build: func() *router.Router {
		r, err := app.RouterOn(w.getenv, w.svc, w.log, app.WithMetrics(w.metrics))
		if err != nil {
			panic(fmt.Sprintf("simworld: build router: %v", err))
		}
		// The senders' back-off is jittered from math/rand; the seed decides it here.
		for _, x := range []any{r.Lanesq, r.Hold} {
			if snd, ok := x.(*sqsbatch.Sender); ok {
				snd.NewBackOff = w.backOff
			}
		}
		w.seedBatches(trackerOf(r))
		return r
	}}
	w.genESM.handler = func() (func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), func()) {
		r := routers.get()
		return r.Handle, func() { routers.put(r) }
	}
	w.lanesESM = &mapping{w: w, name: "starter", q: w.lanes, size: 10, maxConc: cmp.Or(w.cfg.StarterConcurrency, 5), timeout: w.cfg.FunctionTimeout}
	starters := pool[*starter.Starter]{build: func() *starter.Starter {
		s, err := app.StarterOn(w.getenv, w.svc, w.log, app.WithMetrics(w.metrics))
		if err != nil {
			panic(fmt.Sprintf("simworld: build starter: %v", err))
		}
		// One group at a time within an invocation: the starter's workers share a container's
		// config cache, whose lock is held across its DynamoDB read, and a goroutine waiting on a
		// lock is not one synctest can tell is blocked. Invocations still run side by side.
		s.Concurrency = 1
		s.Jitter = w.rng.Int64N
		w.skewStarter(s)
		w.seedBatches(trackerOf(s))
		return s
	}}
	w.lanesESM.handler = func() (func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), func()) {
		s := starters.get()
		return s.Handle, func() { starters.put(s) }
	}
	w.general.onVisible = func() { w.genESM.schedulePoll(w.now().Add(w.latency())) }
	w.lanes.onVisible = func() { w.lanesESM.schedulePoll(w.now().Add(w.latency())) }

	start := w.now()
	w.openBatches(start)
	for _, j := range w.order {
		body := w.bodyOf(j)
		w.sched.at(start.Add(j.submitAt), func() {
			w.check.submitted(j)
			w.general.send(body, "", "", nil, 0, cmp.Or(j.senderID, ProducerSenderID))
		})
	}
	w.operator(ts, start)
	w.operatorActions(ts, start)
	w.interlopers(start)
	w.sched.after(w.cfg.SweepEvery, w.sweepEvery)
	w.sched.after(w.check.every, w.check.tick)
	w.sched.run(w.admit, func() bool { return w.stopped }, func() int { return w.live })
	w.Stats.VirtualTime = w.now().Sub(start)
	return w.check.violations
}

// operator changes limits at random times, as `sfnlimit config set --limit` would.
func (w *World) operator(ts []typeSpec, start time.Time) {
	for range w.cfg.Faults.LimitChanges {
		t := ts[w.rng.IntN(len(ts))]
		at := time.Duration(w.rng.Int64N(int64(20 * time.Minute)))
		n := 1 + w.rng.IntN(5)
		w.sched.at(start.Add(at), func() {
			o := w.check.overrides[t.name]
			o.Limit = n
			if o.KeyLimit == 0 && t.keyLimit > n {
				o.KeyLimit = n
			}
			w.trace(t.name, "operator: limit of %s set to %d", t.name, n)
			w.setOverride(o)
			w.check.configChanged(t.name)
		})
	}
}

// backOff is sqsbatch's default back-off with its jitter drawn from the seed.
func (w *World) backOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.RandomizationFactor = 0
	b.Multiplier = 2
	b.MaxInterval = 2 * time.Second
	b.Reset()
	return &jittered{BackOff: b, w: w}
}

type jittered struct {
	backoff.BackOff
	w *World
}

func (j *jittered) NextBackOff() time.Duration {
	d := j.BackOff.NextBackOff()
	if d <= 0 {
		return d
	}
	return d/2 + time.Duration(j.w.rng.Int64N(int64(d)))
}

// pool holds a function's warm containers: an invocation takes one (or starts a new one), and
// gives it back when it ends; one container serves one invocation at a time, as in Lambda.
type pool[T any] struct {
	free  []T
	build func() T
}

func (p *pool[T]) get() T {
	if n := len(p.free); n > 0 {
		x := p.free[n-1]
		p.free = p.free[:n-1]
		return x
	}
	return p.build()
}

func (p *pool[T]) put(x T) { p.free = append(p.free, x) }
