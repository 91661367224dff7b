package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/esm"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/eventbus"
)

// PollerConcurrency is how many invocations each event source mapping of the local stack runs at
// once, as Lambda's pollers do for a standard queue (several batches in flight).
const PollerConcurrency = 5

// Runtime plays Lambda and EventBridge for the template's functions.
type Runtime struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	Pollers map[string]*esm.Poller // by function name
	Status  *eventbus.StatusEvents
	// Invokes counts direct invocations (workflow tasks and events) by function kind.
	Invokes map[string]*InvokeStats
}

// InvokeStats counts a function's direct invocations and their run time.
type InvokeStats struct {
	mu    sync.Mutex
	n     int
	busy  time.Duration
	fails int
}

// Snapshot returns invocations, failed invocations and total run time.
func (i *InvokeStats) Snapshot() (n, fails int, busy time.Duration) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.n, i.fails, i.busy
}

func (i *InvokeStats) record(d time.Duration, err error) {
	i.mu.Lock()
	i.n++
	i.busy += d
	if err != nil {
		i.fails++
	}
	i.mu.Unlock()
}

// invoke runs a direct invocation of handler (a workflow task, an event, a schedule's run) as
// Lambda does: to its end or its timeout, whatever becomes of its caller. A caller gone (the
// runtime's shutdown, a Step Functions task's connection) does not cut it short, and StopRuntime
// waits for it, so an invocation the local stack's own teardown interrupts is never counted failed.
func (i *InvokeStats) invoke(ctx context.Context, timeout time.Duration, handler func(context.Context) error) error {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	began := time.Now()
	err := handler(ictx)
	i.record(time.Since(began), err)
	return err
}

// Runtime returns the running runtime, or nil.
func (s *Stack) Runtime() *Runtime {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runtime
}

// StartRuntime builds each function's handler from its template environment (as its Lambda main
// would) and starts its event sources. Handlers are built anew, like cold starts.
func (s *Stack) StartRuntime(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runtime != nil {
		return fmt.Errorf("the local runtime is already running")
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt := &Runtime{cancel: cancel, Pollers: map[string]*esm.Poller{}, Invokes: map[string]*InvokeStats{}}
	fail := func(err error) error {
		cancel()
		rt.wg.Wait()
		return err
	}
	for _, f := range s.tpl.Functions() {
		cfg, err := s.resolver.Function(f)
		if err != nil {
			return fail(err)
		}
		kind := filepath.Base(filepath.Clean(cfg.CodeDir))
		env := func(k string) string {
			if v, ok := s.opts.FunctionEnv[k]; ok {
				return v
			}
			return cfg.Environment[k]
		}
		awsCfg := s.AWSConfig(s.Counter(kind))
		if !s.opts.SkipIAM {
			enf, err := s.roleEnforcer(cfg.LogicalID)
			if err != nil {
				return fail(fmt.Errorf("IAM check of %s: %w", cfg.LogicalID, err))
			}
			awsCfg.APIOptions = append(awsCfg.APIOptions, enf.Option)
		}
		if s.opts.FunctionAWSConfig != nil {
			s.opts.FunctionAWSConfig(kind, &awsCfg)
		}
		clients := app.NewClients(awsCfg)
		log := s.log.With("function", kind)
		var sqsHandler esm.Handler
		var eventHandler eventbus.Target
		switch kind {
		case "router":
			h, err := app.Router(env, clients, log, app.WithMetrics(s.Metrics()))
			if err != nil {
				return fail(fmt.Errorf("configure %s: %w", cfg.LogicalID, err))
			}
			sqsHandler = h.Handle
		case "starter":
			h, err := app.Starter(env, clients, log, app.WithMetrics(s.Metrics()))
			if err != nil {
				return fail(fmt.Errorf("configure %s: %w", cfg.LogicalID, err))
			}
			sqsHandler = h.Handle
		case "releaser":
			h, err := app.Releaser(env, clients, log, app.WithMetrics(s.Metrics()))
			if err != nil {
				return fail(fmt.Errorf("configure %s: %w", cfg.LogicalID, err))
			}
			stats := &InvokeStats{}
			rt.Invokes[kind] = stats
			timeout := time.Duration(max(cfg.Timeout, 3)) * time.Second
			invoke := func(ctx context.Context, payload []byte) ([]byte, error) {
				var resp any
				err := stats.invoke(ctx, timeout, func(ctx context.Context) (err error) {
					resp, err = h.Handle(ctx, payload)
					return err
				})
				if err != nil {
					return nil, err
				}
				return json.Marshal(resp)
			}
			s.gw.Register(cfg.Name, invoke)
			eventHandler = func(ctx context.Context, ev json.RawMessage) error { _, err := invoke(ctx, ev); return err }
		default:
			return fail(fmt.Errorf("function %s has code in %s: the local stack knows router, starter and releaser", cfg.LogicalID, cfg.CodeDir))
		}
		if err := s.startEvents(rctx, rt, cfg, kind, sqsHandler, eventHandler); err != nil {
			return fail(err)
		}
	}
	s.runtime = rt
	return nil
}

func (s *Stack) startEvents(ctx context.Context, rt *Runtime, cfg cfntemplate.FunctionConfig, kind string, sqsH esm.Handler, evH eventbus.Target) error {
	pollClients := app.NewClients(s.AWSConfig(s.Counter("pollers")))
	for _, e := range cfg.SQSEvents {
		if !e.Enabled {
			continue
		}
		if sqsH == nil {
			return fmt.Errorf("function %s has an SQS event but no SQS handler", cfg.LogicalID)
		}
		if !e.ReportsBatchItemFailures() {
			return fmt.Errorf("function %s event %s must report batch item failures", cfg.LogicalID, e.Name)
		}
		url, _ := s.attrs.Lookup(e.QueueLogicalID, "QueueUrl")
		arn, _ := s.attrs.Lookup(e.QueueLogicalID, "Arn")
		fifo := false
		for _, q := range s.tpl.Queues() {
			if q.LogicalID == e.QueueLogicalID {
				fifo = q.Fifo
			}
		}
		p := &esm.Poller{
			Client: pollClients.SQS, QueueURL: url, QueueARN: arn, Region: Region,
			BatchSize: int32(max(e.BatchSize, 1)), Concurrency: PollerConcurrency, Timeout: time.Duration(max(cfg.Timeout, 3)) * time.Second,
			Handler: sqsH, Log: s.log.With("poller", kind),
			Wait: 2 * time.Second, Idle: 0,
		}
		if fifo {
			// Long polls on moto too: its launcher keeps FIFO groups blocked under concurrent
			// receives (moto 5.2.1 alone does not; see emulator/moto_launcher.py).
			p.Concurrency = max(e.MaximumConcurrency, 2)
			p.Concurrency = min(p.Concurrency, 8) // two cores: more pollers only contend
		}
		rt.Pollers[kind] = p
		rt.wg.Add(1)
		go func() { defer rt.wg.Done(); p.Run(ctx) }()
	}
	if evH == nil {
		return nil
	}
	// The bus plays the function's rules as the template writes them, resolved with the stack's
	// state machines: the statuses and state machines each rule matches, nothing more.
	var rules []eventbus.Rule
	for _, r := range cfg.EventRules {
		if !r.Enabled {
			continue
		}
		rule, ok, err := eventbus.StatusRule(r.Name, r.Pattern)
		if err != nil {
			return fmt.Errorf("function %s: %w", cfg.LogicalID, err)
		}
		if !ok {
			s.log.Warn("the local event bus sends only Step Functions status changes: this rule never fires locally", "function", cfg.LogicalID, "rule", r.Name)
			continue
		}
		rules = append(rules, rule)
	}
	if len(rules) > 0 {
		rt.Status = &eventbus.StatusEvents{
			SFN: app.NewClients(s.AWSConfig(nil)).SFN, Rules: rules, Region: Region, Account: Account,
			Every: orDuration(s.opts.StatusEvery, time.Second), DropRate: s.opts.EventDropRate, DupRate: s.opts.EventDupRate,
			Target: evH, Log: s.log.With("events", "status"),
		}
		rt.wg.Add(1)
		go func() { defer rt.wg.Done(); rt.Status.Run(ctx) }()
	}
	if len(cfg.Schedules) > 0 {
		sch := &eventbus.Schedule{Every: orDuration(s.opts.SweepEvery, 10*time.Second), Region: Region, Account: Account, Target: evH, Log: s.log.With("events", "schedule")}
		rt.wg.Add(1)
		go func() { defer rt.wg.Done(); sch.Run(ctx) }()
	}
	return nil
}

// StopRuntime stops the pollers at once (messages received but not handed to a handler go back to
// their queue), lets invocations in progress finish, and stops event delivery.
func (s *Stack) StopRuntime() {
	s.mu.Lock()
	rt := s.runtime
	s.runtime = nil
	s.mu.Unlock()
	if rt == nil {
		return
	}
	rt.cancel()
	rt.wg.Wait()
	s.mu.Lock()
	s.lastRuntime = rt
	s.mu.Unlock()
}

// FunctionStats are a function's invocations in a runtime.
type FunctionStats struct {
	Invocations int
	Busy        time.Duration
	// Receives counts receives that returned messages (one per invocation of a queue's function).
	Receives int
	// Errors counts invocations that failed; Timeouts those of a queue's function that ran out of
	// its timeout (the batch waits out its visibility timeout); FailedItems the messages a queue's
	// function reported failed (each received again after its visibility timeout).
	Errors, Timeouts, FailedItems int
}

// LastRuntimeStats returns, per function kind, the invocations of the running runtime, or of the
// last one stopped.
func (s *Stack) LastRuntimeStats() map[string]FunctionStats {
	s.mu.Lock()
	rt := s.runtime
	if rt == nil {
		rt = s.lastRuntime
	}
	s.mu.Unlock()
	out := map[string]FunctionStats{}
	if rt == nil {
		return out
	}
	for kind, p := range rt.Pollers {
		st := p.Stats()
		out[kind] = FunctionStats{Invocations: st.Invocations, Busy: st.Busy, Receives: st.Invocations, Errors: st.Errors, Timeouts: st.Timeouts, FailedItems: st.FailedItems}
	}
	for kind, i := range rt.Invokes {
		n, fails, busy := i.Snapshot()
		f := out[kind]
		f.Invocations += n
		f.Errors += fails
		f.Busy += busy
		out[kind] = f
	}
	return out
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
