package simworld

import (
	"strings"
	"testing"
	"testing/synctest"
)

// These tests hold the simulation to what it found: each names a seed and a fault profile at
// which a defect of the limiter, not fixed yet, breaks an invariant. They pass while the defect is
// there; once it is fixed, the seed should keep every invariant, and the test is to be turned
// around (and the profile's classes put back in GateProfile).

// findAt runs seed under profile with its trace, after opts change DefaultConfig.
func findAt(t *testing.T, seed uint64, profile string, opts ...func(*Config)) (*World, []Violation) {
	t.Helper()
	f, err := Profile(profile)
	if err != nil {
		t.Fatal(err)
	}
	var w *World
	var vs []Violation
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Faults = f
		for _, o := range opts {
			o(&cfg)
		}
		w = New(seed, cfg)
		vs = w.Run()
	})
	return w, vs
}

func traced(w *World, parts ...string) bool {
	for _, l := range w.traceLog {
		ok := true
		for _, p := range parts {
			if !strings.Contains(l.text, p) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// Defect 1 of issue 22, fixed: the starter's bound-lease PutItem (attribute_not_exists) was
// applied, its answer lost, and the SDK's retry failed its own condition; bindFree took the lane
// for taken and bound another, and the first stayed bound to a job whose copy never came until the
// sweep took it back (1.5 times the visibility timeout). At seed 9, before the fix, a lane of alpha
// leaked at 2m53s and the type ran 2 of its 4 lanes for more than the 5-minute work-conservation
// bound while jobs waited (22 of 60 seeds of the profile broke it). A lease write now carries its
// own token and knows its own write in the item that failed the retry's condition (lease.Store.Put;
// TestStoreKnowsItsOwnAmbiguousWrite).
//
//	SEED=9 TRACE=LEASE#alpha go test ./internal/tools/simworld -run TestOneSeed -v -args -profile ambiguous
func TestDefect1SeedHolds(t *testing.T) {
	w, vs := findAt(t, 9, "ambiguous")
	if len(vs) > 0 {
		t.Errorf("seed 9 (ambiguous writes): %s", w.Report(vs, 40))
	}
	if !traced(w, "ddb.ambiguous ddb.PutItem first=ok retry=ConditionalCheckFailed") {
		t.Errorf("seed 9: the trace has no lease write applied and answered as failed: the seed no longer tests the fix")
	}
}

// A lost dead letter (found by the simulation, not in issue 22's list): the starter marks a job's
// lease dead-lettering and is killed before it sends the dead letter; the message's next delivery
// finds "another release is dead-lettering this job" and acknowledges it (Lambda deletes it); a
// second copy of that delivery (Lambda handed the batch over twice, same receipt handle) refreshes
// the lease, finds its message gone and drops the lease as a stale delivery's (dropStale). The
// dead-lettering lease was the only record of the job: it is never dead-lettered. (First found at
// seed 63 of all-ambiguous-slow; after the sweep learned to leave a just-stopped execution to its
// own release, that seed takes another path, and seed 1438 of duplicate+kill found it, until
// batches in the workload and the sweep's Query of pending batches changed every run. Re-found at
// seed 187 of duplicate+kill, 2 of its first 1,200 seeds: a status event's release of j069's last
// attempt is killed at 6m0.818s just after it marked the lease dead-lettering; at 9m42s a delivery
// of j069's message refreshes the lease, finds "another release is dead-lettering", and is
// acknowledged; its duplicate finds the message gone and drops the lease as stale.)
//
//	SEED=187 TRACE=j069 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile duplicate+kill
func TestFindsLostDeadLetter(t *testing.T) {
	w, vs := findAt(t, 187, "duplicate+kill")
	found := false
	for _, v := range vs {
		if v.Kind == KindNotEnded && v.Subject == "gamma/j069" {
			found = true
		}
	}
	if !found {
		t.Fatalf("seed 187 (duplicate deliveries and kills): gamma/j069 ended, want the lost dead letter found\n%s", w.Report(vs, 40))
	}
	if !traced(w, "stale delivery of a message already released", "jobId=j069") {
		t.Errorf("seed 187: the trace does not show j069's lease dropped as a stale delivery's")
	}
}

// The lease ABA fixed by 8cd6001 (a new lease takes a random first version) and f6e2fdb (lease
// writes condition on the job too). With both reverted (every lease starts at version 1, writes
// condition on the version alone), seed 250 of this profile breaks the limit: at 1h3m4s a sweep
// slowed by a stalled call deletes, with the version it read on job j027's lease, the lease job
// j059 has just taken (same lane, same version), and j084 then binds the lane beside j059's running
// execution (2 executions of gamma, limit 1). With either fix in place the seed keeps every
// invariant; this test holds that. (Reverting 8cd6001 alone, f6e2fdb's job condition still stops
// it at this seed.)
//
//	SEED=250 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all-ambiguous-duplicate+slow+events
func TestLeaseABASeedHolds(t *testing.T) {
	w, vs := findAt(t, 250, "all-ambiguous-duplicate+slow+events")
	if len(vs) > 0 {
		t.Errorf("seed 250 (the lease ABA's): %s", w.Report(vs, 40))
	}
}

// tracedAfter says whether a trace line with every part of then comes after one with every part
// of first.
func tracedAfter(w *World, first, then []string) bool {
	has := func(text string, parts []string) bool {
		for _, p := range parts {
			if !strings.Contains(text, p) {
				return false
			}
		}
		return true
	}
	seen := false
	for _, l := range w.traceLog {
		if seen && has(l.text, then) {
			return true
		}
		seen = seen || has(l.text, first)
	}
	return false
}

// eventsOf are the completion events the bus accepted for batch id.
func eventsOf(w *World, id string) []busEvent {
	var out []busEvent
	for _, e := range w.batches.bus.accepted {
		if e.detail.Batch == id {
			out = append(out, e)
		}
	}
	return out
}

// Defect 4 of issue 22 (a), fixed before the simulation modelled batches: the completion event
// was sent, then marking the batch announced failed once, and the event went out a second time
// once the 30 s claim expired (batchend's markAnnounced now tries the write again for half the
// claim's time). With that retry reverted (markAnnounced calling Ledger.Announced once), seed 1 of
// throttle sends batch bat03's event twice: at 1h13m7.037s a status event's release of j075 closes
// bat03 and sends it, the read of Announced is throttled at 1h13m7.041s, and the sweep sends it
// again at 1h15m0.131s (24 of the profile's first 100 seeds break the invariant then). With the
// retry, the mark succeeds at 1h13m7.138s and one event goes out; this test holds that.
//
//	SEED=1 TRACE=bat03 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile throttle
func TestAnnouncedRetrySeedHolds(t *testing.T) {
	w, vs := findAt(t, 1, "throttle")
	if len(vs) > 0 {
		t.Errorf("seed 1 (throttle): %s", w.Report(vs, 40))
	}
	sent := []string{"events.PutEvents accepted", "of batch bat03"}
	if !tracedAfter(w, sent, []string{"ddb.throttled ddb.GetItem BATCH#bat03|META"}) {
		t.Errorf("seed 1: no read of bat03 throttled after its event was sent: the seed no longer tests the retry")
	}
	if n := len(eventsOf(w, "bat03")); n != 1 {
		t.Errorf("seed 1: %d completion events of bat03, want 1", n)
	}
}

// Defect 4 of issue 22 (b), fixed by this seed's find: a batch closed by a router refusal whose
// PutEvents kept failing. At seed 109 of events, an EventBridge outage runs from 12m11s to 26m51s;
// at 12m53.6s the router refuses j102 (no type), the last job of bat03, and its record closes the
// batch. The router reported the message failed, to send the event on its next delivery, five
// times, and at 27m53.6s SQS moved it to the dead-letter queue without a reason: the job's refusal
// unrecorded on the queue, and bat03 closed and never announced. Now the refusal takes effect (its
// dead letter, and the message acknowledged), the close lists the batch as pending, and the sweep
// sends the event once EventBridge is back (TestRefusalClosingABatchWhileEventBridgeIsDown,
// TestPendingBatchAnnouncedBySweep).
//
//	SEED=109 TRACE=bat03 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile events
func TestRefusedCloserSeedHolds(t *testing.T) {
	w, vs := findAt(t, 109, "events")
	if len(vs) > 0 {
		t.Errorf("seed 109 (events): %s", w.Report(vs, 40))
	}
	if !traced(w, "router", "batch closed, its completion event not sent", "jobId=j102", "EventBridge outage") {
		t.Errorf("seed 109: the router's refusal of j102 did not close bat03 during the outage: the seed no longer tests the fix")
	}
	evs := eventsOf(w, "bat03")
	if len(evs) != 1 || !strings.HasPrefix(evs[0].sender.name, "releaser-sweep") {
		t.Errorf("seed 109: %d completion events of bat03, want 1, sent by the sweep", len(evs))
	}
}

// A batch's closing job holds its lane for as long as EventBridge refuses the completion event
// (found by the simulation, open): a release records the job's end, and the end takes effect
// (its message deleted, its lease freed) only once the event is sent, so that a failure is
// retried at once. At seed 33 of events an outage runs from 8m46s to 22m23s; j097, the last job
// of bat04, ends at 13m49s in lane gamma-1, every release of it fails ("its completion event is
// pending") until the outage ends, and j032 waits in gamma-1 for more than the 5-minute bound.
// Since the close lists the batch as pending and the sweep sends its event, the release could
// let the end take effect after a while; not done yet (it would delay the event of a batch
// whose PutEvents failed once from a second to the next sweep).
//
//	SEED=33 TRACE=m000129 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile events
func TestFindsLaneHeldByAnOutage(t *testing.T) {
	w, vs := findAt(t, 33, "events")
	found := false
	for _, v := range vs {
		if v.Kind == KindIdle && v.Subject == "gamma/j032" {
			found = true
		}
	}
	if !found {
		t.Fatalf("seed 33 (events): gamma-1 not idle while j032 waits, want the lane held by the outage found\n%s", w.Report(vs, 40))
	}
	if !traced(w, "start failed", "jobId=j097", "its completion event is pending", "EventBridge outage") {
		t.Errorf("seed 33: the trace does not show j097's release failing for its batch's event")
	}
}
