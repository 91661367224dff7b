package simworld

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// fault is what the world does to one AWS call besides answering it.
type fault int

const (
	faultNone fault = iota
	faultThrottle
	faultAmbiguous // a write applied, its answer lost, the SDK's retry answered
	faultLost      // a write (or start) applied, its answer lost, the SDK gave up
	faultConflict  // a transaction cancelled with TransactionConflict
	faultStale     // an eventually consistent read behind the truth
)

// World is one simulated deployment: the queues, table, state machines and functions of
// template.yaml, in virtual time, driven by one seed.
type World struct {
	cfg   Config
	seed  uint64
	rng   *rand.Rand
	sched *sched

	queues           map[string]*queue
	general, lanes   *queue
	dlq              *queue
	table            *fakes.DynamoDB
	sfn              *sfnService
	svc              app.Services
	env              map[string]string
	log              *slog.Logger
	starters         []*starter.Starter
	routers          []*router.Router
	releasers        []*releaser.Handler
	lanesESM, genESM *mapping
	// metrics collects what the handlers publish (EMF lines), as CloudWatch would.
	metrics *metrics.Collector

	jobs  map[string]*jobSpec
	order []*jobSpec
	// interloperReused pairs a workload job's key with the interloper's job reusing its type,
	// key and id (interloperReuses).
	interloperReused [][2]string
	msgSeq           uint64
	nprocs           int
	live             int
	stopped          bool

	putEvents int
	batches   *batchWorld
	debug     io.Writer
	traceMu   sync.Mutex
	traceLog  []traceLine
	check     *checker
	// aws is the AWS model's state (nil: the default world, Config.AWS).
	aws *awsState
	// Stats of the run.
	Stats Stats
}

// Stats count what a run did.
type Stats struct {
	Invocations, Kills, Calls, Faults, Starts, Events int
	// DuplicateDeadLetters counts dead letters sent again for a job already dead-lettered, with
	// the same body and reason (at least once, by design).
	DuplicateDeadLetters int
	VirtualTime          time.Duration
}

type traceLine struct {
	at      time.Duration
	subject string
	text    string
}

func (w *World) now() time.Time { return time.Now() }

// trace records one line about subject (a group, a key, an execution's job) for a failing seed's
// report. Formatting is left until a report asks for it.
func (w *World) trace(subject, format string, args ...any) {
	if !w.cfg.Trace {
		return
	}
	w.traceMu.Lock()
	defer w.traceMu.Unlock()
	line := traceLine{at: w.now().Sub(epoch), subject: subject, text: fmt.Sprintf(format, args...)}
	w.traceLog = append(w.traceLog, line)
	if w.debug != nil {
		fmt.Fprintf(w.debug, "%s [%s] %s\n", line.at, strings.TrimSpace(subject), line.text)
	}
}

// epoch is the virtual clock's start (synctest starts every bubble at 2000-01-01 00:00 UTC).
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// latency is one AWS call's round trip: 2 to 40 ms, most under 10.
func (w *World) latency() time.Duration {
	ms := 2 + w.rng.ExpFloat64()*6
	return time.Duration(min(ms, 40) * float64(time.Millisecond))
}

func (w *World) decide(c *call) {
	f := w.cfg.Faults
	r := w.rng.Float64()
	switch {
	case strings.HasPrefix(c.op, "ddb.Put"), strings.HasPrefix(c.op, "ddb.Delete"), strings.HasPrefix(c.op, "ddb.Transact"):
		switch {
		case r < f.DDBAmbiguous:
			c.fault = faultAmbiguous
		case r < f.DDBAmbiguous+f.DDBLost:
			c.fault = faultLost
		case r < f.DDBAmbiguous+f.DDBLost+f.DDBThrottle:
			c.fault = faultThrottle
		case c.op == "ddb.TransactWriteItems" && r < f.DDBAmbiguous+f.DDBLost+f.DDBThrottle+f.DDBConflict:
			c.fault = faultConflict
		}
	case strings.HasPrefix(c.op, "ddb."):
		if r < f.DDBThrottle {
			c.fault = faultThrottle
		}
	case c.op == "sfn.StartExecution":
		switch {
		case r < f.SFNThrottle:
			c.fault = faultThrottle
		case r < f.SFNThrottle+f.SFNLost:
			c.fault = faultLost
		}
	case c.op == "sfn.StopExecution":
		switch {
		case r < f.SFNThrottle:
			c.fault = faultThrottle
		case r < f.SFNThrottle+f.SFNLost:
			c.fault = faultLost
		}
	case c.op == "events.PutEvents":
		c.fault = w.busFault(r)
	case strings.HasPrefix(c.op, "sfn."):
		switch {
		case r < f.SFNThrottle:
			c.fault = faultThrottle
		case r < f.SFNThrottle+f.SFNStale:
			c.fault = faultStale
		}
	}
	if w.aws != nil && c.fault == faultNone && w.aws.throttled(c.op, w.now()) {
		c.fault = faultThrottle
		w.trace(c.key, "aws model: %s throttled by its token bucket", c.op)
	}
	if c.fault != faultNone {
		w.Stats.Faults++
	}
	if f.Kill > 0 && w.rng.Float64() < f.Kill {
		c.kill = killBefore + kill(w.rng.IntN(2))
	}
}

// admit gives each new call its latency and faults, in the order sched sorted them.
func (w *World) admit(calls []*call) {
	for _, c := range calls {
		if c.onFire != nil {
			w.sched.afterCall(0, func() { c.onFire(); close(c.ready) })
			continue
		}
		w.Stats.Calls++
		if w.debug != nil {
			fmt.Fprintf(w.debug, "%s %s %s %s\n", w.now().Sub(epoch), c.proc.name, c.op, c.key)
		}
		w.decide(c)
		var lat time.Duration
		if w.aws != nil {
			lat = w.awsLatency(c.op)
			w.meterSQS(c)
		} else {
			lat = w.latency()
		}
		if f := w.cfg.Faults.Slow; f > 0 && w.rng.Float64() < f {
			lat += 500*time.Millisecond + time.Duration(w.rng.Int64N(int64(4500*time.Millisecond)))
		}
		w.sched.afterCall(lat, func() { w.let(c) })
	}
}

// let lets a call through at the end of its latency, unless the AWS model's partition buckets
// refuse it and the SDK retries it (partitionRetry).
func (w *World) let(c *call) {
	if w.aws != nil && !c.proc.dead && c.kill != killBefore && w.partitionRetry(c) {
		return
	}
	if c.proc.dead {
		c.kill = killBefore
	} else if c.kill != noKill {
		w.Stats.Kills++
		w.trace(c.key, "kill %s at %s (%s)", c.proc.name, c.op, map[kill]string{killBefore: "before", killAfter: "after"}[c.kill])
		w.killProc(c.proc)
	}
	close(c.ready)
}

// spawn runs fn as one invocation of a function in its own goroutine, with the function's timeout.
// onEnd gets the handler's answer, or errKilled when the invocation was killed or timed out.
// onExit runs in the world when the goroutine has returned, killed or not (the container is free
// again).
func (w *World) spawn(name string, types []string, timeout time.Duration, fn func(ctx context.Context) (any, error), onEnd func(any, error), onExit func(), jobs ...string) {
	w.nprocs++
	w.live++
	w.Stats.Invocations++
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p := &proc{id: w.nprocs, name: name + "#" + strconv.Itoa(w.nprocs), cancel: cancel, onDone: onEnd, types: types, jobs: jobs}
	ctx = context.WithValue(ctx, procKey{}, p)
	p.ctx = ctx
	w.sched.after(timeout, func() {
		if !p.done && !p.dead {
			w.trace(name, "timeout %s", p.name)
			w.killProc(p)
		}
	})
	go func() {
		resp, err := fn(ctx)
		c := &call{proc: p, op: "~return", ready: make(chan struct{})}
		c.onFire = func() {
			w.live--
			p.done = true
			cancel()
			if !p.dead {
				onEnd(resp, err)
			}
			// A killed invocation's container is thrown away, as Lambda does after a timeout
			// or a crash; a healthy one serves the next invocation.
			if onExit != nil && !p.dead {
				onExit()
			}
		}
		w.sched.enter(c)
	}()
}

func (w *World) killProc(p *proc) {
	if p.dead || p.done {
		return
	}
	p.dead = true
	w.check.killed(p.types)
	p.cancel()
	p.onDone(nil, errKilled)
}

// afterWrite runs after every DynamoDB write a handler makes, with the written items' keys: a
// batch closes once (batches.go).
func (w *World) afterWrite(keys string) {
	if strings.Contains(keys, "|META") {
		w.watchBatches()
	}
}

// ---- Lambda: event source mappings and invocations ----

// mapping is a Lambda SQS event source mapping with ReportBatchItemFailures: it receives batches
// of up to size messages and runs up to maxConc invocations at once; an invocation's answer
// deletes the messages it did not report; an error (or a killed invocation) leaves the whole batch
// in flight until its visibility timeout. Lambda may hand a batch over twice (Faults.Duplicate).
type mapping struct {
	w       *World
	name    string
	q       *queue
	size    int
	maxConc int
	timeout time.Duration
	active  int
	pollAt  time.Time
	// handler takes a warm container (or starts one) and returns its entry point and how to give
	// the container back.
	handler func() (func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error), func())
}

func (m *mapping) schedulePoll(at time.Time) {
	if m.w.stopped {
		return
	}
	if !m.pollAt.IsZero() && !m.pollAt.After(at) {
		return
	}
	m.pollAt = at
	m.w.sched.at(at, func() {
		if !m.pollAt.Equal(at) {
			return
		}
		m.pollAt = time.Time{}
		m.poll()
	})
}

func (m *mapping) poll() {
	for m.active < m.maxConc {
		msgs := m.q.receive(m.size)
		if len(msgs) == 0 {
			break
		}
		m.active++
		if a := m.w.aws; a != nil {
			a.sqsCall(m.w.now(), m.q.name, "sqs.ReceiveMessage", len(msgs))
			if m == m.w.lanesESM {
				a.PeakStarters = max(a.PeakStarters, m.active)
			}
		}
		m.invoke(msgs, true)
	}
	if next := m.q.nextVisible(); !next.IsZero() {
		m.schedulePoll(next)
	}
}

func (m *mapping) invoke(msgs []*msg, counted bool) {
	ev := events.SQSEvent{}
	handles := map[string]string{}
	for _, x := range msgs {
		ev.Records = append(ev.Records, m.q.record(x))
		handles[x.id] = x.handle
	}
	// Every draw of the world comes before the spawn: the handler starts at once, and may draw
	// from the seed (the starter's back-off jitter) before its first call blocks at the gate.
	duplicate := counted && m.w.rng.Float64() < m.w.cfg.Faults.Duplicate
	var again time.Duration
	if duplicate {
		again = time.Duration(m.w.rng.Int64N(int64(2 * time.Second)))
	}
	h, put := m.handler()
	m.w.spawn(m.name, typesOf(msgs), m.timeout, func(ctx context.Context) (any, error) {
		return h(ctx, ev)
	}, func(resp any, err error) {
		if counted {
			m.active--
		}
		if err == nil {
			failed := map[string]bool{}
			if r, ok := resp.(events.SQSEventResponse); ok {
				for _, f := range r.BatchItemFailures {
					failed[f.ItemIdentifier] = true
				}
			}
			m.w.sched.after(m.w.latency(), func() {
				if a := m.w.aws; a != nil && len(ev.Records) > len(failed) {
					a.sqsCall(m.w.now(), m.q.name, "sqs.DeleteMessageBatch", len(ev.Records)-len(failed))
				}
				for _, r := range ev.Records {
					if !failed[r.MessageId] {
						m.q.remove(handles[r.MessageId])
					}
				}
			})
		} else {
			m.w.trace(m.name, "%s invocation failed: %v", m.name, err)
		}
		m.schedulePoll(m.w.now().Add(m.w.latency()))
	}, put, generationsOf(msgs)...)
	if duplicate {
		m.w.trace(m.name, "duplicate delivery of %d messages", len(msgs))
		m.w.sched.after(again, func() { m.invoke(msgs, false) })
	}
}

// generationsOf is the jobs of a batch's lanes messages, each as the generation its body carries
// (genKey): whose starter a StopExecution is (checker.cancelMade).
func generationsOf(msgs []*msg) []string {
	var gens []string
	for _, m := range msgs {
		if m.group != "" {
			gens = append(gens, genKey(subjectOfBody(m), bodyGeneration(m.body)))
		}
	}
	return gens
}

// typesOf is the workload types of a batch's messages: a lanes message's group names its type,
// a general queue message's body does.
func typesOf(msgs []*msg) []string {
	var types []string
	seen := map[string]bool{}
	for _, m := range msgs {
		t := typeOfGroup(m.group)
		if m.group == "" {
			var b struct {
				Type string `json:"type"`
			}
			if json.Unmarshal([]byte(m.body), &b) != nil {
				continue
			}
			t = b.Type
		}
		if t != "" && !seen[t] {
			seen[t] = true
			types = append(types, t)
		}
	}
	sort.Strings(types)
	return types
}

// ---- the releaser's three callers ----

// invokeReleaser runs the releaser on raw in a container of its own (Lambda gives each concurrent
// invocation its own).
func (w *World) invokeReleaser(source, typ string, raw []byte, done func(error)) {
	h := w.releaser()
	var types []string
	if typ != "" {
		types = []string{typ}
	}
	w.spawn("releaser-"+source, types, w.cfg.ReleaserTimeout, func(ctx context.Context) (any, error) {
		resp, err := h.Handle(ctx, raw)
		return resp, err
	}, func(_ any, err error) {
		done(err)
	}, func() { w.putReleaser(h) })
}

func (w *World) releaser() *releaser.Handler {
	if n := len(w.releasers); n > 0 {
		h := w.releasers[n-1]
		w.releasers = w.releasers[:n-1]
		return h
	}
	h, err := app.ReleaserOn(w.getenv, w.svc, w.log, app.WithMetrics(w.metrics))
	if err != nil {
		panic(fmt.Sprintf("simworld: build releaser: %v", err))
	}
	h.SweepConcurrency = 1 // see the starter's Concurrency in Run
	w.skewReleaser(h)
	w.seedBatches(trackerOf(h))
	return h
}

func (w *World) putReleaser(h *releaser.Handler) { w.releasers = append(w.releasers, h) }

// statusEvent sends an execution's status change through EventBridge to the releaser: best
// effort, so it may be dropped, sent twice or late (and so out of order), and Lambda retries a
// failed asynchronous invocation twice.
func (w *World) statusEvent(e *execution) {
	w.Stats.Events++
	f := w.cfg.Faults
	if w.rng.Float64() < f.EventDrop {
		w.trace(e.meta.Type+"-"+e.meta.ID, "event dropped: %s %s", e.name, e.status)
		return
	}
	copies := 1
	if w.rng.Float64() < f.EventDup {
		copies = 2
	}
	input := e.input
	detail, _ := json.Marshal(releaser.StatusDetail{ExecutionArn: e.arn, StateMachineArn: e.sm, Name: e.name, Status: string(e.status), Input: &input,
		Error: strPtr(e.errName), Cause: strPtr(e.cause)})
	raw, _ := json.Marshal(map[string]any{"source": "aws.states", "detail-type": "Step Functions Execution Status Change", "detail": json.RawMessage(detail)})
	for range copies {
		delay := w.latency() * 10
		if w.rng.Float64() < f.EventDelay {
			delay += time.Duration(w.rng.Int64N(int64(30 * time.Second)))
		}
		w.sched.after(delay, func() { w.asyncInvoke("status-event", e.meta.Type, raw, 0) })
	}
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// asyncInvoke is Lambda's asynchronous invocation: on error it retries twice, after about one
// and two minutes.
func (w *World) asyncInvoke(source, typ string, raw []byte, try int) {
	w.invokeReleaser(source, typ, raw, func(err error) {
		if err != nil && try < 2 {
			w.sched.after(time.Duration(try+1)*time.Minute, func() { w.asyncInvoke(source, typ, raw, try+1) })
		}
	})
}

func (w *World) sweepEvery() {
	if w.stopped {
		return
	}
	raw := []byte(`{"source":"aws.events","detail-type":"Scheduled Event","detail":{}}`)
	w.invokeReleaser("sweep", "", raw, func(error) {})
	w.sched.after(w.cfg.SweepEvery, w.sweepEvery)
}

// ---- configuration ----

func (w *World) getenv(k string) string { return w.env[k] }

// setOverride is an operator's `config set`: a live override written straight to the table.
func (w *World) setOverride(o config.Override) {
	if err := config.NewDynamoStore(w.table, "sim").SetOverride(context.Background(), o); err != nil {
		panic(fmt.Sprintf("simworld: set override: %v", err))
	}
}

func (w *World) started(e *execution) { w.Stats.Starts++; w.check.started(e) }
func (w *World) closed(e *execution)  { w.check.closed(e) }
