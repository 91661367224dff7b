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

func findAt(t *testing.T, seed uint64, profile string) (*World, []Violation) {
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
// the lease, finds its message gone and dropped the lease as a stale delivery's (dropStale). The
// dead-lettering lease was the only record of the job: it was never dead-lettered. Fixed: a stale
// delivery leaves a dead-lettering lease to its release or the sweep's takeover
// (TestStaleDeliveryLeavesADeadLetteringLease); this seed now keeps every invariant, and its trace
// shows the stale copy leaving the lease.
//
//	SEED=1438 TRACE=j046 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile duplicate+kill
func TestLostDeadLetterSeedHolds(t *testing.T) {
	w, vs := findAt(t, 1438, "duplicate+kill")
	if len(vs) > 0 {
		t.Errorf("seed 1438 (duplicate deliveries and kills): %s", w.Report(vs, 40))
	}
	if !traced(w, "stale delivery of a job being dead-lettered", "jobId=j046") {
		t.Errorf("seed 1438: the trace does not show j046's stale copy leaving the dead-lettering lease: the seed no longer tests the fix")
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

// Open: a limit lowered, then acted on long after the configuration cache's 30 s. When a starter's
// read of the live config fails (ProvisionedThroughputExceeded after the SDK's retries), the
// resolver keeps serving the overrides it read last, however old, and counts them as read now
// (config.Resolver.load: loadedAt = now on an error): a container idle since before a change acts on
// the old overrides for another 30 s, and each further failure adds 30 s more. At seed 76 the limit
// of beta is lowered to 2 at 14m55s; a starter container that last read its overrides at 14m27s
// fails to read them again at 16m41s and binds jobs to lanes 3-5 with the old limit (2m14s stale);
// j002 starts in lane 5 at 16m42s beside two running jobs: 3 executions of beta, limit 2. The limiter's own contract (config.MaxCacheAge:
// "bounds how stale a live override may be when a function acts on it") is broken by a deliberate
// availability choice that TestResolverStoreErrors holds (serve the last known overrides while the
// table is unreachable); which of the two gives way is the maintainers' call.
//
//	SEED=76 TRACE=beta go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all
func TestFindsLimitActedOnPastTheConfigCache(t *testing.T) {
	w, vs := findAt(t, 76, "all")
	found := false
	for _, v := range vs {
		if v.Kind == KindLimit && strings.Contains(v.Detail, "limit 2") && strings.Contains(v.Detail, "beta-j002-1(lane 5") {
			found = true
		}
	}
	if !found {
		t.Errorf("seed 76 no longer exceeds beta's lowered limit (fixed, or the interleaving moved): turn this test around; violations: %s", w.Report(vs, 40))
	}
	if !traced(w, "bound to a free lane", "jobId=j002", "toLane=5") {
		t.Errorf("seed 76: the trace has no bind of j002 to lane 5 above beta's limit of 2")
	}
}

// A park record left for a head that is gone (found in review, fixed): Lambda hands a waiting
// group's batch to two invocations; one, slowed by a stalled call, makes j081's message invisible
// and is about to park it when the other binds j081 to lane 1 and acknowledges the message. The slow
// one then writes the group's park record and, in its second look, finds j081's key at its cap (j081's
// own new lease counts) and stays parked: the record names a deleted message, a release spends a
// wake-up on it, and at seed 196 it is left at quiescence (the release that would have taken it was
// killed). The second look now sees the job bound and removes its record.
//
//	SEED=196 TRACE=j081 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all
func TestParkRecordOfABoundJobSeedHolds(t *testing.T) {
	w, vs := findAt(t, 196, "all")
	if len(vs) > 0 {
		t.Errorf("seed 196: %s", w.Report(vs, 40))
	}
	if !traced(w, "the job was bound while this delivery parked", "jobId=j081") {
		t.Errorf("seed 196: the trace does not show j081's slow delivery leaving its record: the seed no longer tests the fix")
	}
}
