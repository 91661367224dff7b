package simworld

import (
	"sort"
	"strconv"
	"strings"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// The overflow rule skip (Faults.Skips; config.OverflowSkip). With it on, the deployment has a
// type echo with the rule (TYPE_OVERFLOW echo=skip), drawn as the rule cancel's delta is
// (burstWorkload): first-free, a limit of 2-4, every key capped at 1 and k2 at 2, released by its
// Release step or by status events; Faults.Skips bursts of 2-5 jobs of one key 1-30 s apart, one
// in four from another sender (half of those reusing an id of the producer's in the burst), two
// bursts in five a batch. A waiting job at the head of its key's group, its key at its cap with an
// older job of its sender holding a lane, ends "skipped" (starter.skipBehind): the limiter writes
// its fate, an ADMIT#{type} item with outcome skipped and the job it was skipped behind, before
// anything else, and sends a job to a lane only once its "admitted" fate is written.
//
// Echo has a stream of its own and is not among the types the operator's limit changes and actions
// draw, so a seed's other types, jobs, faults and actions are those of the same seed without it.
//
// Invariants (checked here, in check.go and batches.go), from the fates written to the world's
// table (a skip is the moment its item is written) and Step Functions' executions:
//
//   - a skipped generation never has an execution, started before its skip or after it
//     (KindSkippedRan);
//   - it was skipped behind a job of its type, key and sender, not itself, submitted strictly
//     before it, that had held a lane (a lease bound, starting or retrying) before the skip
//     (KindSkipWrongJob): one sender's jobs never end another's;
//   - it ends once, "skipped": never dead-lettered nor succeeded (KindEndedTwice), counted once and
//     skipped in its batch (batches.go), and counts as ended for every other check;
//   - JobsSkipped counts no more jobs than were skipped, and exactly as many in a run without kills
//     or lost DynamoDB answers.
//
// Key caps and type limits hold for echo as for every type (check.go).

const (
	skipStream = 0x5c1b
	skipType   = "echo"
)

// Invariant kinds of the overflow rule skip.
const (
	// KindSkippedRan: a skipped job's generation has an execution.
	KindSkippedRan = "skipped job ran"
	// KindSkipWrongJob: a job skipped behind a job that is not an older job of its type, key and
	// sender holding a lane.
	KindSkipWrongJob = "skipped behind a job not entitled to"
)

// skipWorkload draws echo and its bursts (none unless Faults.Skips is set) and returns echo.
func (w *World) skipWorkload() []typeSpec {
	return w.burstWorkload(bursts{n: w.cfg.Faults.Skips, stream: skipStream, typ: skipType, ids: "e", batches: "ebat", rule: "skip"})
}

// skipChecks is the checker's state for the overflow rule skip.
type skipChecks struct {
	// skipped holds each skipped generation (genKey) with the id of the job it was skipped behind.
	skipped map[string]string
	// laned holds the jobs (jobKeyOf) a lease bound, starting or retrying was written for.
	laned map[string]bool
}

func newSkipChecks() skipChecks {
	return skipChecks{skipped: map[string]string{}, laned: map[string]bool{}}
}

func strAttrOf(item map[string]ddbtypes.AttributeValue, name string) string {
	if v, ok := item[name].(*ddbtypes.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// leaseWritten records the job of a lease written bound, starting or retrying: it holds a lane.
func (c *checker) leaseWritten(item map[string]ddbtypes.AttributeValue) {
	typ, ok := strings.CutPrefix(strAttrOf(item, "pk"), "LEASE#")
	if !ok {
		return
	}
	switch lease.Status(strAttrOf(item, "status")) {
	case lease.Bound, lease.Starting, lease.Retrying:
		if id := strAttrOf(item, "jobId"); id != "" {
			c.skips.laned[jobKeyOf(typ, strAttrOf(item, "sender"), strAttrOf(item, "key"), id)] = true
		}
	}
}

// fateWritten checks a fate written to the table (an ADMIT# item; admission.Store): a skip ends its
// generation "skipped", once, behind an older job of its type, key and sender that held a lane,
// and none of its executions may have started.
func (c *checker) fateWritten(item map[string]ddbtypes.AttributeValue) {
	typ, ok := strings.CutPrefix(strAttrOf(item, "pk"), "ADMIT#")
	if !ok || strAttrOf(item, "outcome") != admission.Skipped {
		return
	}
	// sk: sender/key/id/redrive/submitted (admission.sk)
	parts := strings.Split(strAttrOf(item, "sk"), "/")
	if len(parts) != 5 {
		c.violate(KindSkipWrongJob, typ, "fate %q names no job", strAttrOf(item, "sk"))
		return
	}
	sender, key, id := parts[0], parts[1], parts[2]
	gen, _ := strconv.Atoi(parts[3])
	k := jobKeyOf(typ, sender, key, id)
	gk := genKey(k, gen)
	if _, again := c.skips.skipped[gk]; again {
		return // the same skip written again: an ambiguous write retried, or another copy's
	}
	behind := strAttrOf(item, "behind")
	c.skips.skipped[gk] = behind
	c.w.trace(k, "skip: %sskipped behind %s", genText(gen), behind)
	for _, e := range c.w.sfn.order {
		if e.jk == k && e.meta.Redrive == gen {
			c.violate(KindSkippedRan, k, "%sskipped behind %s after its execution %s started", genText(gen), behind, e.name)
			break
		}
	}
	bk := jobKeyOf(typ, sender, key, behind)
	mine, ok := c.ops.submitted[gk]
	ms := func(t time.Time) time.Time { return t.Truncate(time.Millisecond) } // SentTimestamp's precision
	older := false
	for g := 0; g <= c.ops.gen[bk]; g++ {
		if at, ok2 := c.ops.submitted[genKey(bk, g)]; ok && ok2 && ms(at).Before(ms(mine)) {
			older = true
		}
	}
	switch {
	case behind == "":
		c.violate(KindSkipWrongJob, k, "%sskipped behind no job", genText(gen))
	case c.w.jobs[bk] == nil:
		c.violate(KindSkipWrongJob, k, "%sskipped behind %s: no job of its type, key %q and sender %q has that id", genText(gen), behind, key, sender)
	case bk == k:
		c.violate(KindSkipWrongJob, k, "%sskipped behind %s, its own id: a job of another sender, or itself", genText(gen), behind)
	case !older:
		c.violate(KindSkipWrongJob, k, "%ssubmitted at %s, skipped behind %s, submitted at %s: not an older job", genText(gen),
			mine.Sub(c.start), bk, c.ops.submitted[genKey(bk, 0)].Sub(c.start))
	case !c.skips.laned[bk]:
		c.violate(KindSkipWrongJob, k, "%sskipped behind %s, which never held a lane", genText(gen), bk)
	}
	c.end(k, gen, "skipped")
}

// checkSkipped: JobsSkipped counts no more jobs than were skipped; exactly as many in a run where
// no count can be lost (no kills, no lost DynamoDB answers).
func (c *checker) checkSkipped() {
	f := c.w.cfg.Faults
	exact := c.w.Stats.Kills == 0 && f.DDBAmbiguous == 0 && f.DDBLost == 0
	got := int(c.w.metrics.Sum("", metrics.JobsSkipped))
	if n := len(c.skips.skipped); got > n || (got < n && exact) {
		keys := make([]string, 0, n)
		for gk := range c.skips.skipped {
			keys = append(keys, gk)
		}
		sort.Strings(keys)
		c.violate(KindMetric, metrics.JobsSkipped, "%d published, %d jobs skipped (%d invocations killed): %s", got, n, c.w.Stats.Kills, strings.Join(keys[:min(len(keys), 10)], " "))
	}
}
