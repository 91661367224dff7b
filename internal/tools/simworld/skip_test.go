package simworld

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// SkipProfile is the profile the overflow rule skip's seeds run: every class of the gate, and the
// type with the rule (skip.go).
const SkipProfile = "all+skip"

// skipWorld is a checker's world with jobs of echo's key k1: the tenant's e000 (submitted at 1 s),
// the producer's e001 (2 s) and e002 (3 s), the tenant's e002 (4 s) and the producer's e003 (5 s).
// Each held a lane but the producer's e002.
func skipWorld(t *testing.T) *World {
	t.Helper()
	w := New(1, DefaultConfig())
	w.check.setLimit(skipType, 3, 1)
	for i, j := range []*jobSpec{
		{typ: skipType, key: "k1", id: "e000", senderID: InterloperSenderID},
		{typ: skipType, key: "k1", id: "e001"},
		{typ: skipType, key: "k1", id: "e002"},
		{typ: skipType, key: "k1", id: "e002", senderID: InterloperSenderID},
		{typ: skipType, key: "k1", id: "e003"},
	} {
		j.k = jobKey(j.typ, j.key, j.id)
		if j.senderID != "" {
			j.k = jobKeyOf(j.typ, tenantSender, j.key, j.id)
		}
		w.jobs[j.k] = j
		w.order = append(w.order, j)
		w.check.ops.submitted[genKey(j.k, 0)] = w.check.start.Add(time.Duration(i+1) * time.Second)
		if j.k != "echo/e002/k1" {
			w.check.skips.laned[j.k] = true
		}
	}
	return w
}

// fate is the ADMIT# item admission.Store writes for sender's job id of echo's key k1 (generation
// 0), with outcome and the job it waited behind.
func fate(w *World, sender, id, outcome, behind string) map[string]ddbtypes.AttributeValue {
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	submitted := w.check.ops.submitted[genKey(jobKeyOf(skipType, sender, "k1", id), 0)]
	item := map[string]ddbtypes.AttributeValue{
		"pk":      s("ADMIT#" + skipType),
		"sk":      s(fmt.Sprintf("%s/k1/%s/0/%d", sender, id, submitted.UnixNano())),
		"outcome": s(outcome),
	}
	if behind != "" {
		item["behind"] = s(behind)
	}
	return item
}

// A skip is checked against the job it names: of the skipped job's type, key and sender, not
// itself, submitted strictly before it, and holding a lane once.
func TestSkipBehindAJobNotEntitledToIsAViolation(t *testing.T) {
	for _, tc := range []struct {
		name           string
		sender, victim string
		behind         string
		want           bool
	}{
		{"an older job of its sender", producerPrincipal, "e003", "e001", false},
		{"the tenant's own older job", tenantSender, "e002", "e000", false},
		{"another sender's job (no job of the skipped one's sender has its id)", producerPrincipal, "e003", "e000", true},
		{"another sender's job of the same id", tenantSender, "e002", "e002", true},
		{"a newer job of its sender", producerPrincipal, "e001", "e003", true},
		{"an older job of its sender that never held a lane", producerPrincipal, "e003", "e002", true},
		{"a job that does not exist", producerPrincipal, "e003", "e009", true},
		{"no job", producerPrincipal, "e003", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := skipWorld(t)
			w.check.put(fate(w, tc.sender, tc.victim, "skipped", tc.behind))
			got := slices.Contains(kinds(w.check.violations), KindSkipWrongJob)
			if got != tc.want || len(w.check.violations) > 1 {
				t.Errorf("violations %v, want %q: %v", w.check.violations, KindSkipWrongJob, tc.want)
			}
			k := jobKeyOf(skipType, tc.sender, "k1", tc.victim)
			if how := w.check.ended[k]; how != "skipped" {
				t.Errorf("%s ended %q, want skipped", k, how)
			}
		})
	}
}

// A skipped generation ends skipped, once (its fate written again is the same skip), and never
// runs: an execution started before the skip or after it, or a dead letter after it, is a
// violation. An admission ends nothing.
func TestASkippedJobNeverRunsAndEndsOnce(t *testing.T) {
	exec := func(w *World, id string, attempt int) *execution {
		m := job.Meta{Type: skipType, ID: id, Key: "k1", Sender: producerPrincipal, Attempt: attempt}
		e := &execution{arn: fmt.Sprintf("arn:%s-%d", id, attempt), name: fmt.Sprintf("%s-%s-%d", skipType, id, attempt), status: sfntypes.ExecutionStatusRunning,
			start: w.now(), meta: m, jk: jobKey(skipType, "k1", id)}
		w.sfn.execs[e.arn] = e
		w.sfn.order = append(w.sfn.order, e)
		return e
	}
	for _, tc := range []struct {
		name string
		run  func(w *World)
		want []string
	}{
		{"skipped, its fate written again", func(w *World) {
			w.check.put(fate(w, producerPrincipal, "e003", "skipped", "e001"))
			w.check.put(fate(w, producerPrincipal, "e003", "skipped", "e001"))
		}, nil},
		{"admitted", func(w *World) {
			w.check.put(fate(w, producerPrincipal, "e003", "admitted", ""))
			if w.check.ended["echo/e003/k1"] != "" {
				t.Errorf("an admitted job ended %q", w.check.ended["echo/e003/k1"])
			}
		}, nil},
		{"started after its skip", func(w *World) {
			w.check.put(fate(w, producerPrincipal, "e003", "skipped", "e001"))
			w.check.started(exec(w, "e003", 1))
		}, []string{KindSkippedRan}},
		{"started before its skip", func(w *World) {
			w.check.started(exec(w, "e003", 1))
			w.check.put(fate(w, producerPrincipal, "e003", "skipped", "e001"))
		}, []string{KindSkippedRan}},
		{"dead-lettered after its skip", func(w *World) {
			w.check.put(fate(w, producerPrincipal, "e003", "skipped", "e001"))
			w.check.end("echo/e003/k1", 0, "dead-lettered (attempts_exhausted)")
		}, []string{KindEndedTwice}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := skipWorld(t)
			tc.run(w)
			if got := kinds(w.check.violations); !slices.Equal(got, tc.want) {
				t.Errorf("violations %v, want %v", w.check.violations, tc.want)
			}
		})
	}
}

// JobsSkipped counts no more jobs than were skipped, and as many in a run that cannot lose a count.
func TestJobsSkippedCountsEachSkippedJobOnce(t *testing.T) {
	for _, tc := range []struct {
		published int
		faults    Faults
		want      bool
	}{
		{1, Faults{}, false},
		{2, Faults{}, true},
		{0, Faults{}, true},
		{0, Faults{DDBLost: 0.01}, false}, // a count may be lost with a lost answer
		{2, Faults{DDBLost: 0.01}, true},  // never added
	} {
		w := skipWorld(t)
		w.cfg.Faults = tc.faults
		w.check.put(fate(w, producerPrincipal, "e003", "skipped", "e001"))
		r := metrics.New(w.metrics, "sim")
		r.Add(skipType, metrics.JobsSkipped, float64(tc.published))
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		w.check.checkSkipped()
		if got := slices.Contains(kinds(w.check.violations), KindMetric); got != tc.want {
			t.Errorf("%d published for 1 skipped (faults %+v): violations %v, want a %q: %v", tc.published, tc.faults, w.check.violations, KindMetric, tc.want)
		}
	}
}

// The rule's seeds keep every invariant, and the type with the rule draws nothing from the world's
// other streams: a seed's other jobs are the same with it. With both rules on, each type has its own.
func TestSkipKeepsItsInvariants(t *testing.T) {
	_, on := ruleKeepsItsInvariants(t, SkipProfile, skipType)
	if got := on.env["TYPE_OVERFLOW"]; got != "echo=skip" {
		t.Errorf("TYPE_OVERFLOW %q, want echo=skip", got)
	}
	if len(on.check.skips.skipped) == 0 {
		t.Errorf("seed 1 of %s skipped no job", SkipProfile)
	}
	both := runWorld(t, 1, "cancel+skip")
	if got := both.env["TYPE_OVERFLOW"]; got != "delta=cancel,echo=skip" {
		t.Errorf("TYPE_OVERFLOW %q with both rules, want delta=cancel,echo=skip", got)
	}
}

// The overflow rule skip end to end: a job of echo at the head of its key's group, its key at its
// cap with an older job of its sender in a lane, ends skipped (its fate written, counted skipped in
// its batch, its message acknowledged) while every invariant holds. The first seed of the profile
// with a skipped job of a batch and a skipped job of the other sender.
func TestSkipEndToEndSeedHolds(t *testing.T) {
	holdsOnPath(t, SkipProfile, 40, func(w *World) bool {
		inBatch, tenant := false, false
		for gk := range w.check.skips.skipped {
			k := gk[:strings.LastIndex(gk, "~g")]
			inBatch = inBatch || w.batches.of[k] != nil
			tenant = tenant || w.jobs[k] != nil && w.jobs[k].senderID != ""
		}
		return inBatch && tenant && traced(w, "job skipped (overflow rule skip)") && traced(w, "outcome=skipped")
	})
}

// A skip whose first delivery failed after its fate was written (here its batch record throttled,
// or the invocation killed) comes back; its key now has room, so the delivery would bind, and its
// admission, written before any lease, finds the skip: the job ends skipped, counted once in
// JobsSkipped (when the skip was written), and takes no lane (starter.bindFree, admit). The first
// seed of the profile that runs it. Before JobsSkipped was counted when the skip is written, this
// path lost the count (seed 23 of throttle+skip: 7 published, 8 skipped).
func TestASkipFoundAtAdmissionTakesNoLaneSeedHolds(t *testing.T) {
	holdsOnPath(t, SkipProfile, 60, func(w *World) bool {
		return traced(w, "the job was skipped before (overflow rule skip)")
	})
}

// Seeds that catch the rule's guards removed (docs/simulation.md, "The overflow rule skip"): with
// skipBehind's "submitted before" check removed, seed 6 skips e024 of key k3 behind e003, not
// submitted before it (KindSkipWrongJob); with a job sent to its lane without its admission (neither written
// before its lease nor read on a redelivery), seed 2 runs e009 after its skip (KindSkippedRan).
// Without the sender check, every seed from 1 breaks. On the code as it is, both keep every
// invariant.
//
//	SEED=6 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all+skip
func TestSkipGuardsSeedsHold(t *testing.T) {
	holdAt(t, SkipProfile, 2, 6)
}
