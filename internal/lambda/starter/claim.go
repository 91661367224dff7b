package starter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// clockSkew is how far Step Functions' clock (an execution's startDate, in milliseconds) may be from
// the starter's: an execution whose start date is earlier than its claim by more than this was not
// started by that claim.
const clockSkew = time.Second

func (s *Starter) claimAndStart(ctx context.Context, x *msg) (verdict, error) {
	var seen *lease.Lease
	for round := 0; round < 3; round++ {
		l, err := s.Leases.Get(ctx, x.key)
		if err != nil {
			return hold, err
		}
		if l == nil && seen != nil && x.ownClaim(*seen) {
			// This message's claim, read a moment ago, is gone: a release freed it and counted its
			// end. A workflow's release step runs before its execution ends, so the attempt may
			// still be RUNNING now; its release's DeleteMessage had a handle this delivery's receive
			// made stale (SQS answers OK and keeps the message). Taken up again, it is reclaimed.
			x.freed = seen.Attempt
			x.log.InfoContext(ctx, "this message's claim was freed by a release while this delivery looked; its attempt is reclaimed", "attempt", seen.Attempt)
		}
		seen = l
		v, err := s.withLease(ctx, x, l)
		if errors.Is(err, lease.ErrConflict) {
			continue // someone changed the lane meanwhile: look again
		}
		return v, err
	}
	return hold, fmt.Errorf("lease of lane %s kept changing", x.key)
}

func (s *Starter) withLease(ctx context.Context, x *msg, l *lease.Lease) (verdict, error) {
	if l != nil && !l.Holds(x.job.Sender, x.job.Key, x.job.ID, x.job.Redrive) {
		return s.laneHeld(ctx, x, *l)
	}
	if l != nil && l.MessageID == x.MessageId && x.receives() < l.Receives {
		// A late copy of an earlier delivery (Lambda may hand a batch over twice): the lease holds
		// the handle of a later receive, the only one SQS still honours, and that delivery does the
		// work. Writing this one's handle would make the release's DeleteMessage a silent no-op, and
		// the message would hold its lane for a whole visibility timeout after its job ended.
		x.log.InfoContext(ctx, "late copy of an earlier delivery; the lease keeps the newer receipt handle",
			"receives", x.receives(), "leaseReceives", l.Receives)
		return hold, nil
	}
	if l != nil && ((l.Status == lease.Bound && !x.copyOf(*l)) || ((l.Status == lease.Starting || l.Status == lease.Retrying) && l.MessageID != x.MessageId)) {
		// A copy an earlier bind of the job sent here (a twin delivery, Lambda handing a batch over
		// twice), back after its own move deleted it and a later bind of the moved copy wrote this
		// lease, or after that bind's copy claimed it: claimed, the job would run with no message
		// left for a retry, and the later bind's copy would take the running attempt over under its
		// own message id (or, over its claim, its release would take this copy's for a duplicate's);
		// either way the release drops the lane's claim as a duplicate's, counting the job's end
		// nowhere. A delivery that would claim a lease its message did not write claims only while
		// it still holds its message (a copy of a stale waiting message bound again,
		// Starter.behindCopy, or a duplicate of the job). One call, only off the common path.
		current, err := s.holdsMessageFor(ctx, x, s.visibilitySeconds())
		if err != nil {
			return hold, err
		}
		if !current {
			why := "stale copy of an earlier bind, its message gone; the lane's bound lease is left to its own copy"
			if l.Status != lease.Bound {
				why = "stale copy of the job, its message gone; the lane's claim is left to the message that wrote it"
			}
			x.log.InfoContext(ctx, why, "status", l.Status, "leaseMessageId", l.MessageID)
			s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
			return hold, nil
		}
	}
	if l != nil && l.Status == lease.Moving {
		if l.MessageID != x.MessageId {
			return s.laneHeld(ctx, x, *l) // another message of the job is leaving the lane
		}
		// This message's move: a twin delivery's, under way, or one that stopped midway. It is
		// finished, never undone by a start (the copy goes once: its deduplication id names this
		// message). A type removed since still finishes it: the copy, refused from its waiting
		// group, is then the job's one dead letter.
		cfg, err := s.Config.Get(ctx, x.key.Type)
		if errors.Is(err, config.ErrUnknownType) {
			cfg, err = config.TypeConfig{Type: x.key.Type, Limit: 1, Strategy: lane.FirstFree}, nil
		}
		if err != nil {
			return hold, err
		}
		return s.move(ctx, x, l, cfg, "finished the move of a job leaving its lane")
	}
	if l != nil && l.Status == lease.DeadLettering {
		// Ended and being dead-lettered: never started again.
		return s.redelivered(ctx, x, *l)
	}

	cfg, err := s.Config.Get(ctx, x.key.Type)
	if errors.Is(err, config.ErrUnknownType) {
		if l != nil && l.Status == lease.Starting {
			// A claim is most often a running job (its message came back after the visibility
			// timeout): a type removed from the config must not dead-letter, and free the lane of,
			// a job whose execution still runs.
			if v, err, decided := s.confirm(ctx, x, *l); decided {
				return v, err
			}
		}
		return s.refuse(ctx, x, l, string(job.ReasonUnknownType), err.Error())
	}
	if err != nil {
		return hold, err
	}
	if x.key.Lane > cfg.Limit {
		if l != nil && l.Status == lease.Starting {
			// An unconfirmed start may have gone through: never move a job that may be running.
			if v, err, decided := s.confirm(ctx, x, *l); decided {
				return v, err
			}
		}
		if (l == nil && x.Attributes["ApproximateReceiveCount"] != "1") || (l != nil && l.Status == lease.Retrying) {
			// The lease may have been deleted by hand: an attempt this message already made goes on
			// here, not in a copy that would take it for a duplicate's. (A message received for the
			// first time has made none: no look-up for the many fresh jobs a lowered limit moves.)
			if v, err, decided := s.ownAttempt(ctx, x, l, cfg); decided {
				return v, err
			}
		}
		return s.move(ctx, x, l, cfg, "lane above the type's limit; job moved")
	}
	notStartedClaim := false
	if cfg.Paused() && l != nil && l.Status == lease.Starting {
		// A claim whose execution exists is a running job's (held again, or released if it
		// ended); one whose start never went through (refused for now: throttled) is a job that
		// has not started, and makes no new start while its type is paused.
		if v, err, decided := s.confirm(ctx, x, *l); decided {
			return v, err
		}
		notStartedClaim = true
	}
	if cfg.Paused() && cfg.Pooled() && l != nil && (l.Status == lease.Bound || l.Status == lease.Retrying || notStartedClaim) {
		// In a pool, a job parked in its lane for the pause (bound, a retry, a start never made)
		// would keep its pools' slots from their other members all that while (a type paused
		// because its attempts fail would hold every slot its failed attempts had): it gives them
		// back with its lane and waits in its waiting group, with its attempts, as one over a
		// pool's cap does. A bound job's bind took its start tokens: the move gives them back.
		return s.move(ctx, x, l, cfg, "type paused: the job gives back its lane and pool slots and waits in its waiting group")
	}
	if cfg.Paused() && (l == nil || l.Status == lease.Bound || l.Status == lease.Retrying || notStartedClaim) {
		// No new start while the type is paused. Outside a pool the job keeps its place: parked in
		// its lane (a bound lane stays bound to it, a retry keeps its lease, a claim that never
		// started keeps its attempt), for the resume to wake.
		if l != nil {
			held, err := s.holdLease(ctx, x, *l, PausedParkFor, true)
			if err != nil {
				return hold, err
			}
			if l.KeyToken || l.TypeToken {
				// A bound job keeps its place, not its bind's tokens (the hold's write cleared
				// them): it takes new ones when it starts, as a retry does, so it cannot start at
				// the resume beside the jobs that take the tokens refilled during the pause.
				s.refundTokens(ctx, x, cfg, l.KeyToken, l.TypeToken)
			}
			l = &held
		}
		resumed, v, err := s.parkInLane(ctx, x)
		if resumed == nil {
			return v, err
		}
		cfg = *resumed
	}
	if l != nil && l.Status == lease.Bound && cfg.Pooled() {
		// The job's first start, bound under higher pool caps, or before its type joined a pool,
		// or before another type joined one of them (its running jobs hold no slot until the
		// sweep gives them one, and count): a lowered cap holds from this start, as from a
		// retry's, and the job takes the slot of a new pool here, or waits in its waiting group
		// with its attempts.
		members, err := s.poolMembers(ctx, cfg)
		if err != nil {
			return hold, err
		}
		why := ""
		if !boundUnder(*l, cfg, members) {
			why, err = s.overPool(ctx, cfg, *l)
		}
		if err != nil {
			return hold, err
		}
		if why != "" {
			return s.move(ctx, x, l, cfg, why)
		}
	}
	if keyLower, limitLower := loweredSinceBind(l, cfg, x.job.Key); keyLower || limitLower {
		// The job's first start, bound under a higher cap of its key or limit of its type (or
		// before its type capped keys, or by a bind that did not record them): a lowered cap
		// holds from this start, as from a retry's, the jobs still running above a lowered limit
		// counted, and over it the job waits in its waiting group with its attempts.
		n, others, err := s.countOthers(ctx, x, *l)
		if err != nil {
			return hold, err
		}
		switch {
		case keyLower && n >= cfg.KeyCap(x.job.Key):
			return s.move(ctx, x, l, cfg, "key at its cap, lowered since the job's bind; the job waits in its key's group")
		case limitLower && others >= cfg.Limit:
			return s.move(ctx, x, l, cfg, "type at its limit, lowered since the job's bind; the job waits in its waiting group")
		}
	}
	if l != nil && (l.Status == lease.Retrying || l.Status == lease.Starting) && (cfg.CapsKeys() || cfg.Strategy == lane.FirstFree) {
		// A retry is a new start, and so is a claim whose start never went through: each counts
		// its key, and under first-free its type's jobs (those above a lowered limit too), like
		// a bind does. Binders counted this lease, so either is over only when lowered since;
		// the job then waits in its waiting group, with its attempts. A claim whose execution
		// exists runs (or ended) and is left to it.
		why, err := s.overCap(ctx, x, *l, cfg)
		if err != nil {
			return hold, err
		}
		if why != "" && l.Status == lease.Starting {
			if v, err, decided := s.confirm(ctx, x, *l); decided {
				return v, err
			}
		}
		if why != "" {
			return s.move(ctx, x, l, cfg, why)
		}
	}
	if l == nil && (cfg.CapsKeys() || cfg.Pooled()) {
		// A job in a free lane it was not bound to: routed straight to a lane before its type
		// capped keys or joined a pool (the random strategy routes its whole backlog so), or a
		// copy whose bind was taken back. Only a bind counts its key's running jobs and takes its
		// pools' slots (bindFree): started here, it could take its key or a pool over its cap. It
		// waits in its key's group first, with the attempts it made.
		if x.Attributes["ApproximateReceiveCount"] != "1" {
			if v, err, decided := s.ownAttempt(ctx, x, l, cfg); decided {
				return v, err
			}
		}
		return s.move(ctx, x, l, cfg, "job not bound in a type that caps keys; job moved to its key's group")
	}

	if l == nil || l.Status == lease.Retrying || (l.Status == lease.Bound && !l.KeyToken) {
		// A retry is a new start, and so is a job in a lane it was not bound to: each takes its
		// key's token here (no bind took one for it), as does a bound job whose lease holds none
		// (given back while it was parked for a pause, or a rate set since its bind). A key waiting for its token holds no lane:
		// the job waits in its key's group (key rates run first-free), with its attempts. (Left in
		// the lane's group with no lease, it would hold back the copy of a job bound to the lane.)
		wait, err := s.takeKeyToken(ctx, x, cfg)
		if err != nil {
			return hold, err
		}
		if wait > 0 {
			if l == nil && x.Attributes["ApproximateReceiveCount"] != "1" {
				// An attempt this message made (its lease deleted) goes on here (as above).
				if v, err, decided := s.ownAttempt(ctx, x, l, cfg); decided {
					return v, err
				}
			}
			s.Metrics.Add(x.key.Type, metrics.JobsRateLimited, 1)
			return s.move(ctx, x, l, cfg, "its key's start rate: the job waits for its key's token in its key's group")
		}
	}
	if l == nil || l.Status == lease.Retrying || (l.Status == lease.Bound && !l.TypeToken) {
		// A new attempt starts only with its start tokens; waiting for one uses no attempt. A bound
		// job's bind took them (bindFree), as its lease records; its key's was taken above.
		wait, err := s.takeTypeToken(ctx, x, cfg)
		if err != nil || wait > 0 {
			s.refundTokens(ctx, x, cfg, l == nil || l.Status != lease.Bound || !l.KeyToken, false) // the key's, if taken above: the job comes back for both
		}
		if err != nil {
			return hold, err
		}
		if wait > 0 {
			if l != nil && s.StaleAfter > 0 && l.Idle(s.now())+wait > s.StaleAfter/2 {
				if _, err := s.holdLease(ctx, x, *l, wait, false); err != nil {
					return hold, err
				}
			}
			return s.waitForToken(ctx, x, cfg, wait), nil
		}
	}
	claimedAt := s.now()
	attempt := x.job.Attempts + 1
	stateMachine := cfg.StateMachineArn
	startedAt := claimedAt
	if l == nil && x.receives() > 1 {
		// Received before, and no lease: this message may have run the attempt already, and the
		// release that freed its lease counted its end (its DeleteMessage had a handle gone stale),
		// perhaps while the execution still ran its release step. Known before the claim, so that
		// the claim says so even if this delivery stops after it. Its retries in the lane ran
		// later attempts that its body does not count (a retry writes only the lease): the one to
		// claim back is the last it ran, whose end the release counted, not the first, whose
		// failure a release would act on again.
		last, _, err := s.lastOwnAttempt(ctx, x, stateMachine, attempt)
		if err != nil {
			return hold, err
		}
		if x.leaseless = last > 0; x.leaseless {
			attempt = last
			// ...or a twin of a delivery that has since moved the job on, its count in the moved
			// copy, and deleted this message. Its claim, checked only once written, would be left
			// naming a message that is gone if its drop then failed, and the moved copy would take
			// it for the job's run and drop itself. So this rare path checks first.
			if gone, err := s.goneSinceItRan(ctx, x, attempt, "no lease in its own lane"); err != nil || gone {
				return hold, err
			}
		}
	}
	fresh := l // the lease the claim goes on from: none for a lane bound to this job
	switch {
	case l == nil:
	case l.Status == lease.Bound:
		// Bound to this job from its waiting group: the claim replaces the bound lease and goes on
		// as on a free lane, from the attempts the lease counts when a newer copy of the job handed
		// its count to it (this copy being a stale one: Starter.behindCopy).
		fresh = nil
		attempt = max(x.job.Attempts, l.Attempt) + 1
	case l.Status == lease.Starting:
		// This attempt's claim: its execution runs (the message came back after the visibility
		// timeout), or its start was not confirmed. Either way the same attempt is started again:
		// Step Functions answers a running execution's name and input with that execution, and a
		// closed one's with ExecutionAlreadyExists.
		attempt = l.Attempt
		if l.StateMachineArn != "" {
			// ...on the state machine it was tried on: a config change since then must not start
			// the same attempt a second time on another one.
			stateMachine = l.StateMachineArn
		} else if sm := job.StateMachineOf(l.ExecutionArn); sm != "" {
			// A lease of a version before claims recorded their state machine (above all one it
			// confirmed running, read as a claim) names it only through its execution.
			stateMachine = sm
		}
		if !l.StartedAt.IsZero() {
			startedAt = l.StartedAt // the attempt's, not this delivery's: status shows how long it runs
		}
	case l.Status == lease.Retrying:
		attempt = l.Attempt + 1
	}
	if l != nil && l.Status == lease.Starting && l.ExecutionArn != "" &&
		l.ExecutionArn != job.ExecutionArn(stateMachine, job.RunName(x.key.Type, x.job.Sender, x.job.Key, x.job.ID, x.job.Redrive, attempt)) {
		// A claim (above all a running lease, read as one) an earlier version named otherwise than
		// today: its execution is looked up by the name the lease records. Started again under
		// today's name, a running attempt would run a second time.
		if v, err, decided := s.confirm(ctx, x, *l); decided {
			return v, err
		}
	}
	if !cfg.Paused() {
		// The claim is a start's commit, and slow calls since this delivery read its type's config
		// may have outlasted the cache: a pause read now (a cache hit while it is fresh) holds the
		// start back, and the lane is looked at again, paused (where a claim whose execution exists
		// goes on, and one whose start never went through waits).
		now, err := s.Config.Get(ctx, x.key.Type)
		if err != nil {
			return hold, err
		}
		if now.Paused() {
			return hold, lease.ErrConflict
		}
	}
	claimed, err := s.claim(ctx, x, l, attempt, stateMachine, startedAt)
	if err != nil {
		return hold, err
	}
	if l == nil {
		// A job that found no lease in its lane (routed straight to it under random, its bind
		// taken back, or a twin of a delivery that has just moved the job away and deleted this
		// message: Lambda may hand a batch over twice) starts only if its delivery still holds its
		// message, asked once its claim is written: a move either came before the claim, and
		// deleted the message, or finds the claim (its moving lease's write fails on it) and waits.
		// The twin must not start: the job would run with no message for its release to retry,
		// while its moved copy drops itself as a duplicate. One call, which leaves the message in
		// flight as a receive does.
		current, err := s.holdsMessageFor(ctx, x, s.visibilitySeconds())
		if err != nil {
			return hold, err
		}
		if !current {
			return s.dropStale(ctx, x, claimed)
		}
	}
	return s.start(ctx, x, claimed, fresh, claimedAt)
}

// claim writes this delivery's claim of attempt on the state machine sm, over prev (nil: the lane has
// no lease), the attempt started at startedAt. The execution's ARN goes in the claim before the start
// is tried: its name is deterministic, so whoever reads the lease next (a release, the sweep, a dead
// letter) finds the execution. The claim is the only write of a start: a claim whose execution
// exists is a running job, and every reader of a lease takes it for one (docs/design.md, "Lease
// status").
func (s *Starter) claim(ctx context.Context, x *msg, prev *lease.Lease, attempt int, sm string, startedAt time.Time) (lease.Lease, error) {
	return s.Leases.Put(ctx, lease.Lease{
		Type: x.key.Type, Lane: x.key.Lane, JobID: x.job.ID, JobKey: x.job.Key, JobSender: x.job.Sender, Batch: x.job.Batch, MessageID: x.MessageId, ReceiptHandle: x.ReceiptHandle, Receives: x.receives(),
		Attempt: attempt, Redrive: x.job.Redrive, Status: lease.Starting, StartedAt: startedAt, SubmittedAt: x.job.SubmittedAt,
		StateMachineArn: sm, ExecutionArn: job.ExecutionArn(sm, job.RunName(x.key.Type, x.job.Sender, x.job.Key, x.job.ID, x.job.Redrive, attempt)),
		Reclaimed: x.leaseless || x.freed == attempt || (prev != nil && prev.Reclaimed && prev.Attempt == attempt), // the attempt's, kept by its claims
	}, prev)
}

// ownClaim reports whether l is a lease of an attempt this message started (or is about to): a claim,
// or one being dead-lettered, of its job, holding this message.
func (x *msg) ownClaim(l lease.Lease) bool {
	return (l.Status == lease.Starting || l.Status == lease.DeadLettering) && l.MessageID == x.MessageId &&
		l.Holds(x.job.Sender, x.job.Key, x.job.ID, x.job.Redrive)
}

// sameJob reports whether an execution's job is x's run: its type, key, id and redrive generation.
// A job of another key with the same id is another job (docs/design.md, "Job identity across
// tenants").
func sameJob(m job.Meta, x *msg) bool {
	return m.Type == x.key.Type && m.Sender == x.job.Sender && m.Key == x.job.Key && m.ID == x.job.ID && m.Redrive == x.job.Redrive
}

// overCap says why the job may not start in own's lane ("" when it may): its key runs its cap in
// other lanes, or (first-free) its type holds its limit's worth of other lanes.
func (s *Starter) overCap(ctx context.Context, x *msg, own lease.Lease, cfg config.TypeConfig) (string, error) {
	n, others, err := s.countOthers(ctx, x, own)
	if err != nil {
		return "", err
	}
	switch {
	case cfg.CapsKeys() && n >= cfg.KeyCap(x.job.Key):
		return "key at its cap, lowered since the job's last attempt; the job waits in its key's group", nil
	case cfg.Strategy == lane.FirstFree && others >= cfg.Limit:
		return "type at its limit, lowered since the job's last attempt; the job waits in its waiting group", nil
	}
	return s.overPool(ctx, cfg, own)
}

// loweredSinceBind reports, for a bound lease b, whether its bind counted its key under a higher cap
// than cfg's, and whether (first-free) it counted its type under a higher limit; a bind that did not
// record one counts as higher.
func loweredSinceBind(b *lease.Lease, cfg config.TypeConfig, key string) (keyLower, limitLower bool) {
	if b == nil || b.Status != lease.Bound {
		return false, false
	}
	return cfg.CapsKeys() && (b.KeyCap == 0 || cfg.KeyCap(key) < b.KeyCap),
		cfg.Strategy == lane.FirstFree && (b.TypeLimit == 0 || cfg.Limit < b.TypeLimit)
}

// countOthers counts the leases of x's type in other lanes than own's: of x's key (n), and all.
func (s *Starter) countOthers(ctx context.Context, x *msg, own lease.Lease) (n, others int, err error) {
	leases, err := s.Leases.ListType(ctx, x.key.Type)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range leases {
		if l.Lane != own.Lane {
			others++
			if l.JobKey == x.job.Key {
				n++
			}
		}
	}
	return n, others, nil
}
