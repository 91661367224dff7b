package starter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// bind moves a job from its type's waiting group to a free lane (the first-free strategy). A lane is
// free when it has no lease: the bind writes the lane's lease first, conditionally (status bound),
// then sends the job to the lane's group and acknowledges the waiting message. The lane's copy claims
// the lane from the bound lease and starts like any other job. When every lane is taken, the message
// is parked, in flight, for a release to wake.
func (s *Starter) bind(ctx context.Context, x *msg) (v verdict, err error) {
	if s.WaitRoom == nil {
		return hold, errors.New("the starter has no wait room to park first-free jobs in")
	}
	w := waitroom.Waiter{Type: x.key.Type, Group: x.Attributes["MessageGroupId"], MessageID: x.MessageId,
		ReceiptHandle: x.ReceiptHandle, Receives: x.receives(), JobID: x.job.ID, Key: x.job.Key, Priority: x.job.EffectivePriority(),
		SubmittedAt: x.job.SubmittedAt, ParkedAt: s.now()}
	parked := false
	if x.receives() != 1 {
		// Parked on an earlier receive, perhaps: unless it parks again, its group's record goes, so
		// no release spends a wake-up on it.
		defer func() {
			if !parked {
				if err := s.WaitRoom.Unpark(ctx, w); err != nil {
					x.log.WarnContext(ctx, "parked record not removed; a release may wake this group for nothing", "error", err)
				}
			}
		}()
	}
	cfg, err := s.Config.Get(ctx, x.key.Type)
	if errors.Is(err, config.ErrUnknownType) {
		return s.refuse(ctx, x, nil, string(job.ReasonUnknownType), err.Error())
	}
	if err != nil {
		return hold, err
	}
	leases, err := x.view.read(ctx, s.Leases, x.key.Type, false)
	if err != nil {
		return hold, err
	}
	if own := holding(leases, x.job); own != nil {
		return s.held(ctx, x, *own, cfg)
	}
	if cfg.Paused() {
		v, isParked, resumed, err := s.parkPaused(ctx, x, w)
		if resumed == nil {
			parked = isParked
			return v, err
		}
		cfg = *resumed
	}
	if cfg.Strategy != lane.FirstFree {
		// The type left first-free while the job waited: it goes to a lane as its strategy chooses.
		to, err := s.Lanes.Choose(ctx, x.job, cfg.Limit)
		if err != nil {
			return hold, err
		}
		return s.sendTo(ctx, x, x.job, to, cfg)
	}
	if want := cfg.WaitingGroup(x.job); want != w.Group && (x.job.Key != "" || cfg.KeyLimit > 0) {
		// A key's jobs are counted by the one binder of its group: a job that waits elsewhere (the
		// default key's other groups, routed before the type got a key limit) moves there first.
		x.log.InfoContext(ctx, "moving a waiting job to its key's group", "group", want)
		s.Metrics.Add(x.key.Type, metrics.JobsMoved, 1)
		return s.sendTo(ctx, x, x.job, job.WaitingLane, cfg)
	}
	for look := range 2 {
		b, atCap, wait, err := s.bindFree(ctx, x, cfg, leases)
		if atCap.pool != "" && look == 0 && err == nil && x.receives() > 1 {
			// A head woken (or looking again) finds its pool full: it reads the config past the
			// cache before it parks, so a cap raised a moment ago (config pool set wakes the
			// pool's heads at once) counts now rather than after the cache.
			if now, ferr := s.fresh(ctx, x.key.Type); ferr == nil && !slices.Equal(now.Pools, cfg.Pools) {
				cfg = now
				b, atCap, wait, err = s.bindFree(ctx, x, cfg, leases)
			}
		}
		if atCap.pool != "" {
			w.AtPool = atCap.pool
		}
		if errors.Is(err, admission.ErrSkipped) {
			// Skipped by another copy of this message, or by a delivery of it that stopped before
			// its acknowledgement: it ends so, and takes no lane.
			x.log.InfoContext(ctx, "the job was skipped before (overflow rule skip); not binding it")
			if look == 1 {
				// Parked on the first look (the deferred unpark runs only past a first receive).
				if err := s.WaitRoom.Unpark(ctx, w); err != nil {
					x.log.WarnContext(ctx, "parked record not removed; a release may wake this group for nothing", "error", err)
				}
				parked = true // removed here; the deferred unpark has nothing left to do
			}
			return s.endSkipped(ctx, x)
		}
		if err != nil {
			return hold, err
		}
		if wait > 0 {
			// Its key's start rate: the job waits in its key's group, holding no lane, and its
			// key's other jobs behind it (one binder per group); other keys' groups go on.
			if look == 1 {
				// Parked on the first look: not waiting for a lane, so no release may wake it.
				if err := s.WaitRoom.Unpark(ctx, w); err != nil {
					x.log.WarnContext(ctx, "parked record not removed; a release may wake this group for nothing", "error", err)
				}
				parked = true // removed here; the deferred unpark has nothing left to do
			}
			return s.waitForToken(ctx, x, cfg, wait), nil
		}
		w.AtKeyCap = atCap.key
		if b != nil {
			if stale, err := s.staleBinder(ctx, x, cfg, *b); err != nil || stale {
				if stale {
					parked = true // a record under its message id is the group's head's: leave it
				}
				return hold, err
			}
			x.view.bound(*b)
			if look == 1 {
				if err := s.WaitRoom.Unpark(ctx, w); err != nil {
					x.log.WarnContext(ctx, "parked record not removed; a release may wake this group for nothing", "error", err)
				}
			}
			return s.sendAdmitted(ctx, x, *b, cfg)
		}
		if look == 0 {
			// Invisible first, then the record, then look again: a release that frees a lane after
			// this look either reads the record and wakes the message (after it was made
			// invisible, so the wake-up is not undone) or freed the lane before the second look.
			// A head parked before parks longer (waitroom.ParkPeriod): its looks by itself are
			// only the safety net, and they load the type's hot partition keys.
			park := waitroom.ParkPeriod(x.receives(), s.jitter)
			w.Until = w.ParkedAt.Add(park)
			current, err := s.holdsMessageFor(ctx, x, int32(park.Seconds()))
			if err != nil {
				return hold, fmt.Errorf("park waiting message: %w", err)
			}
			if !current {
				// A stale delivery (Lambda may hand a batch over twice): the message was received
				// again or deleted since. Its record would replace the group's real head's, which
				// no release could then wake; nor may it remove that head's record (Unpark is by
				// message id, and the head may be this message received again and parked).
				parked = true
				x.log.InfoContext(ctx, "stale delivery of a waiting message; not parking it")
				s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
				return hold, nil
			}
			// The overflow rules act from the group's current head only, and never for a key
			// without a cap of its own (a full type is not a key at its cap).
			atKeyCap := w.AtKeyCap && cfg.HasKeyCap(x.job.Key)
			if atKeyCap && cfg.Skips() {
				if v, skipped, err := s.skipBehind(ctx, x, cfg); err != nil || skipped {
					return v, err
				}
			}
			if atKeyCap && cfg.Cancels() {
				// A job that stops another is admitted first: one skipped under an earlier rule
				// (its message delivered again) ends so, and stops nothing.
				if err := s.admit(ctx, x, cfg); errors.Is(err, admission.ErrSkipped) {
					return s.endSkipped(ctx, x)
				} else if err != nil {
					return hold, err
				}
				if s.cancelOlder(ctx, x, leases) && x.receives() <= maxQuickLooks {
					// An older job of its key is about to run (or its stop failed): it looks
					// again shortly to stop it, rather than park for a release.
					return s.backoff(ctx, x.SQSMessage), nil
				}
			}
			if err := s.WaitRoom.Park(ctx, w); errors.Is(err, waitroom.ErrGroupParked) {
				// Another message of this group is parked (a queue that hands out two messages of
				// one group at once): this one looks again shortly rather than wait unrecorded.
				parked = true // its record is the other message's: leave it
				x.log.InfoContext(ctx, "another message of the waiting group is parked; looking again shortly")
				return s.backoff(ctx, x.SQSMessage), nil
			} else if err != nil {
				return hold, err
			}
			if leases, err = x.view.read(ctx, s.Leases, x.key.Type, true); err != nil {
				return hold, err
			}
			if own := holding(leases, x.job); own != nil {
				// Bound meanwhile by another copy of this delivery (Lambda may hand a batch over
				// twice): the job holds a lane, so the record this copy just wrote must go.
				if err := s.WaitRoom.Unpark(ctx, w); err != nil {
					x.log.WarnContext(ctx, "parked record not removed; a release may wake this group for nothing", "error", err)
				}
				parked = true // removed here; the deferred unpark has nothing left to do
				return s.held(ctx, x, *own, cfg)
			}
		}
	}
	parked = true
	switch {
	case w.AtKeyCap:
		x.log.InfoContext(ctx, "key at its cap; waiting group parked until a release wakes it",
			"keyCap", cfg.KeyCap(x.job.Key), "group", w.Group)
		s.Metrics.Add(x.key.Type, metrics.JobsAtKeyCap, 1)
	case w.AtPool != "":
		x.log.InfoContext(ctx, "pool at its cap; waiting group parked until a release in the pool wakes it", "pool", w.AtPool, "group", w.Group)
		s.Metrics.Add(x.key.Type, metrics.JobsAtPoolCap, 1)
	default:
		x.log.InfoContext(ctx, "every lane taken; waiting group parked until a release wakes it", "limit", cfg.Limit, "group", w.Group)
	}
	s.Metrics.Add(x.key.Type, metrics.JobsParked, 1)
	return hold, nil
}

// staleBinder reports whether this delivery bound b without holding its waiting message, and then
// gives b's lane back. A key's count is exact only while its group's head is its one binder, and a
// stale delivery (Lambda may hand a batch over twice) is not that head once an earlier delivery
// acknowledged the message: the next head, received since, may be counting the key beside it. The
// check follows the write, so a head received after the message's delete reads b. Only a type that
// caps keys pays the call: lanes and pool slots are taken by conditional writes, exact whoever binds.
func (s *Starter) staleBinder(ctx context.Context, x *msg, cfg config.TypeConfig, b lease.Lease) (bool, error) {
	if !cfg.CapsKeys() {
		return false, nil
	}
	current, err := s.holdsMessageFor(ctx, x, s.visibilitySeconds())
	if current {
		return false, nil
	}
	// Stale, or unknown (err): a stale delivery's lease kept would count the key, and idle the lane,
	// until the sweep took it back. No copy went, so the lane goes back either way, and a current
	// delivery binds again when its message comes back.
	if ferr := s.freeLane(ctx, b); ferr != nil && !errors.Is(ferr, lease.ErrConflict) {
		return err == nil, errors.Join(err, fmt.Errorf("give back lane %d bound by a delivery that may be stale: %w", b.Lane, ferr))
	}
	if err != nil {
		return false, err
	}
	x.log.InfoContext(ctx, "stale delivery of a waiting message; lane it bound given back", "toLane", b.Lane)
	s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
	return true, nil
}

// leaseView is a type's leases as a waiting group's batch read them: one Query serves the batch's
// binds, each adding the lane it took. A lane the view shows free may have been taken since (the
// conditional write finds out); one it shows taken may have been freed, which the look after parking
// reads afresh. So a bind under load costs two Queries, not three.
type leaseView struct {
	leases []lease.Lease
	loaded bool
}

// read returns the view, reading the leases when it has none yet or when fresh is asked.
func (v *leaseView) read(ctx context.Context, store leaseStore, typ string, fresh bool) ([]lease.Lease, error) {
	if v.loaded && !fresh {
		return v.leases, nil
	}
	ls, err := store.ListType(ctx, typ)
	if err != nil {
		return nil, err
	}
	v.leases, v.loaded = ls, true
	return ls, nil
}

// bound adds the lane a bind just took, for a job of key.
func (v *leaseView) bound(b lease.Lease) {
	// Its lane and key count for the batch's next binds, its sender and submission for the cancel
	// rule's look at its key (cancelOlder); not its job, which only this message holds.
	v.leases = append(v.leases, lease.Lease{Type: b.Type, Lane: b.Lane, JobKey: b.JobKey, Status: lease.Bound, JobSender: b.JobSender, SubmittedAt: b.SubmittedAt})
}

// held handles a waiting message whose job already holds a lane (own is its lease).
func (s *Starter) held(ctx context.Context, x *msg, own lease.Lease, cfg config.TypeConfig) (verdict, error) {
	if own.Status == lease.Bound && (own.MessageID == x.MessageId || (own.HandedBy != "" && own.HandedBy == x.MessageId)) {
		// This message's bind wrote the lease, or this message handed it its count (behindCopy),
		// and the bind's copy may not have gone (the send failed, or the invocation stopped): the
		// copy goes again, and SQS drops it if the first went. In a pool, only with its slots: the
		// bind may have stopped before it took them. In a type that caps keys, only from a delivery
		// that holds its message: the lease may be a stale delivery's bind, over the key's cap until
		// that delivery gives it back (staleBinder), and a stale delivery is not the one to send
		// (the message's delete went with the job's copy, and a later receive sends this one).
		if cfg.CapsKeys() {
			if stale, err := s.droppedIfStale(ctx, x, "stale delivery of a waiting message; its bind's copy is left to its current delivery", "heldLane", own.Lane); err != nil || stale {
				return hold, err
			}
		}
		if ok, err := s.heldSlots(ctx, x, cfg, own); err != nil || !ok {
			if err != nil {
				return hold, err
			}
			return s.backoff(ctx, x.SQSMessage), nil
		}
		return s.sendAdmitted(ctx, x, own, cfg)
	}
	if behind(own, x.job.Attempts) {
		return s.behindCopy(ctx, x, own, cfg)
	}
	if own.Status == lease.Bound {
		// Another message's bind, its copy not claimed yet: that bind may still give the lane back
		// (a stale delivery's, whose message is gone, or one whose pool filled). Dropped now, this
		// message would leave the job nowhere; it waits for the claim (then it is a copy of the
		// job) or the give-back (then it binds).
		x.log.InfoContext(ctx, "the job is bound by another message, its copy not claimed yet; looking again shortly", "heldLane", own.Lane)
		return s.backoff(ctx, x.SQSMessage), nil
	}
	if own.Status == lease.Starting && own.MessageID != x.MessageId && own.ExecutionArn != "" {
		// Another message's claim whose start is not made may be a stale delivery's (a twin of
		// one that moved the job here, its message gone), which checks its message only once its
		// claim is written and then drops it. Dropped now, this message, the job's only one, would
		// leave the job nowhere: it looks again shortly, and is a copy of the job once the claim's
		// start is made. Only off the common path: one DescribeExecution.
		_, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &own.ExecutionArn})
		if isErr[*sfntypes.ExecutionDoesNotExist](err) {
			x.log.InfoContext(ctx, "the job's lane is claimed by another message, its start not made; looking again shortly", "heldLane", own.Lane)
			return s.backoff(ctx, x.SQSMessage), nil
		}
		if err != nil {
			return hold, fmt.Errorf("describe execution %s holding the job's lane %d: %w", own.ExecutionArn, own.Lane, err)
		}
	}
	// The job is in a lane already (another message of it was bound, or its copy runs): this
	// message is a copy of it.
	x.log.WarnContext(ctx, "duplicate job: it already holds a lane; dropping this copy", "heldLane", own.Lane, "status", own.Status)
	s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
	return ack, nil
}

// behind reports whether own, a lease of the job, was written by a copy that had counted fewer of its
// attempts than one that has made attempts: a bound lease records the attempts made before it, a claim
// the attempt it starts.
func behind(own lease.Lease, attempts int) bool {
	switch own.Status {
	case lease.Bound:
		return own.Attempt < attempts
	case lease.Starting:
		return own.Attempt <= attempts
	}
	return false
}

// behindCopy handles a waiting message whose job's lane is held by a stale copy of it (behind): one that
// counts fewer attempts, such as a waiting message back after a killed delivery and bound again
// with the count it had. This message is the job's newest copy, and the job must go on from its
// count, once:
//   - a bound lease takes this message's count (a conditional write), and its copy's claim starts
//     the attempt after it: this message is then a copy of the job in that lane, and goes;
//   - a claim whose execution this claim started holds the job's run: this message goes;
//   - a claim of an attempt another message ran finds it so and drops itself: this message waits
//     for the lane to free, and binds then.
func (s *Starter) behindCopy(ctx context.Context, x *msg, own lease.Lease, cfg config.TypeConfig) (verdict, error) {
	log := x.log.With("heldLane", own.Lane, "status", own.Status, "leaseAttempt", own.Attempt, "attempts", x.job.Attempts)
	if own.Status == lease.Bound {
		if cfg.CapsKeys() {
			// A stale delivery's bind (Starter.staleBinder) counted its key from leases read before
			// the group's head bound another of its jobs: over the cap, it is given back, never
			// taken over. The copy waits for the give-back (or the claim).
			n, _, err := s.countOthers(ctx, x, own)
			if err != nil {
				return hold, err
			}
			if n >= cfg.KeyCap(x.job.Key) {
				log.InfoContext(ctx, "the job's lane is bound to a stale copy of it over its key's cap; waiting for it to be given back")
				return s.backoff(ctx, x.SQSMessage), nil
			}
		}
		next := own
		next.Attempt, next.HandedBy = x.job.Attempts, x.MessageId
		written, err := s.Leases.Put(ctx, next, &own)
		if err != nil {
			return hold, fmt.Errorf("hand this copy's attempts to the stale copy's bound lease: %w", err)
		}
		log.WarnContext(ctx, "the job's lane is bound to a stale copy of it; its lease now counts this copy's attempts, and this copy is dropped")
		s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
		// The bind's copy may never have gone: its lease write answered as failed, and a twin
		// delivery of its waiting message bound another lane and acknowledged it (seed 30550 of
		// races: the job then lived only in this lease, which the sweep took back). It goes from
		// here, under the bind's deduplication id (SQS drops it if it went), as from the bind's own
		// message: with the lease's pool slots (that bind may have stopped before it took them),
		// and again from this message's next delivery if this one stops before the send (the
		// lease names it: HandedBy).
		return s.held(ctx, x, written, cfg)
	}
	d, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &own.ExecutionArn})
	if err != nil && !isErr[*sfntypes.ExecutionDoesNotExist](err) {
		return hold, fmt.Errorf("describe execution %s of a stale copy's claim: %w", own.ExecutionArn, err)
	}
	if err == nil {
		var in job.ExecutionInput
		_ = json.Unmarshal([]byte(aws.ToString(d.Input)), &in)
		if in.Job.MessageID != "" && in.Job.MessageID == own.MessageID {
			log.WarnContext(ctx, "the job runs in a lane a stale copy of it claimed; dropping this copy", "execution", own.ExecutionArn)
			s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
			return ack, nil
		}
	}
	log.InfoContext(ctx, "the job's lane is claimed by a stale copy of it; waiting for it to drop")
	return s.backoff(ctx, x.SQSMessage), nil
}

// holding returns the lease that holds job j's run, if any: not a moving one, whose job is on its
// way back to wait (this message, most often).
func holding(leases []lease.Lease, j job.Job) *lease.Lease {
	for i, l := range leases {
		if l.Status != lease.Moving && l.Holds(j.Sender, j.Key, j.ID, j.Redrive) {
			return &leases[i]
		}
	}
	return nil
}

// bindFree writes a bound lease for the job on a lane of 1..limit that has none, trying them in an
// order that starts at a lane chosen by a hash of the job (so concurrent binders seldom collide); it
// returns the lease written, or nil when every lane is taken or the job's key runs its cap (atCap).
// The key's count is exact: every job of a key binds from the key's one waiting group, whose
// messages FIFO hands out one batch at a time, so no other binder adds to it meanwhile (releases
// only lower it).
//
// A limit lowered under running jobs leaves some in lanes above it, and they count: a job binds
// only while the type holds fewer leases than its limit, and then only to one of the lowest free
// lanes left after the lanes above the limit are counted (so two binders reading the same leases
// cannot both take the last place).
//
// A job whose key or type has a start rate binds with its tokens, taken once a lane is free for it
// (so a job that parks spends none); wait > 0 says how long until one is due.
func (s *Starter) bindFree(ctx context.Context, x *msg, cfg config.TypeConfig, leases []lease.Lease) (b *lease.Lease, atCap full, wait time.Duration, err error) {
	taken := make(map[int]bool, len(leases))
	ofKey, above := 0, 0
	for _, l := range leases {
		taken[l.Lane] = true
		if l.JobKey == x.job.Key {
			ofKey++
		}
		if l.Lane > cfg.Limit {
			above++
		}
	}
	if cfg.CapsKeys() && ofKey >= cfg.KeyCap(x.job.Key) {
		return nil, full{key: true}, 0, nil
	}
	allowed := map[int]bool{} // with jobs above the limit: the lanes a bind may take
	if above > 0 {
		left := -above
		for ln := 1; ln <= cfg.Limit; ln++ {
			if !taken[ln] {
				left++
			}
		}
		for ln := 1; ln <= cfg.Limit && len(allowed) < left; ln++ {
			if !taken[ln] {
				allowed[ln] = true
			}
		}
		if len(allowed) == 0 {
			return nil, full{}, 0, nil
		}
	}
	tokens := len(taken) < cfg.Limit+above
	keyToken, typeToken := false, false // taken, for the lease to record (lease.Lease.KeyToken)
	var views []pool.View
	if tokens {
		// A lane is free: the pools must have room too, before any token goes.
		var at string
		if views, at, err = s.lookPools(ctx, cfg); err != nil || at != "" {
			return nil, full{pool: at}, 0, err
		}
		if wait, err := s.takeToken(ctx, x, cfg); err != nil || wait > 0 {
			return nil, full{}, wait, err
		}
		keyToken = s.Rates != nil && cfg.KeyRateOf(x.job.Key).IsSet()
		typeToken = s.Rates != nil && cfg.Rate.IsSet()
	}
	members, err := s.poolMembers(ctx, cfg)
	if err != nil {
		return nil, full{}, 0, err
	}
	if tokens {
		// A job of a type with key caps is admitted before its lease is written, so a bound lease
		// is always an admitted job's: no newer job is skipped behind a job that is itself skipped,
		// and a job skipped under the rule skip never runs under another rule set since.
		if err := s.admit(ctx, x, cfg); err != nil {
			s.refundTokens(ctx, x, cfg, true, true)
			return nil, full{}, 0, err
		}
	}
	for _, ln := range lane.Spread(x.job, cfg.Limit) {
		if taken[ln] || (above > 0 && !allowed[ln]) {
			continue
		}
		b, err := s.Leases.Put(ctx, lease.Lease{
			Type: x.key.Type, Lane: ln, JobID: x.job.ID, JobKey: x.job.Key, JobSender: x.job.Sender, Batch: x.job.Batch, Redrive: x.job.Redrive, MessageID: x.MessageId,
			Attempt: x.job.Attempts, Status: lease.Bound, StartedAt: s.now(), SubmittedAt: x.job.SubmittedAt, PoolCaps: poolCaps(cfg),
			PoolMembers: members, KeyToken: keyToken, TypeToken: typeToken, KeyCap: keyCapOf(cfg, x.job.Key),
			TypeLimit: cfg.Limit,
		}, nil)
		if errors.Is(err, lease.ErrConflict) {
			continue // taken since the leases were read
		}
		if err != nil {
			return nil, full{}, 0, err // the lease may have been written: its tokens are its start's
		}
		at, err := s.bindSlots(ctx, x, cfg, b, views)
		if err != nil {
			return nil, full{}, 0, err // the lease is this message's: its next delivery takes its slots
		}
		if at != "" {
			return nil, full{pool: at}, 0, nil // its tokens went back with its lease (releaser.Service.Free)
		}
		return &b, full{}, 0, nil
	}
	if tokens {
		// Every lane it saw free was taken since (the batch's view of the leases is older than its
		// binds): no start, so its tokens go back, for the job's next look or another's.
		s.refundTokens(ctx, x, cfg, true, true)
	}
	return nil, full{}, 0, nil
}

// keyCapOf is the cap a bind counts key's jobs under (0: the type caps no key).
func keyCapOf(cfg config.TypeConfig, key string) int {
	if !cfg.CapsKeys() {
		return 0
	}
	return cfg.KeyCap(key)
}

// full says what a bind found with no room: the job's key (at its cap), or a pool (by name).
type full struct {
	key  bool
	pool string
}

// sendBound sends the waiting job to the lane of bound, the lease its bind wrote, and acknowledges the
// waiting message. The copy's deduplication id names the bind (its waiting message and time), so a
// send retried for the same bound lease is dropped by SQS, and the copy of a later bind is not.
func (s *Starter) sendBound(ctx context.Context, x *msg, bound lease.Lease) (verdict, error) {
	j, to := x.job, bound.Lane
	body, err := json.Marshal(j)
	if err != nil {
		return hold, fmt.Errorf("encode job: %w", err)
	}
	dedup := job.BoundDedupID(j.Type, j.Sender, j.Key, j.ID, j.Redrive, to, bound.MessageID, bound.StartedAt.UnixNano())
	if _, err := s.Queue.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &s.QueueURL, MessageBody: aws.String(string(body)),
		MessageGroupId: aws.String(job.GroupID(j.Type, to)), MessageDeduplicationId: &dedup,
	}); err != nil {
		return hold, fmt.Errorf("send job to lane %d: %w", to, err)
	}
	x.log.InfoContext(ctx, "bound to a free lane", "toLane", to, "waitedMs", s.now().Sub(j.SubmittedAt).Milliseconds())
	s.Metrics.Add(x.key.Type, metrics.JobsBound, 1)
	return ack, nil
}

// sendTo sends job j, now in message x, to lane to of its type, or to its waiting group when to is
// job.WaitingLane, and acknowledges x. The copy's deduplication id names x, so a send retried is
// dropped by SQS while a job that comes back here later, in another message, is not.
func (s *Starter) sendTo(ctx context.Context, x *msg, j job.Job, to int, cfg config.TypeConfig) (verdict, error) {
	return s.sendToGroup(ctx, x, j, to, destination(j, to, cfg))
}

// destination is the message group of lane to of job j's type, or of its waiting group when to is
// job.WaitingLane.
func destination(j job.Job, to int, cfg config.TypeConfig) string {
	if to == job.WaitingLane {
		return cfg.WaitingGroup(j)
	}
	return job.GroupID(j.Type, to)
}

// sendToGroup is sendTo with the group chosen: lane to's, or a waiting group.
func (s *Starter) sendToGroup(ctx context.Context, x *msg, j job.Job, to int, group string) (verdict, error) {
	body, err := json.Marshal(j)
	if err != nil {
		return hold, fmt.Errorf("encode job: %w", err)
	}
	dedup := job.MovedDedupID(j.Type, j.Sender, j.Key, j.ID, j.Redrive, to, x.MessageId)
	if _, err := s.Queue.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &s.QueueURL, MessageBody: aws.String(string(body)),
		MessageGroupId: aws.String(group), MessageDeduplicationId: &dedup,
	}); err != nil {
		return hold, fmt.Errorf("send job to %s: %w", group, err)
	}
	return ack, nil
}
