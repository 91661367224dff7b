package releaser

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// maxWakes bounds the parked groups one release wakes: one per lane free at its look, at most this
// many (a release frees one lane; more are free only after a missed wake-up or a raised limit).
const maxWakes = 10

// wake makes parked waiting groups of a type visible again, so the starter binds their heads to
// the lane this release freed. Nothing is woken while the type is paused. Which groups, in order:
//   - The highest effective priority first: a head's priority, one level higher for every
//     PriorityAging it has waited since it was submitted, up to job.MaxPriority. Aging bounds
//     starvation: a head of priority p ranks at the top after (MaxPriority-p) x PriorityAging,
//     where older heads go first, so later high-priority jobs cannot pass it for ever.
//   - Within one effective priority, groups without keys (no parked head has a key or waits for
//     its key's cap): the one whose head was submitted earliest, so a type's jobs start in nearly
//     their global FIFO order; as many as the caller knows lanes free (free), so the sweep fills
//     lanes a raised limit freed with every group parked for them, not one a minute.
//   - Otherwise the fair rule across keys: only groups whose key is under its cap, the key with the
//     fewest running jobs first, then the one that has waited longest for service (parked
//     earliest). A key with a backlog so never takes a freed lane from a key with fewer running,
//     and gets every lane no other key waits for. One group is woken per free lane (the release's,
//     and any a missed wake-up left), so a lane never stays free while an eligible key waits.
//
// free is how many lanes the caller knows to be free (a release: the one it freed; the sweep: what
// its read of the leases left), the groups woken without keys; with keys, the leases are read.
//
// A failure only delays a parked job: the next sweep wakes it while its lane is free.
func (s *Service) wake(ctx context.Context, log *slog.Logger, typ string, free int) {
	if s.WaitRoom == nil {
		return
	}
	ws, err := s.WaitRoom.List(ctx, typ)
	if err != nil {
		log.WarnContext(ctx, "parked jobs not read; a parked job looks again within a minute", "error", err)
		return
	}
	if len(ws) == 0 {
		return
	}
	// A job parked in its lane by a pause holds that lane already: the resume wakes it, never a
	// release, which would spend the lane it freed on it (found in review).
	ws = slices.DeleteFunc(ws, func(w waitroom.Waiter) bool {
		_, ln, err := job.ParseGroupID(w.Group)
		return err == nil && ln != job.WaitingLane
	})
	if len(ws) == 0 {
		return
	}
	order, n := s.wakeOrder(ctx, log, typ, ws, free)
	woken, tries := 0, 0
	for _, w := range order {
		if woken == n || tries == n+3 {
			return
		}
		tries++
		ok, stop := s.wakeHead(ctx, log, w)
		if stop {
			return
		}
		if ok {
			woken++
			log.InfoContext(ctx, "woke a parked job for a free lane", "parkedJobId", w.JobID, "key", w.Key, "group", w.Group,
				"parkedMs", s.now().Sub(w.ParkedAt).Milliseconds())
			s.Metrics.Add(typ, metrics.JobsWoken, 1)
		}
	}
}

// wakeHead takes parked head w's record and makes its message visible: woken says it did. Taken
// by another release or parked again by its group, or its message received again (it is being
// bound, or parked anew), w is not woken, and the caller goes on to the next; stop says a call
// failed, and the wake-up ends (the next sweep wakes a parked job while a lane is free).
func (s *Service) wakeHead(ctx context.Context, log *slog.Logger, w waitroom.Waiter) (woken, stop bool) {
	ok, err := s.WaitRoom.Claim(ctx, w)
	if err != nil {
		log.WarnContext(ctx, "parked job not taken; it looks again within a minute", "parkedJobId", w.JobID, "error", err)
		return false, true
	}
	if !ok {
		return false, false
	}
	_, err = s.Queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &s.QueueURL, ReceiptHandle: &w.ReceiptHandle, VisibilityTimeout: 0,
	})
	if err != nil && !IsStaleHandle(err) {
		log.WarnContext(ctx, "parked job not woken; its record is put back for the next wake-up", "parkedJobId", w.JobID, "error", err)
		s.restore(ctx, log, w)
		return false, true
	}
	return err == nil, false
}

// restore puts back the record of parked head w, claimed for a wake-up that then failed to make it
// visible: without it nothing wakes the head before its park ends (up to waitroom.MaxParkFor).
func (s *Service) restore(ctx context.Context, log *slog.Logger, w waitroom.Waiter) {
	if err := s.WaitRoom.Restore(ctx, w); err != nil {
		log.WarnContext(ctx, "parked record not put back; the job looks again after its park", "parkedJobId", w.JobID, "error", err)
	}
}

// wakeOrder returns the parked groups in the order they get free lanes, and how many to wake: free
// (at least one, at most maxWakes) for groups without keys.
func (s *Service) wakeOrder(ctx context.Context, log *slog.Logger, typ string, ws []waitroom.Waiter, free int) ([]waitroom.Waiter, int) {
	now := s.now()
	rank := func(w waitroom.Waiter) int { return EffectivePriority(w, now, s.PriorityAging) }
	cfg, cfgErr := s.Config.Get(ctx, typ)
	if cfgErr == nil && cfg.Paused() {
		return nil, 0 // a resume wakes them (sfnlimit resume), or they look again after their park
	}
	byHead := func() ([]waitroom.Waiter, int) {
		slices.SortFunc(ws, func(a, b waitroom.Waiter) int {
			return cmp.Or(cmp.Compare(rank(b), rank(a)), a.SubmittedAt.Compare(b.SubmittedAt), a.ParkedAt.Compare(b.ParkedAt), cmp.Compare(a.Group, b.Group))
		})
		return ws, min(max(free, 1), maxWakes)
	}
	if !slices.ContainsFunc(ws, func(w waitroom.Waiter) bool { return w.Key != "" || w.AtKeyCap }) {
		return byHead()
	}
	if cfgErr != nil {
		log.WarnContext(ctx, "type's config not read; waking the oldest parked job", "error", cfgErr)
		return byHead()
	}
	leases, err := s.Leases.ListType(ctx, typ)
	if err != nil {
		log.WarnContext(ctx, "type's leases not read; waking the oldest parked job", "error", err)
		return byHead()
	}
	running := map[string]int{}
	for _, l := range leases {
		running[l.JobKey]++
	}
	var eligible []waitroom.Waiter
	for _, w := range ws {
		if running[w.Key] < cfg.KeyCap(w.Key) {
			eligible = append(eligible, w)
		}
	}
	slices.SortFunc(eligible, func(a, b waitroom.Waiter) int {
		return cmp.Or(cmp.Compare(rank(b), rank(a)), cmp.Compare(running[a.Key], running[b.Key]), a.ParkedAt.Compare(b.ParkedAt), cmp.Compare(a.Group, b.Group))
	})
	// Free lanes are those of 1..limit without a lease: jobs still running in lanes above a
	// lowered limit take none of them (found in review: counting them left lanes idle).
	return eligible, min(max(freeLanes(cfg.Limit, leases), 0), maxWakes)
}

// freeLanes is how many of lanes 1..limit hold none of leases (a type's): jobs still running in
// lanes above a lowered limit take none of them.
func freeLanes(limit int, leases []lease.Lease) int {
	free := limit
	for _, l := range leases {
		if l.Lane <= limit {
			free--
		}
	}
	return free
}

// EffectivePriority is the rank a release gives a parked group at now: its head's priority (the
// record's, else its group's), one level higher per aging (config.DefaultPriorityAging when 0) its
// head has waited since submission, at most job.MaxPriority.
func EffectivePriority(w waitroom.Waiter, now time.Time, aging time.Duration) int {
	p := w.Priority
	if p == 0 {
		_, p, _ = job.GroupPriority(w.Group)
	}
	if p == 0 {
		p = job.DefaultPriority
	}
	if aging <= 0 {
		aging = config.DefaultPriorityAging
	}
	if waited := now.Sub(w.SubmittedAt); waited > 0 && !w.SubmittedAt.IsZero() {
		p += int(waited / aging)
	}
	return min(p, job.MaxPriority)
}

// WakeResumed wakes a type that was just resumed (sfnlimit resume): every group that parked because
// the type was paused, and groups parked for a lane, as many as the type has free lanes. Releases
// during the pause woke no one, so lanes freed then are free with heads parked for them (found by
// e2e scenario 17: a head parked just before the pause waited out its park with every lane idle).
// Heads go in the release's order (effective priority first); those that find no lane park again.
// It returns how many it woke; nothing while the type is still paused.
func (s *Service) WakeResumed(ctx context.Context, typ string) (int, error) {
	return s.wakeAfterPause(ctx, typ, true)
}

// WakePaused wakes only the groups of typ parked because the type was paused, unless it still is:
// every sweep calls it, in case a resume's own wake-up was cut short (a head parked for a lane is
// the sweep's to wake while a lane is free: wakeFree).
func (s *Service) WakePaused(ctx context.Context, typ string) (int, error) {
	return s.wakeAfterPause(ctx, typ, false)
}

func (s *Service) wakeAfterPause(ctx context.Context, typ string, lanes bool) (int, error) {
	if s.WaitRoom == nil {
		return 0, nil
	}
	cfg, err := s.Config.Get(ctx, typ)
	if err != nil || cfg.Paused() {
		return 0, err
	}
	ws, err := s.WaitRoom.List(ctx, typ)
	if err != nil || len(ws) == 0 {
		return 0, err
	}
	free := 0
	if lanes && s.Leases != nil {
		leases, err := s.Leases.ListType(ctx, typ)
		if err != nil {
			return 0, err
		}
		free = freeLanes(cfg.Limit, leases)
	}
	now := s.now()
	slices.SortFunc(ws, func(a, b waitroom.Waiter) int {
		return cmp.Or(cmp.Compare(EffectivePriority(b, now, s.PriorityAging), EffectivePriority(a, now, s.PriorityAging)),
			a.SubmittedAt.Compare(b.SubmittedAt), cmp.Compare(a.Group, b.Group))
	})
	woken, forLanes := 0, 0
	for _, w := range ws {
		if !w.Paused {
			if forLanes >= free {
				continue
			}
			forLanes++
		}
		ok, err := s.WaitRoom.Claim(ctx, w)
		if err != nil {
			return woken, err
		}
		if !ok {
			continue
		}
		_, err = s.Queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &s.QueueURL, ReceiptHandle: &w.ReceiptHandle, VisibilityTimeout: 0})
		if err != nil && !IsStaleHandle(err) {
			s.restore(ctx, s.Log.With("type", typ), w)
			return woken, fmt.Errorf("wake parked job %s of resumed type %s: %w", w.JobID, typ, err)
		}
		if err == nil {
			woken++
		}
	}
	return woken, nil
}

// wakeFree wakes parked groups of a first-free type that has lanes free, one per free lane as a
// release does (wake), going by the sweep's read of the leases (all, of every type): a lane free
// while a group is parked for it is a wake-up that never came.
func (s *Service) wakeFree(ctx context.Context, typ string, all []lease.Lease) {
	cfg, err := s.Config.Get(ctx, typ)
	if err != nil || cfg.Strategy != lane.FirstFree || cfg.Paused() || (cfg.Pooled() && s.Pools != nil) {
		return // a pooled type's parked jobs are woken for its pools' room (sweepPools)
	}
	var leases []lease.Lease
	for _, l := range all {
		if l.Type == typ {
			leases = append(leases, l)
		}
	}
	if free := freeLanes(cfg.Limit, leases); free > 0 {
		s.wake(ctx, s.Log.With("type", typ, "source", "sweep"), typ, free)
	}
}
