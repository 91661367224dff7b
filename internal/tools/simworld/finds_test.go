package simworld

import (
	"slices"
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

// holdsOnPath runs seeds 1, 2, ... of profile until one runs the path a fix protects (path says so
// from its trace), at most max: every seed run must keep every invariant, and one must run the path.
// A pinned seed stops testing its fix as soon as any change to the code moves the run (every call
// draws latencies from the seed); the first seed that runs the path does not.
func holdsOnPath(t *testing.T, profile string, max uint64, path func(w *World) bool, opts ...func(*Config)) uint64 {
	t.Helper()
	return holdsOnPathFrom(t, profile, 1, max, path, opts...)
}

// holdsOnPathFrom is holdsOnPath from seed from: for a path so rare that the search from seed 1
// would outlast make test's budget (from is a little below the first seed found to run it).
func holdsOnPathFrom(t *testing.T, profile string, from, max uint64, path func(w *World) bool, opts ...func(*Config)) uint64 {
	t.Helper()
	for seed := from; seed <= max; seed++ {
		w, vs := findAt(t, seed, profile, opts...)
		if len(vs) > 0 {
			t.Errorf("seed %d of %s: %s", seed, profile, w.Report(vs, 40))
			return seed
		}
		if path(w) {
			t.Logf("seed %d of %s runs the path and keeps every invariant", seed, profile)
			return seed
		}
	}
	t.Errorf("none of seeds %d-%d of %s runs the path: the test no longer exercises its fix", from, max, profile)
	return 0
}

// noBatches runs the world as it was before batches were modelled, for a seed found then.
func noBatches(c *Config) { c.BatchShare = 0 }

// holdAt runs each of seeds of profile and reports every invariant it breaks.
func holdAt(t *testing.T, profile string, seeds ...uint64) {
	t.Helper()
	for _, seed := range seeds {
		if w, vs := findAt(t, seed, profile); len(vs) > 0 {
			t.Errorf("seed %d of %s: %s", seed, profile, w.Report(vs, 40))
		}
	}
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
// the lease, finds its message gone and dropped the lease as a stale delivery's (dropStale). The
// dead-lettering lease was the only record of the job: it was never dead-lettered. (First found at
// seed 63 of all-ambiguous-slow, then at seed 1438 of duplicate+kill, until batches in the
// workload changed every run; re-found at seed 187 of duplicate+kill, 2 of its first 1,200 seeds:
// a status event's release of j069's last attempt is killed at 6m0.818s just after it marked the
// lease dead-lettering; at 9m42s a delivery of j069's message refreshes the lease, finds "another
// release is dead-lettering", and is acknowledged; its duplicate finds the message gone.) Fixed: a
// stale delivery leaves a dead-lettering lease to its release or the sweep's takeover
// (TestStaleDeliveryLeavesADeadLetteringLease), and this test runs the profile's first seeds.
//
//	make simulate SEEDS=1200 PROFILE=duplicate+kill
func TestLostDeadLetterSeedHolds(t *testing.T) {
	// The interleaving is rare (2 of 1,200 seeds when it was found), and every change to the code
	// moves the runs: no seed of the first 400 of the profile runs it today. The unit test holds the
	// fix; these seeds, whose deliveries are duplicated and whose invocations are killed, must keep
	// every invariant (seed 112 sent a job's dead letter twice with two bodies before the starter's
	// made its body as the release does).
	for seed := uint64(1); seed <= 120; seed++ {
		if w, vs := findAt(t, seed, "duplicate+kill"); len(vs) > 0 {
			t.Errorf("seed %d of duplicate+kill: %s", seed, w.Report(vs, 40))
		}
	}
}

// The lease ABA fixed by 8cd6001 (a new lease takes a random first version) and f6e2fdb (lease
// writes condition on the job too). With both reverted (every lease starts at version 1, writes
// condition on the version alone), seed 250 of this profile breaks the limit: at 1h3m4s a sweep
// slowed by a stalled call deletes, with the version it read on job j027's lease, the lease job
// j059 has just taken (same lane, same version), and j084 then binds the lane beside j059's running
// execution (2 executions of gamma, limit 1). With either fix in place the seed keeps every
// invariant; this test holds that. (Reverting 8cd6001 alone, f6e2fdb's job condition still stops
// it at this seed.) The operator's actions and clock skew, added to "all" since, are turned off so
// that the seed runs as it did when it was found.
//
//	SEED=250 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all-ambiguous-duplicate-actions-skew+slow+events
func TestLeaseABASeedHolds(t *testing.T) {
	w, vs := findAt(t, 250, "all-ambiguous-duplicate-actions-skew+slow+events")
	if len(vs) > 0 {
		t.Errorf("seed 250 (the lease ABA's): %s", w.Report(vs, 40))
	}
}

// Defect 2 of issue 22: a key's cap is exceeded after a lease is taken back. A job whose
// attempt failed holds its lane with a retrying lease; its type is paused, and its next delivery
// parks in its lane for the pause (starter.PausedParkFor, 15 minutes) writing nothing to the
// lease. The sweep takes the lease back once nothing has touched it for StaleAfter (1.5 visibility
// timeouts), the binder then fills the job's key to its cap, and on resume the parked job retries
// in place through ownAttempt without counting its key. At seed 37 of the operator's actions, beta
// (key cap 1) is paused at 18m5s, j026's parked retry loses its lease to the sweep at 28m0s, beta
// is resumed at 28m6s, j008 binds key k1, and j026's attempt 2 starts beside it: 2 executions of
// key k1, cap 1. Fixed: a job that waits in its lane writes when its message is due back
// (lease.HeldUntil), so the sweep leaves its lease (TestPausedLaneJobKeepsItsLeaseWhileParked); and a
// leaseless job's failed attempt moves with its count rather than retry in a lane it is not bound to
// (TestJobInALaneWaitsForItsKeyCap). The seed now keeps every invariant.
//
//	SEED=37 TRACE=j026 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile actions
func TestDefect2SeedHolds(t *testing.T) {
	if _, vs := findAt(t, 37, "actions", noBatches); len(vs) > 0 {
		t.Errorf("seed 37 of actions (defect 2's, without batches): %d violations", len(vs))
	}
	holdsOnPath(t, "actions", 200, func(w *World) bool {
		return traced(w, "type paused; parked until it is resumed", "lane=") && !traced(w, "sweep took back a lane", "status=retrying")
	})
}

// openFindings are the gate seeds (GateProfile) at which a defect not fixed yet breaks an
// invariant, with the only kind of violation it may break there. TestSeeds expects them to fail
// so, and fails if one passes (the defect is fixed: remove its seeds here) or breaks anything
// else. None is open: defect 2 of issue 22 was pinned here at seeds 1, 221, 230 and 306 until
// its fix (TestDefect2SeedHolds). A change to what the gate profile draws (a new fault class in
// "all") moves pinned seeds: survey the gate profile again and re-pin
// (`make simulate SEEDS=500 PROFILE=all`).
var openFindings = map[uint64]string{}

// expectOpenFindings takes the seeds of openFindings out of failed when they broke what they are
// pinned for, and reports those that did not (or passed).
func expectOpenFindings(t *testing.T, failed map[uint64][]Violation, n int) {
	t.Helper()
	for seed, kind := range openFindings {
		if seed > uint64(n) {
			continue
		}
		vs, ok := failed[seed]
		if !ok {
			t.Errorf("seed %d keeps every invariant: its open finding (%s) is fixed; remove it from openFindings and turn its finds test around", seed, kind)
			continue
		}
		for _, v := range vs {
			if v.Kind != kind {
				t.Errorf("seed %d, pinned for %q, broke another invariant too: %s", seed, kind, v)
			}
		}
		delete(failed, seed)
	}
}

// The redrive generation, fixed by 2a8302f: a redriven job is a new generation, and every id
// derived from it names the generation. With the lanes queue's deduplication id left without it
// (job.generation returning ""), seed 9 of the operator's actions loses a job: gamma's j024 is
// routed at 18m32s, dead-lettered after 3 failed attempts at 21m3s, and redriven at 22m4s; the
// router sends generation 1 with generation 0's id ("gamma-j024"), within SQS's 5-minute
// deduplication interval, so SQS drops it and generation 1 never ends (78 of 300 seeds of the
// profile lose a job so). With the fix the seed keeps every invariant and generation 1 ends once.
//
//	SEED=9 TRACE=j024 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile actions
func TestRedriveGenerationSeedHolds(t *testing.T) {
	w, vs := findAt(t, 9, "actions")
	if len(vs) > 0 {
		t.Errorf("seed 9 (the redrive generation's): %s", w.Report(vs, 40))
	}
	if !traced(w, "job ended: generation 1: dead-lettered") {
		t.Errorf("seed 9: the trace has no redriven generation ending: the seed no longer tests the fix")
	}
}

// A key's cap lowered under its jobs (found with the operator's actions; the same root as defect 2:
// a retry in place did not count its key). At seed 74 of this profile an operator gives
// beta's key k2 its own cap of 2 at 8m38s and resets beta at 10m31s (k2 back to the type's key
// limit, 1). j097 binds k2 at 10m36s, within the cache's age of the reset (allowed), beside j081,
// whose execution runs in its lane since 46s. When j081's attempt 1 times out at 10m46s, its
// attempt 2 starts in place without counting its key: 2 executions of key k2, cap 1, 15 s after
// the cap was lowered. Seeds 179 and 182 of the profile broke a key's cap the same way (a reset,
// and config set --key-limit 1). Fixed: a retry counts its key (TestRetryWaitsWhenItsKeysCapWasLowered),
// and over the cap waits in its key's group. Later changes (batches, the starter's reviews) moved
// every run: seed 74 no longer reaches the path, and with the fix reverted none of seeds 1-300 of
// the profile breaks a key's cap any more; seed 347 runs the fix's path (a retry finds its key at
// its lowered cap and waits in its key's group) and keeps every invariant, the first of the
// profile to since a bind checks that it holds its message.
//
//	SEED=347 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile actions+skew+kill+events
func TestLoweredKeyCapSeedHolds(t *testing.T) {
	holdsOnPathFrom(t, "actions+skew+kill+events", 340, 600, func(w *World) bool {
		return traced(w, "the job waits in its key's group")
	})
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
// retry, the mark succeeds at 1h13m7.138s and one event goes out. Later changes moved every run;
// seed 8 of throttle now has the same interleaving (bat03's META read throttled after its event
// was sent), and this test holds it.
//
//	SEED=8 TRACE=bat03 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile throttle
func TestAnnouncedRetrySeedHolds(t *testing.T) {
	holdsOnPath(t, "throttle", 200, func(w *World) bool {
		for _, b := range w.batches.batches {
			sent := []string{"events.PutEvents accepted", "of batch " + b.id}
			if tracedAfter(w, sent, []string{"ddb.throttled ddb.GetItem BATCH#" + b.id + "|META"}) {
				return len(eventsOf(w, b.id)) == 1
			}
		}
		return false
	})
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

// A job lost by a stale copy (found by the long run at seed 19564 of all; fixed). j089's waiting
// copy was bound and started in lane 1, and came back after a killed delivery; alpha's limit was
// lowered to 1, its attempt failed and the retry moved the job to its waiting group; the returned
// copy bound lane 2 as attempt 1 again; the moved copy (attempt count 1) was dropped because the
// job held lane 2, and lane 2's copy was dropped because execution alpha-j089-1 existed (FAILED).
// No copy was left. Fixed: a copy that finds its job's lane bound to a copy counting fewer attempts
// hands its count to that bound lease and goes, and the stale copy starts the next attempt
// (TestMovedCopyGoesOnFromAStaleCopysLane). The fix moved seed 19564's run off the path, which is
// rare (one seed in 20,000 of all). Later changes to the recovery paths moved every run off it:
// none of seeds 1-1,500 of races, or 1-800 of all amplified ten times, binds a stale copy any
// more, so the unit test is its net. The seed that found it must hold, and so must the amplified
// seed that ran it, but for work conservation: the bound allows two crashes in a row, and at ten
// times the kills (3% of calls) seed 371 now has more in a row (the releaser's wake-up reads its
// type's config since pools, so later calls draw other faults): alpha's lane 3 is held 9 minutes by
// a bound lease whose copy was killed at its first call twice running, with its waiting group's
// invocations killed before and after, and alpha runs 3 of 4 lanes for 32m5s (bound 32m). Every
// gap in that window is a killed invocation's visibility timeout or the sweep's take-back of a
// lease it left, as the design has it (docs/simulation.md: at ten times some seeds break only
// this bound).
//
//	SEED=19564 TRACE=j089 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all
func TestStaleCopySeedHolds(t *testing.T) {
	if w, vs := findAt(t, 19564, "all"); len(vs) > 0 {
		t.Fatalf("seed 19564 (all): %s", w.Report(vs, 40))
	}
	w, vs := findAt(t, 371, "all", amplified(10))
	if vs = slices.DeleteFunc(vs, func(v Violation) bool { return v.Kind == KindIdle }); len(vs) > 0 {
		t.Fatalf("seed 371 (all, amplified 10 times): %s", w.Report(vs, 40))
	}
}

// A job lost to a twin's start (found by the long run at seed 20912 of all; fixed). gamma's limit
// was lowered from 5 to 2 while j004's bound copy waited in lane 3; Lambda handed its batch over
// twice. One delivery moved the job (lease deleted, waiting copy sent, message deleted); the twin,
// with a cached limit of 5, found no lease and started attempt 1 in lane 3, with no message left. The
// attempt failed, its release could not make the message visible again, and the waiting copy
// dropped itself for the job's retrying lease: the job never ended. Fixed: a move leaves a moving
// lease until its message is gone, and a twin that finds it finishes the move
// (TestTwinStartingBetweenAMovesLeaseDeleteAndMessageDelete); a first-free job that finds no lease
// starts only if its delivery still holds its message (TestTwinOfAMovedLaneCopyDoesNotStart). The
// fix moved seed 20912's run off the path; with four times the kills, duplicate deliveries and limit
// changes of all (profile races), a twin finishes a move within the first seeds, and each seed run
// keeps every invariant.
//
//	SEED=20912 TRACE=j004 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all
func TestTwinOfAMovedCopySeedHolds(t *testing.T) {
	holdsOnPath(t, "races", 100, func(w *World) bool {
		return traced(w, "finished the move of a job leaving its lane")
	})
}

// amplified multiplies the kills, duplicate deliveries and limit changes of a profile by n (as
// profile races does by 4): the faults whose coincidence a rare path needs.
func amplified(n int) func(*Config) {
	return func(c *Config) { c.Faults = Amplified(c.Faults, n) }
}

// A start made past a pause (found by the long run at seed 22019 of all; fixed). beta was paused at
// 9m29.6s; j059's retry was received at 9m37.1s and read beta unpaused from its 10 s cache; its next
// calls stalled 4 s, and it claimed and started attempt 2 at 9m41.1s, 11.5 s after the pause. Fixed:
// a new start reads its type's config again right before its claim, and a pause seen then parks the
// job in its lane (TestPauseSeenBeforeTheClaimHoldsTheStart). Pinned, as the path needs a pause, a
// retry and a stall at once.
//
//	SEED=22019 TRACE=j059 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all
func TestPauseBeforeAClaimSeedHolds(t *testing.T) {
	w, vs := findAt(t, 22019, "all")
	if len(vs) > 0 {
		t.Fatalf("seed 22019 (all): %s", w.Report(vs, 40))
	}
	if !traced(w, "type paused; parked until it is resumed", "jobId=j059", "lane=3") {
		t.Errorf("seed 22019 no longer parks j059's retry for the pause: find another seed (make simulate) that runs the path")
	}
}

// Two opens of one batch at once (found by the long run at seed 10080 of all): a router's Open
// read the batch item (absent), stalled 3.5 s (a slow call), and read shard 0's count to check
// that no batch of the id had expired; meanwhile another router opened the batch and recorded
// the refusal of one of its jobs (no type) in shard 0. The first router took the count for an
// expired batch's and refused its job (j073) as invalid_batch, a valid job of an open batch
// counted as refused; redriven, the job succeeded, and the batch's counts and completion event
// said refused where its job succeeded. Fixed: an Open that finds shard 0 counted reads the
// batch item again, and only a batch item still absent is an expired batch
// (TestOpenRacingAnotherOpenIsNotExpired). The race needs a batch's first jobs routed at once
// and a slow read: this test sends every batch's jobs in a burst and stalls one call in ten, and
// holds the first seed of all whose trace has a router read the batch item absent and then shard
// 0 counted; no job of the workload, whose batches are all valid, may be refused invalid_batch.
//
//	SEED=10080 TRACE=bat06 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all
func TestOpenRaceSeedHolds(t *testing.T) {
	burst := func(c *Config) { c.BatchBurst, c.Faults.Slow = 1, 0.1 }
	holdsOnPath(t, "all", 100, func(w *World) bool {
		if traced(w, "job refused", "reason=invalid_batch") {
			t.Errorf("a job of a valid batch was refused invalid_batch")
		}
		return openRaced(w)
	}, burst)
}

// openRaced says whether a reader of a batch's item found it absent and its next read of the
// ledger found the batch's shard 0 counted: another job opened the batch and counted in it between
// the two reads of an Open.
func openRaced(w *World) bool {
	last := map[string]string{} // reader -> its last read of the ledger, "key result"
	for _, l := range w.traceLog {
		f := strings.Fields(l.text) // ddb.get KEY by READER -> RESULT
		if len(f) != 6 || f[0] != "ddb.get" {
			continue
		}
		key, by, res := f[1], f[3], f[5]
		if id, ok := strings.CutSuffix(key, "#S000|COUNT"); ok && res == "found" && last[by] == id+"|META absent" {
			return true
		}
		last[by] = key + " " + res
	}
	return false
}

// The lanes queue's backlog bound, shared by type (router/backlog.go): alpha's jobs all arrive in
// the first second and fill a bound of one waiting job; the router holds alpha's jobs back in the
// general queue while the other types route, under every fault class, and every invariant holds.
// Found by it: a type held as flooding until the whole queue was under the bound starved with its
// lanes idle while the light types kept the queue over it (5 minutes idle at seed 1 of none); a
// flooding type is now held for BacklogHoldSeconds at a time.
func TestBacklogShareKeepsTheInvariants(t *testing.T) {
	flood := func(c *Config) { c.LanesBacklog, c.Jobs, c.Flood = 1, 200, "alpha" }
	for _, profile := range []string{"none", "all"} {
		holdsOnPath(t, profile, 10, func(w *World) bool {
			return traced(w, "job held in the general queue", "type=alpha")
		}, flood)
	}
}

// A limit lowered under `random` (found by the long run: seeds 11985 and 13399 of all, taken
// for a defect of the limiter; a defect of the checker). At seed 11985 gamma's limit was set to 1
// at 14m21.4s; gamma-j072 started in lane 3 at 14m27.1s, on the limit its starter had cached (at
// most 10 s old, allowed), and gamma-j000's attempt 3 started in lane 1 at 14m35.1s, when its
// attempt 2 failed. Under `random` jobs start in the new range as its lanes free, beside the ones
// still running above it (docs/configuration.md), and the checker allows that while a job started
// under the old limit runs; but when that job was younger than the cache's age, the checker looked
// for the limit it started under the cache's age back from now, not from its start: 2 executions,
// limit 1. (13399: the same with j053 in lane 2 and j056's first start.) The checker now looks
// back from the oldest running execution's start (TestBoundKeepsTheLimitARunningExecutionStartedUnder).
// The path is rare: every execution running at the start began after the change, within the
// cache's age of it (2 of seeds 1-15,000 of all; none of seeds 1-300 of operator, even with 20
// limit changes a run), so holdsOnPath cannot find it, and a change to the limiter moves these
// seeds off it (the first-free retry's fix below moved 11985). The unit test holds the rule; this one holds the
// two seeds to every invariant and says which of them still runs the path.
//
//	SEED=11985 TRACE=j000 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all
func TestStartedOnACachedLimitSeedHolds(t *testing.T) {
	for _, seed := range []uint64{11985, 13399} {
		w, vs := findAt(t, seed, "all")
		if len(vs) > 0 {
			t.Errorf("seed %d of all: %s", seed, w.Report(vs, 40))
		}
		on := traced(w, "run over its limit", "(started within the cache's age)")
		t.Logf("seed %d of all keeps every invariant; a start allowed by a younger execution's limit: %v", seed, on)
	}
}

// A limit lowered under first-free, found by reading the code after seeds 11985 and 13399: a
// retry in place (or a claim whose start never went through) started beside the jobs still running
// above the lowered limit, while a bind counted them (TestBindCountsJobsAboveALoweredLimit). The
// checker does not see it: a job started under the old limit keeps that limit allowed while it
// runs (random relies on that). At seed 4 of operator, before the fix, alpha's limit went from 2
// to 1 at 14m56.8s while j043 ran in lane 1 and j031 in lane 2; j043's attempt 1 failed at
// 15m26s and its attempt 2 started in lane 1 beside j031: 2 running, limit 1, 29 s after the
// change. A retry now counts them as a bind does, and with the limit's worth of lanes held
// elsewhere waits in its waiting group (TestRetryCountsJobsAboveALoweredLimit): there j043 waits
// until j031 ends. This holds the first seed whose retry waits so.
//
//	SEED=4 TRACE=j043 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile operator
func TestRetryAboveALoweredLimitSeedHolds(t *testing.T) {
	holdsOnPath(t, "operator", 300, func(w *World) bool {
		return traced(w, "type at its limit, lowered since the job's last attempt")
	})
}

// A success counted twice through a stale look (found by the long run at seed 3949 of all; fixed).
// beta-j053's release deleted its message with a stale receipt handle and freed its lease, 2 s
// before the message's next delivery, whose look at the attempt (DescribeExecution, eventually
// consistent) still saw it running: its claim was not marked reclaimed, and its release counted
// the success again. Fixed: a recovering claim whose execution stopped before the claim was made
// is marked reclaimed when its look-up after the claim sees it ended. The seed was pinned until the
// pools' changes moved its run off the path. Recovering an attempt whose execution stopped before
// its claim is not rare (of seeds 1-41 of all, 2, 8 and 41 recover an attempt, and each of them
// one that had stopped before its claim), so this holds the first seed of all that recovers an
// attempt: every invariant, the published JobsSucceeded among them, must hold.
//
//	SEED=3949 TRACE=j053 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all
func TestStaleLookAtARecoveredAttemptSeedHolds(t *testing.T) {
	holdsOnPath(t, "all", 100, func(w *World) bool {
		return traced(w, "lane the job must leave holds an attempt of this message")
	})
}

// A success counted twice through a release that ran under a delivery (found at seed 212 of
// all+pools; fixed). alpha-j056's start went through with its answer lost; its message came back
// (receive 2) and that delivery read the claim, then took its pool slot (overPool), while the
// workflow's release step, its execution still RUNNING, deleted the message with the claim's
// receipt handle, gone stale, and freed the lease. The delivery's claim over it failed; it found the
// lane free and the attempt running (ownAttempt), claimed it unmarked, and the sweep's release of it
// once it ended counted the success again (88 published, 87 succeeded). Fixed: a delivery that read
// its message's claim and then finds it gone marks the attempt's claim reclaimed. The fix of a lease-less
// move's twin (TestTwinOfAFinishedMoveLeavesNoMovingLease) and the lease-less reclaim of a running
// attempt moved the seeds that ran the path (212, then 321); the path is not rare (seeds 240, 265,
// 271, 321 and 329 of all+pools ran it once), so this holds the first seed of all+pools that runs
// it: every invariant, the published JobsSucceeded among them, must hold.
//
//	SEED=n TRACE=jNNN go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all+pools
func TestReleaseUnderARedeliverySeedHolds(t *testing.T) {
	holdsOnPath(t, "all+pools", 600, func(w *World) bool {
		return traced(w, "this message's claim was freed by a release while this delivery looked")
	})
}

// A job lost (found at seed 211 of races by the search for the path above): gamma-j022's attempt 2
// failed in lane 2 under a lowered limit, and its delivery moved the job, with its count, to its
// waiting group, deleting its message and lease. A twin of that delivery found no lease and attempt
// 1 run by its message, claimed it back (a reclaim), found its message gone, and could not drop the
// claim (a throttled DeleteItem). The moved copy took that claim for the job's run and dropped
// itself; the sweep retried attempt 1 through a message that no longer existed. A delivery that
// would reclaim an attempt checks that it holds its message before its claim
// (TestTwinReclaimingAfterTheMoveWritesNothing).
//
//	SEED=211 TRACE=j022 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestTwinReclaimingAfterAMoveSeedHolds(t *testing.T) {
	holdsOnPath(t, "races", 400, func(w *World) bool {
		return traced(w, "stale delivery of a message gone since its attempt ran")
	})
}

// A job counted twice in its pool (found at seed 21106 of all+pools; fixed): beta-j055's bind in
// lane 1 took slot 2 of psp (cap 2), found pool llm full and gave its lane back, leaving slot 2
// naming j055 in lane 1. Bound in lane 1 again 20 seconds later, it took slot 1, the lowest free, and
// its new lease made slot 2 live again: the one job held both slots for the 30 minutes it ran (three
// attempts), and alpha, psp's other member, parked at the pool's cap with its one lane idle for 32
// minutes. A bind takes over the slot naming its job in its lane instead of a second one
// (TestRebindInTheSameLaneTakesOverTheSlotNamingItsJob). The path is common (seed 2 of all+pools
// runs it, seed 21106 three times); this holds the first seed that runs it, each seed before it
// keeping every invariant.
//
//	SEED=21106 TRACE=j055 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all+pools
func TestJobCountedTwiceInItsPoolSeedHolds(t *testing.T) {
	holdsOnPath(t, "all+pools", 100, func(w *World) bool {
		return traced(w, "took over the pool slot an earlier lease of this job in this lane named")
	})
}

// A batch that never closed (found by the survey of all+pools at seed 20857, on the code before the
// fix): gamma-j068's lane copy, its start killed and its lease taken back by the sweep, was moved to
// its waiting group by one delivery, which deleted the message; the moved copy bound lane 1 again,
// and a twin of the moving delivery claimed that later bind's lease and started the job. The later
// bind's copy found the attempt running and took the lane over under its own message id; the
// execution's release, naming the twin's message, dropped that claim as a duplicate's, and the
// job's success was counted nowhere (had the attempt failed, nothing would have retried it). A copy
// of an earlier bind claims a bound lease only while its delivery still holds its message
// (TestStaleCopyOfAnEarlierBindDoesNotClaimALaterBind), or a claim another message of its job wrote
// (TestStaleCopyDoesNotTakeOverAnotherMessagesClaim). Later changes moved seed 20857 off the path;
// seed 253 of races was the first to run either drop (644 the first over a bound lease), so the
// search starts near it.
//
//	SEED=20857 TRACE=j068 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all+pools
func TestStaleCopyOfAnEarlierBindSeedHolds(t *testing.T) {
	holdsOnPathFrom(t, "races", 200, 1000, func(w *World) bool {
		return traced(w, "stale copy of an earlier bind, its message gone") || traced(w, "stale copy of the job, its message gone")
	})
}

// A pool held full by a type that left it (found at seed 22342 of all+pools; fixed): beta joined psp
// with beta-j048 running, and the sweep gave it slot 4 (psp's cap was 4). Beta left psp, psp's cap
// went back to the deployment's 2, and j048 failed, waited while beta was paused, and ran twice
// more: its lease held slot 4 all the while, so psp read full under cap 2 with its members, alpha
// and gamma, running one job, and alpha parked at the pool's cap with its 5 lanes idle for 32
// minutes. A slot held by a type not among the pool's members is free (pool.Look; TestLook's "a
// slot held by a type no longer a member is free"). The path is common (seed 2 of all+pools runs
// it); this holds the first seed that runs it, each seed before it keeping every invariant.
//
//	SEED=22342 TRACE=j035 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all+pools
func TestPoolHeldByATypeThatLeftItSeedHolds(t *testing.T) {
	holdsOnPath(t, "all+pools", 100, func(w *World) bool {
		return traced(w, "took a pool slot beside a job of a type that left the pool")
	})
}

// A job's success counted twice (found at seed 41 of actions+skew+kill+events once 3cf08f6's check
// moved a kill onto the path): gamma-j041, a random type's job retried in place (attempt 1 FAILED,
// attempt 2 SUCCEEDED), outlived its lease, freed by the sweep with a receipt handle gone stale. Its
// message's next delivery reclaimed from the attempt its body names, 1, and was killed after that
// claim; the sweep retried the FAILED attempt 1, and the next delivery claimed attempt 2 as a retry,
// whose release counted the success again (JobsSucceeded 96 published, 95 jobs succeeded). A
// reclaim claims the last attempt its message ran (TestReclaimClaimsTheLastAttemptItsMessageRan).
//
//	SEED=41 TRACE=j041 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile actions+skew+kill+events
func TestReclaimOfTheLastAttemptSeedHolds(t *testing.T) {
	if w, vs := findAt(t, 41, "actions+skew+kill+events"); len(vs) > 0 {
		t.Fatalf("seed 41 (actions+skew+kill+events): %s", w.Report(vs, 40))
	}
}

// A type idle past the constant bound while its waiting group's deliveries were killed one after
// another (seeds 980 and 1101 of races; not a defect of the limiter). At 980 gamma's waiting group
// gamma-0 came back every visibility timeout from 10m49s and its delivery was killed each time
// (10m49s, 15m49s, 20m48s, 25m49s, 30m48s, 35m57s, 40m57s): a killed invocation leaves its whole
// batch in flight, and SQS hands out no later message of a FIFO group while one is in flight, so
// gamma ran fewer jobs than its limit of 5 for 32m5s while j005 waited behind the group's head,
// over a bound that allowed two crashes. 1101 is the same with six kills from 24m51s. The
// checker's bound follows the kills of the type's own work (TestIdleBoundFollowsTheKillsOfTheTypesWork);
// this holds both seeds to every invariant.
//
//	SEED=980 TRACE=gamma-0 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestKilledWaitingGroupSeedsHold(t *testing.T) {
	holdAt(t, "races", 980, 1101)
}

// A type idle 32 minutes while its jobs waited (found at seeds 30369 and 30413 of races): a resume
// woke the head of alpha's waiting group, which, its config still cached as paused, parked again
// (invisible for PausedParkFor, 15 minutes), then read the config past the cache, found alpha
// resumed and bound. Its invocation was killed later in the batch, and the head, never deleted,
// held its group for 15 minutes rather than the queue's visibility timeout, twice in a row. A head
// that finds its type resumed after its park gives its message the queue's visibility timeout back
// (TestResumeDuringTheParkGivesTheMessageItsVisibilityBack).
//
//	SEED=30369 TRACE=j005 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestResumedHeadSeedsHold(t *testing.T) {
	holdAt(t, "races", 30369, 30413)
}

// A job lost (found at seed 30550 of races): the bind of beta-j040's waiting message wrote lane 4's
// bound lease, answered as failed, and a twin delivery of that message, its view read before,
// bound lane 5 and acknowledged the message, so lane 4's copy never went. Attempt 1 failed in lane
// 5 and the job moved to its key's group (a cap lowered); there the moved copy found lane 4 bound
// to the stale bind, handed it its count and went. The job lived only in that lease, which the
// sweep took back: never retried nor dead-lettered. The moved copy now sends the bind's copy again,
// under the bind's deduplication id (TestMovedCopyGoesOnFromAStaleCopysLane).
//
//	SEED=30550 TRACE=j040 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestStaleBindWithoutItsCopySeedHolds(t *testing.T) {
	holdAt(t, "races", 30550)
}

// A pool over its cap (found at seeds 40023, 40060 and 40076 of all+pools: 3 jobs in a pool of 2,
// 2 in a pool of 1): a job bound again in the lane of a bind given back took over the slot that
// bind had named, above the places the pool's look offered (written under a higher cap), while a
// bind that had read the pool before took the last offered place. A rebind takes over only an
// offered slot; one above them names nobody, and the job takes an offered one
// (TestRebindDoesNotTakeOverASlotAboveTheCap). The three seeds keep every invariant, and the
// search from 40016 finds the first seed that runs the path (40023, since the sweep wakes parked
// groups while lanes are free and a stale bound lane is taken back behind a probe).
//
//	SEED=40076 TRACE=llm go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all+pools
func TestRebindAboveThePoolCapSeedsHold(t *testing.T) {
	holdAt(t, "all+pools", 40060, 40076)
	holdsOnPathFrom(t, "all+pools", 40016, 40200, func(w *World) bool {
		return traced(w, "lies above the places offered; it names nobody")
	})
}

// A key over its cap (found at seed 40034 of races: 2 executions of beta's key k3, cap 1): the bind
// of beta-j001's waiting message took lane 4 and acknowledged the message, and a twin delivery of
// it, whose read showed no lease of k3, bound lane 1 while the group's next head, j020, bound lane 2
// from the same count. A bind of a type that caps keys holds only while its delivery still holds its
// message (TestStaleDeliveryOfAWaitingMessageDoesNotBindBesideItsGroupsHead); a stale one gives its
// lane back. The check's call moved seed 40034 off the path; the search finds one that runs it.
//
//	SEED=40034 TRACE=j001 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestStaleBinderBesideItsGroupsHeadSeedHolds(t *testing.T) {
	holdAt(t, "races", 40034)
	holdsOnPath(t, "races", 100, func(w *World) bool {
		return traced(w, "stale delivery of a waiting message; lane it bound given back")
	})
}

// A job lost (found at seed 411 of races): beta-j017's attempt 1 failed in lane 1 after beta's limit
// was lowered; the delivery that came back for the retry moved the job to its key's group (copy
// sent, message and lease deleted), and a twin of that delivery, finding no lease and attempt 1 of
// its message still running by a stale read, claimed the attempt back. The claim named a deleted
// message: the attempt's end was released into it, and the moved copy, finding the job's lane
// claimed, dropped itself. A delivery with no lease that would claim back an attempt its message
// ran checks first that it holds its message (TestTwinOfAMoveFindingItsAttemptRunningWritesNothing).
// The fixes of a stale binder's give-back moved seed 411 off the path; seed 14 is the first to run it.
//
//	SEED=411 TRACE=j017 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestTwinOfAMoveFindingItsAttemptRunningSeedHolds(t *testing.T) {
	holdAt(t, "races", 411)
	holdsOnPath(t, "races", 100, func(w *World) bool {
		return traced(w, "dropped before any claim", "found=a lane the job must leave")
	})
}

// A job lost beside a stale bind given back (found by reading the code): a stale delivery of a
// waiting message bound a lane, and another message of its job, its group's head, dropped itself as
// a duplicate of a job holding a lane just before the stale bind gave the lane back. Beside another
// message's bound lease a message now waits for the claim or the give-back
// (TestMessageOfAJobBoundByAStaleDeliveryIsNotDroppedBeforeTheGiveBack); the search from seed 505
// of races finds the first that runs that wait (509; the admission of every key-capped job moved
// seed 166 off it).
//
//	SEED=509 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestMessageBesideAnotherMessagesBindSeedHolds(t *testing.T) {
	holdsOnPathFrom(t, "races", 505, 520, func(w *World) bool {
		return traced(w, "the job is bound by another message, its copy not claimed yet")
	})
}

// A job lost to a twin of a move on the path that checks its message after its claim (found by
// review of seed 411's fix): a moved copy bound while a stale twin's claim stood took the claim for
// its job holding a lane and dropped itself; the twin then dropped its claim. A copy finding its
// job's lane claimed by another message whose start is not made looks again
// (TestMovedCopyBoundWhileAStaleTwinsClaimStandsIsNotDropped). The search from seed 1 of races
// finds the first seed that runs the look again (7), the seeds before it keeping every invariant.
//
//	SEED=7 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestCopyBesideAClaimWhoseStartIsNotMadeSeedHolds(t *testing.T) {
	holdsOnPath(t, "races", 100, func(w *World) bool {
		return traced(w, "the job's lane is claimed by another message, its start not made")
	})
}

// A job lost to a twin delivery's release of an ended attempt: the twin found attempt 1 timed out
// without a release, a status event's release retried it, and the other twin started attempt 2 on
// the same message; the twin's own release found nothing to do and acknowledged the message, which
// Lambda deleted under attempt 2. Attempt 2 timed out too, its retry had no message to come back,
// and the sweep took the lease back: gamma/j080 never ended. A delivery whose release finds a later
// claim on its message now leaves the message to it (TestTwinDoesNotDeleteTheMessageOfTheNextAttempt);
// 61164 no longer runs the twin's path with the fix. Seed 2 of races runs the decision: beta/j018's
// delivery released its timed-out attempt 2 after a status event's release had retried it and a
// later receive of the message had claimed attempt 3.
//
//	SEED=61164 TRACE=j080 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races (before the fix)
//	SEED=163 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile races
func TestTwinLeavesTheNextAttemptsMessageSeedHolds(t *testing.T) {
	holdsOnPathFrom(t, "races", 163, 163, func(w *World) bool {
		return traced(w, "the message backs a later claim of its job")
	})
}

// JobsSkipped counted twice by twin deliveries (found by the skip profile's first survey, fixed):
// Lambda handed a waiting job's batch to two invocations; at its key's cap with an older job of its
// sender, each copy wrote the skip (admission.Store.Skip succeeds on the same fate written already,
// as a retried ambiguous write must) and each published JobsSkipped. At seed 2 of duplicate+skip,
// before the fix, starter#607 and #608 both skipped e008: 12 published, 11 skipped. Only the call
// that writes the skip counts it now; the path is two invocations skipping one job.
//
//	SEED=2 TRACE=e008 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile duplicate+skip (before the fix)
func TestJobsSkippedCountedOnceByTwinsSeedHolds(t *testing.T) {
	holdsOnPathFrom(t, "duplicate+skip", 80, 120, func(w *World) bool {
		skips := map[string]int{} // by the skipped message (twins share it; a reused id does not)
		for _, l := range w.traceLog {
			if i := strings.Index(l.text, "messageId="); i >= 0 && strings.Contains(l.text, "job skipped (overflow rule skip)") {
				id, _, _ := strings.Cut(l.text[i+len("messageId="):], " ")
				if skips[id]++; skips[id] > 1 {
					return true
				}
			}
		}
		return false
	})
}
