package releaser_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A release that frees a lane makes visible the parked waiting group of its type whose head was
// submitted earliest, skipping records whose message was received again meanwhile; a release that
// frees nothing wakes nobody.
func TestReleaseWakesTheOldestParkedJob(t *testing.T) {
	tests := []struct {
		name   string
		lease  lease.Lease
		give   releaser.Request
		parked []waitroom.Waiter
		stale  map[string]bool // receipt handles SQS calls stale
		want   []string        // handles made visible (timeout 0), in order
	}{
		{
			name: "success wakes the oldest", lease: held("reports", 1, "r-1001", 1, lease.Starting),
			give: req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			parked: []waitroom.Waiter{
				{Type: "reports", Group: "reports-w2", MessageID: "m-2", ReceiptHandle: "h-2", JobID: "w-2", SubmittedAt: t0.Add(2 * time.Second)},
				{Type: "reports", Group: "reports-w1", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", SubmittedAt: t0.Add(time.Second)},
				{Type: "payments", Group: "payments-wp", MessageID: "m-p", ReceiptHandle: "h-p", JobID: "p-1", SubmittedAt: t0},
			},
			want: []string{"h-1"},
		},
		{
			name: "a stale parked record is skipped", lease: held("reports", 1, "r-1001", 3, lease.Starting),
			give: req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", "boom"),
			parked: []waitroom.Waiter{
				{Type: "reports", Group: "reports-w1", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", SubmittedAt: t0.Add(time.Second)},
				{Type: "reports", Group: "reports-w2", MessageID: "m-2", ReceiptHandle: "h-2", JobID: "w-2", SubmittedAt: t0.Add(2 * time.Second)},
			},
			stale: map[string]bool{"h-1": true},
			want:  []string{"h-1", "h-2"},
		},
		{
			name: "a higher priority first", lease: held("reports", 1, "r-1001", 1, lease.Starting),
			give: req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			parked: []waitroom.Waiter{
				{Type: "reports", Group: "reports-0", MessageID: "m-1", ReceiptHandle: "h-normal", JobID: "w-1", SubmittedAt: t0.Add(-time.Second)},
				{Type: "reports", Group: "reports-0!9", MessageID: "m-2", ReceiptHandle: "h-high", JobID: "w-2", SubmittedAt: t0},
				{Type: "reports", Group: "reports-0!1", MessageID: "m-3", ReceiptHandle: "h-low", JobID: "w-3", SubmittedAt: t0.Add(-2 * time.Second)},
			},
			want: []string{"h-high"},
		},
		{
			// Aging: waited 9 minutes, low (1) ranks at the top (9), beside the fresh high head, and
			// the older goes first.
			name: "an old low-priority head passes fresh high ones", lease: held("reports", 1, "r-1001", 1, lease.Starting),
			give: req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			parked: []waitroom.Waiter{
				{Type: "reports", Group: "reports-0!9", MessageID: "m-2", ReceiptHandle: "h-high", JobID: "w-2", SubmittedAt: t0.Add(-time.Second)},
				{Type: "reports", Group: "reports-0!1", MessageID: "m-3", ReceiptHandle: "h-low", JobID: "w-3", SubmittedAt: t0.Add(-9 * time.Minute)},
			},
			want: []string{"h-low"},
		},
		{
			// Keyed groups: priority comes before the fair rule across keys (acme runs nothing, beta
			// one job, yet beta's head is high priority).
			name: "priority before fairness across keys", lease: held("reports", 1, "r-1001", 1, lease.Starting),
			give: req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			parked: []waitroom.Waiter{
				{Type: "reports", Group: "reports#acme", MessageID: "m-1", ReceiptHandle: "h-acme", JobID: "w-1", Key: "acme", SubmittedAt: t0},
				{Type: "reports", Group: "reports#beta", MessageID: "m-2", ReceiptHandle: "h-beta", JobID: "w-2", Key: "beta", Priority: 9, SubmittedAt: t0},
			},
			want: []string{"h-beta", "h-acme"}, // two lanes free: both, beta first
		},
		{
			name: "a retry keeps its lane and wakes nobody", lease: held("reports", 1, "r-1001", 1, lease.Starting),
			give: req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", "boom"),
			parked: []waitroom.Waiter{
				{Type: "reports", Group: "reports-w1", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", SubmittedAt: t0},
			},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			r.svc.Now = r.clock.Now // heads age by the rig's clock
			withParked(t, r, tt.parked...)
			r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
				if tt.stale[*in.ReceiptHandle] {
					return fakes.APIError("ReceiptHandleIsInvalid", "stale")
				}
				return nil
			}
			r.leases.Set(tt.lease)
			r.sfn.Put(execution("reports", 1, "r-1001", tt.lease.Attempt, `{}`, "FAILED", "JobFailed", "boom"))
			if _, err := r.svc.Release(ctx, tt.give); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range r.sqs.VisibilityChanges() {
				if v.Timeout == 0 && v.ReceiptHandle != tt.lease.ReceiptHandle {
					got = append(got, v.ReceiptHandle)
				}
			}
			if len(got) != len(tt.want) || (len(got) > 0 && got[len(got)-1] != tt.want[len(tt.want)-1]) {
				t.Errorf("parked handles made visible = %v, want %v", got, tt.want)
			}
		})
	}
}

// The sweep takes back a lane whose lease has no running execution and was untouched for StaleAfter:
// a bind whose copy never claimed it, a retrying lease whose message is gone, an unconfirmed claim
// whose execution does not exist, a move that stopped after its message went. Under first-free nothing else would: binds only take lanes without
// a lease. It wakes a parked waiting group for each; younger leases are left to their messages.
func TestSweepTakesBackStaleLeases(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.h.StaleAfter = 20 * time.Minute
	room := withParked(t, r)
	for _, g := range []string{"reports-0", "reports-w1", "reports-w2", "reports-w3"} {
		if err := room.Park(ctx, waitroom.Waiter{Type: "reports", Group: g, MessageID: "m-" + g, ReceiptHandle: "h-" + g, JobID: g, SubmittedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	var stale, young []lease.Lease
	for i, st := range []lease.Status{lease.Bound, lease.Retrying, lease.Starting, lease.Moving} {
		l := held("reports", i+1, "r-stale-"+string(st), 1, st)
		l.ExecutionArn = execArn("reports", l.JobID, 1) // a claim names its execution; none exists
		l.UpdatedAt = t0.Add(-21 * time.Minute)
		stale = append(stale, r.leases.Set(l))
		y := held("payments", i+1, "p-young-"+string(st), 1, st)
		y.ExecutionArn = execArn("payments", y.JobID, 1)
		y.UpdatedAt = t0.Add(-19 * time.Minute)
		young = append(young, r.leases.Set(y))
	}
	got, err := r.h.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Swept != 4 {
		t.Errorf("Sweep() = %+v, want the 4 stale leases taken back", got)
	}
	for _, l := range stale {
		checkLease(t, r.leases, l.Key(), nil)
	}
	for _, l := range young {
		if _, ok := r.leases.Lease(l.Key()); !ok {
			t.Errorf("young %s lease of lane %s taken back, want it left to its message", l.Status, l.Key())
		}
	}
	if v := visibleHandles(r.sqs); len(v) != 4 {
		t.Errorf("made visible = %q, want a parked group woken per lane taken back", v)
	}
}

// lostRefundAnswer applies the first refund written to a rate bucket and loses its answer: the SDK
// sends it again, and that retry fails its condition against the first.
type lostRefundAnswer struct {
	*fakes.DynamoDB
	lost bool
}

func (d *lostRefundAnswer) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, refund := in.Item["refundId"]; refund && !d.lost {
		d.lost = true
		if _, err := d.DynamoDB.PutItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.DynamoDB.PutItem(ctx, in, opts...)
}

// A bound lease is replaced by its copy's claim, so one the sweep takes back was never claimed and
// no start used the tokens its bind took: the take-back gives back those the lease records (its
// key's, its type's), once. Two sweeps that read the same lease delete it once, and only the one
// that deleted it gives them back; a take-back applied but answered as failed (the SDK's retry finds
// the lane free, a conflict) gives nothing (a token lost: the rate is not reached for a moment,
// never exceeded); a refund answered as failed is found by its mark, not made twice. A copy that
// claims the lease before the take-back keeps the tokens (its start uses them), and one that comes
// after it finds the lease gone (and takes tokens of its own). A bound lease that records no
// tokens (its bind found no rate, or it was written before leases recorded them) gives back none.
func TestSweepTakingBackABindGivesItsTokensBackOnce(t *testing.T) {
	slow := config.Rate{PerSecond: 0.001, Burst: 3}
	rate := ratelimit.Rate{PerSecond: slow.PerSecond, Burst: slow.Burst}
	both := func(l *lease.Lease) { l.KeyToken, l.TypeToken = true, true }
	for _, tt := range []struct {
		name string
		took func(l *lease.Lease)
		// race runs before the first sweep's delete of the bound lease, with a second sweep.
		race                func(t *testing.T, r *rig, l lease.Lease, again *releaser.Handler)
		lostRefund          bool
		wantKey, wantType   int // tokens left in the buckets of burst 3: 1, and 2 with the bind's given back
		wantLease           *wantLease
		copyClaimsAfterward bool
	}{
		{name: "taken back once", took: both, wantKey: 2, wantType: 2},
		{name: "taken back by two sweeps that read it", took: both, wantKey: 2, wantType: 2,
			race: func(t *testing.T, r *rig, _ lease.Lease, again *releaser.Handler) {
				if _, err := again.Sweep(context.Background()); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "taken back, its answer lost", took: both, wantKey: 1, wantType: 1,
			race: func(t *testing.T, r *rig, l lease.Lease, _ *releaser.Handler) { r.leases.Remove(l.Key()) }},
		{name: "taken back, the refund's answer lost", took: both, lostRefund: true, wantKey: 2, wantType: 2},
		{name: "claimed by its copy before the take-back", took: both, wantKey: 1, wantType: 1,
			wantLease: &wantLease{JobID: "a-1", Status: lease.Starting, Attempt: 1, Arn: execArn("llm", "a-1", 1)},
			race: func(t *testing.T, r *rig, l lease.Lease, _ *releaser.Handler) {
				r.leases.Update(l.Key(), func(c *lease.Lease) {
					c.Status, c.Attempt, c.ExecutionArn, c.KeyToken, c.TypeToken = lease.Starting, 1, execArn("llm", "a-1", 1), false, false
				})
				r.sfn.Put(execution("llm", 2, "a-1", 1, `{}`, "RUNNING", "", ""))
			}},
		{name: "its copy coming after the take-back", took: both, wantKey: 2, wantType: 2, copyClaimsAfterward: true},
		{name: "a bind that took its key's token only", took: func(l *lease.Lease) { l.KeyToken = true }, wantKey: 2, wantType: 1},
		{name: "a bound lease that records no tokens", took: func(*lease.Lease) {}, wantKey: 1, wantType: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			res, err := config.NewResolver(config.Defaults{
				Limits: map[string]int{"llm": 4}, DefaultMaxAttempts: 3, StateMachineArn: smArn, Rates: map[string]config.Rate{"llm": slow},
			}, overrides{{Type: "llm", KeyRate: slow}}, 0)
			if err != nil {
				t.Fatal(err)
			}
			r.svc.Config = res
			db := &lostRefundAnswer{DynamoDB: fakes.NewDynamoDB("table"), lost: !tt.lostRefund}
			buckets := ratelimit.New(db, "table")
			buckets.Now = r.clock.Now
			r.svc.Rates = buckets
			r.h.StaleAfter = 20 * time.Minute
			// A start's tokens and the bind's: two of the key's, two of the type's (a refund made
			// twice would show, below the burst).
			for range 2 {
				if w, err := buckets.TakeKey(ctx, "llm", "acme", rate); err != nil || w != 0 {
					t.Fatalf("take the key's token = %v, %v", w, err)
				}
				if w, err := buckets.Take(ctx, "llm", rate); err != nil || w != 0 {
					t.Fatalf("take the type's token = %v, %v", w, err)
				}
			}
			b := held("llm", 2, "a-1", 0, lease.Bound)
			b.JobKey, b.ReceiptHandle, b.UpdatedAt = "acme", "", t0.Add(-21*time.Minute)
			tt.took(&b)
			b = r.leases.Set(b)
			if tt.race != nil {
				again := *r.h
				raced := false
				r.leases.BeforeDelete = func(prev lease.Lease) error {
					if raced {
						return nil
					}
					raced = true
					tt.race(t, r, prev, &again)
					return nil
				}
			}
			if _, err := r.h.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := r.h.Sweep(ctx); err != nil { // a later sweep finds nothing more to give back
				t.Fatal(err)
			}
			checkLease(t, r.leases, b.Key(), tt.wantLease)
			if tt.copyClaimsAfterward {
				claim := b
				claim.Status, claim.Attempt = lease.Starting, 1
				if _, err := r.leases.Put(ctx, claim, &b); !errors.Is(err, lease.ErrConflict) {
					t.Errorf("the copy's claim of the bound lease after the take-back = %v, want a conflict (it finds the lane free and takes its own tokens)", err)
				}
			}
			left := func(take func() (time.Duration, error)) int {
				n := 0
				for ; n < 5; n++ {
					if w, err := take(); err != nil || w != 0 {
						break
					}
				}
				return n
			}
			gotKey := left(func() (time.Duration, error) { return buckets.TakeKey(ctx, "llm", "acme", rate) })
			gotType := left(func() (time.Duration, error) { return buckets.Take(ctx, "llm", rate) })
			if gotKey != tt.wantKey || gotType != tt.wantType {
				t.Errorf("tokens left: key %d, type %d; want key %d, type %d", gotKey, gotType, tt.wantKey, tt.wantType)
			}
		})
	}
}

type cleanerFunc func(ctx context.Context, typ string) (int, error)

func (f cleanerFunc) Clean(ctx context.Context, typ string) (int, error) { return f(ctx, typ) }

// Every sweep deletes the retired lane counts of every type it knows: from leases and from config.
func TestSweepCleansRetiredCounts(t *testing.T) {
	r := newRig(t)
	r.leases.Set(held("legacyonly", 1, "x", 1, lease.Retrying))
	cleaned := map[string]int{}
	r.h.Legacy = cleanerFunc(func(_ context.Context, typ string) (int, error) { cleaned[typ]++; return 0, nil })
	if _, err := r.h.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"legacyonly", "reports", "payments"} {
		if cleaned[typ] != 1 {
			t.Errorf("cleaned %v, want each of legacyonly, reports, payments once", cleaned)
			break
		}
	}
}

// With keys, a freed lane goes to a parked key under its cap, the key with the fewest running jobs
// first, then the one parked earliest; a key at its cap is never woken; one group is woken per
// free lane (a lane freed while no eligible key was woken stays free only while none waits).
func TestReleaseWakesKeysFairly(t *testing.T) {
	parked := func(key string, at time.Duration, atCap bool) waitroom.Waiter {
		return waitroom.Waiter{Type: "llm", Group: "llm#" + key, MessageID: "m-" + key, ReceiptHandle: "h-" + key, JobID: key + "-head",
			Key: key, AtKeyCap: atCap, SubmittedAt: t0.Add(-time.Hour), ParkedAt: t0.Add(at)}
	}
	keyed := func(ln int, key string) lease.Lease {
		l := held("llm", ln, fmt.Sprintf("%s-%d", key, ln), 1, lease.Starting)
		l.JobKey = key
		return l
	}
	tests := []struct {
		name   string
		leases []lease.Lease // the first is released (succeeded)
		parked []waitroom.Waiter
		want   []string
	}{
		{
			name:   "the key with fewest running first; a key at its cap is not woken",
			leases: []lease.Lease{keyed(4, "qb"), keyed(1, "noisy"), keyed(2, "noisy"), keyed(3, "qa")},
			parked: []waitroom.Waiter{parked("noisy", 0, true), parked("qa", time.Second, false), parked("qc", 2*time.Second, false)},
			want:   []string{"h-qc"},
		},
		{
			name:   "a key's own release makes it eligible, but a key with none running goes first",
			leases: []lease.Lease{keyed(1, "noisy"), keyed(2, "noisy"), keyed(3, "qa"), keyed(4, "qb")},
			parked: []waitroom.Waiter{parked("noisy", 0, true), parked("qa", time.Second, false), parked("qc", 2*time.Second, false)},
			want:   []string{"h-qc"},
		},
		{
			name:   "equal running: the key that has waited longest",
			leases: []lease.Lease{keyed(1, "noisy"), keyed(2, "noisy"), keyed(3, "qa"), keyed(4, "qb")},
			parked: []waitroom.Waiter{parked("qa", time.Second, false), parked("noisy", 0, true)},
			want:   []string{"h-noisy"},
		},
		{
			name:   "one wake-up per free lane",
			leases: []lease.Lease{keyed(2, "noisy"), keyed(1, "noisy")},
			parked: []waitroom.Waiter{parked("noisy", 0, true), parked("qc", 2*time.Second, false), parked("qa", time.Second, false)},
			want:   []string{"h-qa", "h-qc", "h-noisy"},
		},
		{
			name:   "the capped default key counts as a key",
			leases: []lease.Lease{keyed(1, "qa"), keyed(2, ""), keyed(3, ""), keyed(4, "qb")},
			parked: []waitroom.Waiter{
				{Type: "llm", Group: "llm-0", MessageID: "m-d", ReceiptHandle: "h-default", JobID: "d-head", AtKeyCap: true, ParkedAt: t0},
				parked("qb", time.Second, false),
			},
			want: []string{"h-qb"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			res, err := config.NewResolver(config.Defaults{
				Limits: map[string]int{"llm": 4}, KeyLimits: map[string]int{"llm": 2}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
			}, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			r.svc.Config = res
			withParked(t, r, tt.parked...)
			for _, l := range tt.leases {
				r.leases.Set(l)
			}
			rel := tt.leases[0]
			if _, err := r.svc.Release(ctx, keyedReq(rel.JobKey, req("llm", rel.Lane, rel.JobID, 1, releaser.Succeeded, "", ""))); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range r.sqs.VisibilityChanges() {
				if v.Timeout == 0 {
					got = append(got, v.ReceiptHandle)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("parked handles made visible = %v, want %v", got, tt.want)
			}
		})
	}
}

// overrides is a config store with fixed live overrides.
type overrides []config.Override

func (o overrides) ListOverrides(context.Context) ([]config.Override, error) { return o, nil }

// A release of a paused type frees its lane and wakes no parked group: they wait for the resume.
func TestReleaseOfAPausedTypeWakesNobody(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	res, err := config.NewResolver(config.Defaults{Limits: map[string]int{"reports": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn},
		overrides{{Type: "reports", Pause: &config.Pause{Reason: "INC-7", Since: t0}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.svc.Config = res
	room := withParked(t, r)
	if err := room.Park(ctx, waitroom.Waiter{Type: "reports", Group: "reports-0", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", SubmittedAt: t0, Paused: true}); err != nil {
		t.Fatal(err)
	}
	l := held("reports", 1, "r-1001", 1, lease.Starting)
	r.leases.Set(l)
	if got, err := r.svc.Release(ctx, req("reports", 1, "r-1001", 1, releaser.Succeeded, "", "")); err != nil || got != releaser.Deleted {
		t.Fatalf("Release = %q, %v; want the job's message deleted", got, err)
	}
	for _, v := range r.sqs.VisibilityChanges() {
		if v.ReceiptHandle == "h-1" {
			t.Errorf("parked head woken while its type is paused: %+v", v)
		}
	}
	if ws, _ := room.List(ctx, "reports"); len(ws) != 1 {
		t.Errorf("parked = %+v, want the record kept for the resume", ws)
	}
}

// Once its type is resumed, the sweep wakes every group that parked for the pause (the resume's own
// wake-up may have been cut short), highest priority first, and leaves groups parked for a lane
// while every lane is taken.
func TestSweepWakesGroupsParkedByAPause(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.svc.Now = r.clock.Now
	for ln := 1; ln <= 3; ln++ {
		r.leases.Set(held("reports", ln, fmt.Sprintf("r-%d", ln), 1, lease.Starting))
	}
	room := withParked(t, r, []waitroom.Waiter{
		{Type: "reports", Group: "reports-0", MessageID: "m-1", ReceiptHandle: "h-normal", JobID: "w-1", SubmittedAt: t0, Paused: true},
		{Type: "reports", Group: "reports-0!9", MessageID: "m-2", ReceiptHandle: "h-high", JobID: "w-2", SubmittedAt: t0, Paused: true, Priority: 9},
		{Type: "reports", Group: "reports-w1", MessageID: "m-3", ReceiptHandle: "h-lane", JobID: "w-3", SubmittedAt: t0},
	}...)
	if _, err := r.h.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range r.sqs.VisibilityChanges() {
		if v.Timeout == 0 {
			got = append(got, v.ReceiptHandle)
		}
	}
	if fmt.Sprint(got) != "[h-high h-normal]" {
		t.Errorf("woken = %v, want [h-high h-normal] (the groups parked by the pause, higher priority first)", got)
	}
	if ws, _ := room.List(ctx, "reports"); len(ws) != 1 || ws[0].JobID != "w-3" {
		t.Errorf("parked after the sweep = %+v, want only w-3's record (parked for a lane)", ws)
	}
}

// A release after the resume, before the resume's own wake-up, skips a job parked in its lane by the
// pause (it holds its lane; the resume wakes it) and wakes a waiting group for the lane it freed.
func TestReleaseSkipsAJobParkedInItsLane(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.svc.Now = r.clock.Now
	withParked(t, r, []waitroom.Waiter{
		{Type: "reports", Group: "reports-2", MessageID: "m-lane", ReceiptHandle: "h-lane", JobID: "w-1", SubmittedAt: t0.Add(-time.Minute), Paused: true},
		{Type: "reports", Group: "reports-0", MessageID: "m-wait", ReceiptHandle: "h-wait", JobID: "w-2", SubmittedAt: t0},
	}...)
	r.leases.Set(held("reports", 1, "r-1001", 1, lease.Starting))
	if _, err := r.svc.Release(ctx, req("reports", 1, "r-1001", 1, releaser.Succeeded, "", "")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range r.sqs.VisibilityChanges() {
		if v.Timeout == 0 {
			got = append(got, v.ReceiptHandle)
		}
	}
	if fmt.Sprint(got) != "[h-wait]" {
		t.Errorf("woken = %v, want [h-wait]: the lane's own parked job is the resume's to wake", got)
	}
}

// After a type's limit is lowered, jobs still running in lanes above it finish there; the lanes
// within the limit are what binds take (lane.Spread(job, limit)). A keyed wake-up counts free lanes
// as limit - every lease, those above the limit included, so a release that leaves lanes within
// the limit free wakes nobody, and a parked key under its cap waits out waitroom.ParkFor with
// lanes idle (the keyless wake-up wakes one group whatever the count).
func TestKeyedWakeAfterALoweredLimit(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"llm": 4}, KeyLimits: map[string]int{"llm": 2}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.svc.Config = res
	room := withParked(t, r)
	if err := room.Park(ctx, waitroom.Waiter{Type: "llm", Group: "llm#qa", MessageID: "m-qa", ReceiptHandle: "h-qa", JobID: "qa-head",
		Key: "qa", SubmittedAt: t0.Add(-time.Hour), ParkedAt: t0.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	// Lane 1 within the limit of 4 is released; lanes 5-8 (the limit was 8) still run other keys'
	// jobs. Lanes 1-4 are then all free.
	for ln, key := range map[int]string{1: "k1", 5: "k5", 6: "k6", 7: "k7", 8: "k8"} {
		l := held("llm", ln, fmt.Sprintf("%s-%d", key, ln), 1, lease.Starting)
		l.JobKey = key
		r.leases.Set(l)
	}
	if _, err := r.svc.Release(ctx, keyedReq("k1", req("llm", 1, "k1-1", 1, releaser.Succeeded, "", ""))); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range r.sqs.VisibilityChanges() {
		if v.Timeout == 0 {
			got = append(got, v.ReceiptHandle)
		}
	}
	if !slices.Equal(got, []string{"h-qa"}) {
		t.Errorf("parked handles made visible = %v, want [h-qa]: lanes 1-4 are free and qa runs none", got)
	}
}

// liveOverrides is a config store whose overrides change, as the table's do when an operator pauses
// and resumes a type.
type liveOverrides struct {
	mu sync.Mutex
	os []config.Override
}

func (l *liveOverrides) ListOverrides(context.Context) ([]config.Override, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]config.Override(nil), l.os...), nil
}

func (l *liveOverrides) set(os ...config.Override) {
	l.mu.Lock()
	l.os = os
	l.mu.Unlock()
}

// A type paused while its lanes are busy: its waiting group's head is parked for a lane (not for the
// pause; it parked before the pause), and every release during the pause frees a lane and wakes
// nobody (TestReleaseOfAPausedTypeWakesNobody). After the resume every lane is free, but the resume
// (WakeResumed, which `sfnlimit resume` calls) and the sweep after it wake only groups parked *for
// the pause*: the head parked for a lane stays invisible until waitroom.ParkFor (60 s) runs out,
// with all the type's lanes idle. Found by e2e scenario 17 (tests/flow_test.go): the first start
// after the resume came 35 s after it, at the head's park plus 60 s.
func TestResumeWakesAGroupParkedForALaneBeforeThePause(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.svc.Now = r.clock.Now
	live := &liveOverrides{}
	res, err := config.NewResolver(config.Defaults{Limits: map[string]int{"reports": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn}, live, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.svc.Config = res
	room := withParked(t, r)

	// All three lanes run; the waiting group's head parked for a lane a moment before the pause.
	for ln, id := range map[int]string{1: "r-1", 2: "r-2", 3: "r-3"} {
		r.leases.Set(held("reports", ln, id, 1, lease.Starting))
	}
	if err := room.Park(ctx, waitroom.Waiter{Type: "reports", Group: "reports-0", MessageID: "m-4", ReceiptHandle: "h-head", JobID: "r-4",
		SubmittedAt: t0.Add(-10 * time.Second), ParkedAt: t0.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	live.set(config.Override{Type: "reports", Pause: &config.Pause{Reason: "INC-14", Since: t0}})
	for ln, id := range map[int]string{1: "r-1", 2: "r-2", 3: "r-3"} {
		if got, err := r.svc.Release(ctx, req("reports", ln, id, 1, releaser.Succeeded, "", "")); err != nil || got != releaser.Deleted {
			t.Fatalf("Release(%s) = %q, %v; want deleted", id, got, err)
		}
	}

	// Resumed 25 s later, well within the head's park: the resume and a sweep.
	r.clock.Advance(25 * time.Second)
	live.set()
	n, err := r.svc.WakeResumed(ctx, "reports")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.h.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	woken := false
	for _, v := range r.sqs.VisibilityChanges() {
		if v.ReceiptHandle == "h-head" && v.Timeout == 0 {
			woken = true
		}
	}
	if !woken {
		ws, _ := room.List(ctx, "reports")
		t.Errorf("after the resume (WakeResumed woke %d) and a sweep, with all 3 lanes free, the head parked for a lane before the pause was not woken "+
			"(parked: %+v): it waits until waitroom.ParkFor (%v) runs out", n, ws, waitroom.ParkFor)
	}
}

// A type that takes its limit from DEFAULT_LIMIT was paused (its live override
// held the pause alone) and resumed: `sfnlimit resume` deletes the item, and if its wake-up was cut
// short, "the releaser's sweep wakes those groups within a minute" (resume's help, docs/design.md).
// The sweep's wakeResumed walks Config.All, which lists types with a TYPE_LIMITS entry or an override
// only: the resumed type is in neither, so its heads parked by the pause wait out PausedParkFor
// (15 minutes), with every lane idle. `config reset --force` of a paused override-only type says the
// same and is worse: the type is unknown, its lane park records are never removed.
func TestSweepWakesResumedTypeWithTheFallbackLimit(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.svc.Now = r.clock.Now
	res, err := config.NewResolver(config.Defaults{Limits: map[string]int{"reports": 3}, FallbackLimit: 4, DefaultMaxAttempts: 3, StateMachineArn: smArn}, &liveOverrides{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.svc.Config = res
	room := withParked(t, r)
	// The starter registers a type whose jobs it parks for a pause (it may never have held a lease).
	if err := r.leases.RegisterType(ctx, "partner"); err != nil {
		t.Fatal(err)
	}
	if err := room.Park(ctx, waitroom.Waiter{Type: "partner", Group: "partner-0", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", SubmittedAt: t0, ParkedAt: t0, Paused: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.h.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	woken := false
	for _, v := range r.sqs.VisibilityChanges() {
		woken = woken || (v.ReceiptHandle == "h-1" && v.Timeout == 0)
	}
	if !woken {
		t.Errorf("head parked by the pause of resumed type partner (DEFAULT_LIMIT) not woken by the sweep")
	}
	if ws, _ := room.List(ctx, "partner"); len(ws) != 0 {
		t.Errorf("parked after the sweep = %+v, want the record claimed", ws)
	}
}

// A lane free while a group is parked for it is a wake-up that never came: a limit raised (`config
// set` wakes no one), or a release whose wake-up failed. Every sweep wakes such groups, one per free
// lane as a release does, so they do not wait out their park (up to waitroom.MaxParkFor); a type
// whose lanes are all taken keeps its parked groups.
func TestSweepWakesGroupsParkedWhileLanesAreFree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leases int
		want   string
	}{
		{"a lane free", 2, "[h-old]"},
		{"two lanes free", 1, "[h-old h-new]"},
		{"every lane taken", 3, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			r.svc.Now = r.clock.Now
			withParked(t, r, []waitroom.Waiter{
				{Type: "reports", Group: "reports-0", MessageID: "m-new", ReceiptHandle: "h-new", JobID: "w-new", SubmittedAt: t0, ParkedAt: t0},
				{Type: "reports", Group: "reports-w1", MessageID: "m-old", ReceiptHandle: "h-old", JobID: "w-old", SubmittedAt: t0.Add(-time.Minute), ParkedAt: t0},
			}...)
			for ln := 1; ln <= tc.leases; ln++ {
				r.leases.Set(held("reports", ln, fmt.Sprintf("r-%d", ln), 1, lease.Starting))
			}
			if _, err := r.h.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, v := range r.sqs.VisibilityChanges() {
				if v.Timeout == 0 {
					got = append(got, v.ReceiptHandle)
				}
			}
			if fmt.Sprint(got) != tc.want {
				t.Errorf("woken = %v, want %s (the oldest head, one per free lane)", got, tc.want)
			}
		})
	}
}

// A release that takes a parked group's record and then fails to make its head visible leaves the
// record as it found it: the head is still parked (for up to waitroom.MaxParkFor), and only its
// record lets the next sweep wake it for the lane the release freed.
func TestWakeThatFailsLeavesTheRecordForTheSweep(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.svc.Now = r.clock.Now
	room := withParked(t, r)
	parked := waitroom.Waiter{Type: "reports", Group: "reports-0", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", Receives: 3,
		SubmittedAt: t0, ParkedAt: t0, Until: t0.Add(waitroom.MaxParkFor)}
	if err := room.Park(ctx, parked); err != nil {
		t.Fatal(err)
	}
	r.sqs.OnChangeVisibility = onceErr[*sqs.ChangeMessageVisibilityInput](fakes.APIError("RequestThrottled", "Rate exceeded"))
	l := held("reports", 1, "r-1001", 1, lease.Starting)
	r.leases.Set(l)
	r.sfn.Put(execution("reports", 1, "r-1001", 1, `{}`, "SUCCEEDED", "", ""))
	if _, err := r.svc.Release(ctx, req("reports", 1, "r-1001", 1, releaser.Succeeded, "", "")); err != nil {
		t.Fatal(err)
	}
	if ws, err := room.List(ctx, "reports"); err != nil || len(ws) != 1 || ws[0].ReceiptHandle != "h-1" {
		t.Fatalf("parked after the failed wake-up = %+v, %v; want w-1's record", ws, err)
	}
	if _, err := r.h.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	woken := false
	for _, v := range r.sqs.VisibilityChanges() {
		woken = woken || (v.ReceiptHandle == "h-1" && v.Timeout == 0 && v.Err == nil)
	}
	if !woken {
		t.Errorf("visibility changes = %+v, want h-1 woken by the sweep", r.sqs.VisibilityChanges())
	}
}

// withParked gives r's service a wait room with ws parked in it.
func withParked(t *testing.T, r *rig, ws ...waitroom.Waiter) *waitroom.Store {
	t.Helper()
	room := waitroom.NewStore(fakes.NewDynamoDB("table"), "table")
	r.svc.WaitRoom = room
	for _, w := range ws {
		if err := room.Park(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	return room
}
