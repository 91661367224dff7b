package simworld

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	poolslots "github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// Operator actions (Faults.Actions). Each goes through the code the sfnlimit command line runs
// (internal/tools/ops), built as cmd/sfnlimit builds it, on the world's table and queues:
//
//   - pause TYPE, then resume TYPE 1-15 minutes later (ops.ConfigEditor.Pause and Resume, the
//     resume waking the groups parked by the pause with an ops.Waker, as `sfnlimit resume`);
//   - config set TYPE --rate R, cleared with --rate 0 1-10 minutes later (ConfigEditor.Set);
//   - config set beta --key-limit N, or --key K --limit N, or their removal (ConfigEditor.Set);
//   - config set beta --key-rate R, or --key K --rate R, removed 1-10 minutes later;
//   - config reset TYPE of alpha or beta (ConfigEditor.Reset without --force: a paused type's reset
//     is refused, as on the command line). Gamma is left out: its override holds its state machine
//     and release mode, and a reset would move it to another machine, a redeployment rather than
//     a fault;
//   - dlq redrive of every dead letter (ops.DLQ.Redrive with the router's type check);
//   - StopExecution of a running execution (the console's or the AWS CLI's: sfnlimit has none).
//
// The operator's calls are not faulted and take no virtual time: the faults are the functions'.
// After each, the checker reads the live override back from the table.

// action kinds, drawn uniformly.
const (
	actPause = iota
	actRate
	actKeys
	actReset
	actRedrive
	actStop
	actKinds
)

// operatorActions schedules the run's operator actions at random times in its first 25 minutes
// (the workload's span is 5-25 minutes).
func (w *World) operatorActions(ts []typeSpec, start time.Time) {
	for range w.cfg.Faults.Actions {
		at := time.Duration(w.rng.Int64N(int64(25 * time.Minute)))
		kind := w.rng.IntN(actKinds)
		t := ts[w.rng.IntN(len(ts))]
		w.sched.at(start.Add(at), func() {
			if !w.stopped {
				w.act(context.Background(), kind, t, ts)
			}
		})
	}
	// Key rates on beta, one for every six actions, drawn from a stream of their own: the other
	// actions (and every fault) of a seed stay as they were before key rates were simulated, so
	// the seeds that the finds pin still run the paths they pin.
	kr := rand.New(rand.NewPCG(w.seed, 0x6b657972617465))
	for range (w.cfg.Faults.Actions + 5) / 6 {
		at := time.Duration(kr.Int64N(int64(25 * time.Minute)))
		d := time.Minute + time.Duration(kr.Int64N(int64(9*time.Minute)))
		w.sched.at(start.Add(at), func() {
			if !w.stopped {
				w.keyRateFor(context.Background(), kr, ts[1], d)
			}
		})
	}
}

func (w *World) act(ctx context.Context, kind int, t typeSpec, ts []typeSpec) {
	switch kind {
	case actPause:
		w.pauseFor(ctx, t.name, time.Minute+time.Duration(w.rng.Int64N(int64(14*time.Minute))))
	case actRate:
		w.rateFor(ctx, t.name, time.Minute+time.Duration(w.rng.Int64N(int64(9*time.Minute))))
	case actKeys:
		w.changeKeys(ctx, ts[1]) // beta: the type whose jobs have keys
	case actReset:
		w.reset(ctx, ts[w.rng.IntN(2)].name) // alpha or beta
	case actRedrive:
		w.redrive(ctx)
	case actStop:
		w.stopOne()
	}
}

// editor is the command line's config editor (cmd/sfnlimit's target.editor): the deployment's
// defaults, read here from the functions' own environment rather than the stack's parameters.
func (w *World) editor() (ops.ConfigEditor, error) {
	d, age, err := config.FromEnv(w.getenv)
	if err != nil {
		return ops.ConfigEditor{}, fmt.Errorf("operator: defaults: %w", err)
	}
	return ops.ConfigEditor{Store: config.NewDynamoStore(w.table, "sim"), Defaults: d, CacheAge: age, Now: w.now}, nil
}

// operated records what an operator's command did, and has the checker read the type's live
// configuration back.
func (w *World) operated(typ, what string, err error) {
	if err != nil {
		w.trace(typ, "operator: %s: %v", what, err)
	} else {
		w.trace(typ, "operator: %s", what)
	}
	if typ != "" {
		w.check.configChanged(typ)
	}
}

// pauseFor pauses typ (`sfnlimit pause`) and resumes it after d (`sfnlimit resume`).
func (w *World) pauseFor(ctx context.Context, typ string, d time.Duration) {
	e, err := w.editor()
	if err != nil {
		w.operated(typ, "pause", err)
		return
	}
	reason := "simulated incident"
	_, err = e.Pause(ctx, typ, &reason)
	w.operated(typ, fmt.Sprintf("pause %s for %s", typ, d.Truncate(time.Second)), err)
	w.sched.after(d, func() { w.resume(context.Background(), typ) })
}

// resume is `sfnlimit resume`: the pause lifted, the groups it parked woken with the same waker.
func (w *World) resume(ctx context.Context, typ string) {
	e, err := w.editor()
	if err != nil {
		w.operated(typ, "resume", err)
		return
	}
	res, err := e.Resume(ctx, typ, w.waker())
	w.operated(typ, fmt.Sprintf("resume %s (woke %d groups)", typ, res.Woken), err)
}

// waker wakes parked jobs on the world's lanes queue and table, as cmd/sfnlimit's does.
func (w *World) waker() ops.Waker {
	return ops.Waker{Queue: sqsClient{w}, QueueURL: w.lanes.url, WaitRoom: waitroom.NewStore(w.table, "sim"),
		Leases: lease.NewStore(w.table, "sim"), Pools: poolslots.NewStore(w.table, "sim")}
}

// rates are the start rates an operator sets (per second, ":" burst), slow enough to hold jobs
// back for the types' limits.
var rates = []string{"0.05", "0.2", "0.5:2", "1", "2:4"}

// rateFor sets a start rate on typ (`config set --rate`) and removes it after d (`--rate 0`).
func (w *World) rateFor(ctx context.Context, typ string, d time.Duration) {
	r := rates[w.rng.IntN(len(rates))]
	w.set(ctx, ops.Change{Type: typ, Rate: &r}, "config set "+typ+" --rate "+r)
	w.sched.after(d, func() {
		off := ops.RemoveRate
		w.set(context.Background(), ops.Change{Type: typ, Rate: &off}, "config set "+typ+" --rate 0")
	})
}

// changeKeys changes beta's key caps: its key limit, or one key's own cap, set or removed.
func (w *World) changeKeys(ctx context.Context, t typeSpec) {
	limit := w.check.current(t.name).limit
	n := 1 + w.rng.IntN(max(limit, 1))
	switch w.rng.IntN(4) {
	case 0:
		w.set(ctx, ops.Change{Type: t.name, KeyLimit: &n}, fmt.Sprintf("config set %s --key-limit %d", t.name, n))
	case 1:
		zero := 0
		w.set(ctx, ops.Change{Type: t.name, KeyLimit: &zero}, fmt.Sprintf("config set %s --key-limit 0", t.name))
	case 2:
		k := t.keys[w.rng.IntN(len(t.keys))]
		w.set(ctx, ops.Change{Type: t.name, Key: &k, KeyCap: &n}, fmt.Sprintf("config set %s --key %s --limit %d", t.name, k, n))
	default:
		k := t.keys[w.rng.IntN(len(t.keys))]
		zero := 0
		w.set(ctx, ops.Change{Type: t.name, Key: &k, KeyCap: &zero}, fmt.Sprintf("config set %s --key %s --limit 0", t.name, k))
	}
}

// set is `sfnlimit config set`. A change the command line refuses (a usage error) is traced and
// changes nothing.
func (w *World) set(ctx context.Context, c ops.Change, what string) {
	e, err := w.editor()
	if err == nil {
		_, err = e.Set(ctx, c)
	}
	w.operated(c.Type, what, err)
}

// reset is `sfnlimit config reset TYPE` (without --force).
func (w *World) reset(ctx context.Context, typ string) {
	e, err := w.editor()
	if err == nil {
		_, err = e.Reset(ctx, typ, false)
	}
	var usage ops.UsageError
	if errors.As(err, &usage) {
		err = fmt.Errorf("refused: %w", err)
	}
	w.operated(typ, "config reset "+typ, err)
}

// redrive is `sfnlimit dlq redrive`: every dead letter back to the general queue, those of types
// without a limit left, as the command line checks them.
func (w *World) redrive(ctx context.Context) {
	d, _, err := config.FromEnv(w.getenv)
	if err != nil {
		w.operated("", "dlq redrive", err)
		return
	}
	r, err := config.NewResolver(d, config.NewDynamoStore(w.table, "sim"), time.Second)
	if err != nil {
		w.operated("", "dlq redrive", err)
		return
	}
	q := ops.DLQ{SQS: sqsClient{w}, URL: w.dlq.url, General: w.general.url, Hold: 5 * time.Minute, CheckType: ops.ResolverCheck(r), Caller: producerPrincipal}
	res, err := q.Redrive(ctx, ops.Filter{}, 0, nil)
	for _, m := range res.Moved {
		w.check.redriven(m.Type, m.Sender, m.JobID, m.Body, m.Source)
	}
	w.operated("", "dlq redrive: moved "+strconv.Itoa(res.Redriven), err)
}

// stopOne stops a running execution, drawn from those whose work is not over (StopExecution).
func (w *World) stopOne() {
	var running []*execution
	for _, e := range w.sfn.open {
		if e.running() {
			running = append(running, e)
		}
	}
	if len(running) == 0 {
		return
	}
	e := running[w.rng.IntN(len(running))]
	w.trace(e.meta.Type+"-"+e.meta.ID, "operator: StopExecution %s", e.name)
	w.check.stopped(e)
	w.sfn.stop(e)
}

// keyRates are the key rates an operator sets: slow enough that a key's jobs wait for tokens.
var keyRates = []string{"0.02", "0.05:2", "0.2", "1:3"}

// keyRateFor sets a start rate on every key of t (`config set --key-rate`) or on one key (`--key K
// --rate R`), and removes it after d.
func (w *World) keyRateFor(ctx context.Context, rng *rand.Rand, t typeSpec, d time.Duration) {
	r := keyRates[rng.IntN(len(keyRates))]
	off := ops.RemoveRate
	if rng.IntN(2) == 0 {
		w.set(ctx, ops.Change{Type: t.name, KeyRate: &r}, "config set "+t.name+" --key-rate "+r)
		w.sched.after(d, func() {
			w.set(context.Background(), ops.Change{Type: t.name, KeyRate: &off}, "config set "+t.name+" --key-rate 0")
		})
		return
	}
	k := t.keys[rng.IntN(len(t.keys))]
	w.set(ctx, ops.Change{Type: t.name, Key: &k, KeyOwnRate: &r}, "config set "+t.name+" --key "+k+" --rate "+r)
	w.sched.after(d, func() {
		w.set(context.Background(), ops.Change{Type: t.name, Key: &k, KeyOwnRate: &off}, "config set "+t.name+" --key "+k+" --rate 0")
	})
}
