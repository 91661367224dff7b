package simworld

import (
	"testing"
	"testing/synctest"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

func kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	return out
}

func TestRedriveReopensTheJobAsItsNextGeneration(t *testing.T) {
	c := New(1, DefaultConfig()).check
	c.end("beta/j1", 0, "dead-lettered (attempts_exhausted)")
	c.redriven("beta", "", "j1", `{"type":"beta","id":"j1","redrive":1}`, "releaser")
	if len(c.violations) > 0 {
		t.Fatalf("violations %v, want none", kinds(c.violations))
	}
	if _, ok := c.ended["beta/j1"]; ok || c.ops.gen["beta/j1"] != 1 {
		t.Fatalf("after the redrive: ended %q, generation %d; want the job open as generation 1", c.ended["beta/j1"], c.ops.gen["beta/j1"])
	}
	c.end("beta/j1", 1, "succeeded")
	if c.ended["beta/j1"] != "succeeded" || len(c.violations) > 0 {
		t.Errorf("generation 1 ended: ended %q, violations %v; want succeeded and none", c.ended["beta/j1"], kinds(c.violations))
	}
	c.end("beta/j1", 1, "dead-lettered (aborted)")
	if len(c.violations) != 1 || c.violations[0].Kind != KindEndedTwice {
		t.Errorf("generation 1 ended again: violations %v, want one %q", kinds(c.violations), KindEndedTwice)
	}
}

func TestRedriveOfAGenerationThatEndedIsAViolation(t *testing.T) {
	c := New(1, DefaultConfig()).check
	c.end("beta/j1", 0, "dead-lettered (start_refused)")
	c.redriven("beta", "", "j1", `{"type":"beta","id":"j1"}`, "starter")
	if len(c.violations) != 1 || c.violations[0].Kind != KindRedriveReused {
		t.Errorf("violations %v, want one %q", kinds(c.violations), KindRedriveReused)
	}
}

func TestRedriveOfARouterRefusalKeepsItsGeneration(t *testing.T) {
	c := New(1, DefaultConfig()).check
	c.end("beta/j1", 0, "dead-lettered (unknown_type)")
	c.redriven("beta", "", "j1", `{"type":"beta","id":"j1"}`, "router")
	if len(c.violations) > 0 {
		t.Errorf("violations %v, want none: the router's refusal never reached a lane", kinds(c.violations))
	}
}

func TestAStoppedJobMustEndDeadLettered(t *testing.T) {
	c := New(1, DefaultConfig()).check
	c.stopped(&execution{jk: "alpha/j1", name: "alpha-j1-1"})
	c.stopped(&execution{jk: "alpha/j2", name: "alpha-j2-1"})
	c.end("alpha/j1", 0, "dead-lettered (aborted)")
	c.end("alpha/j2", 0, "succeeded")
	c.checkStopped()
	if len(c.violations) != 1 || c.violations[0].Kind != KindStopNotDead || c.violations[0].Subject != "alpha/j2" {
		t.Errorf("violations %v, want one %q for alpha/j2", c.violations, KindStopNotDead)
	}
}

// A pause holds from the first claim made once the starters' caches may have seen it: a claim made
// on a configuration still in a cache, whose write a slow call landed seconds later, is no violation
// (seed 22019 of all: a claim made 7.5 s after a pause landed 11.5 s after it); a claim made later
// is one.
func TestPausedStartCountsFromWhenItsClaimWasMade(t *testing.T) {
	for _, tt := range []struct {
		name    string
		madeAgo time.Duration // the claim's updatedAt, before the write lands 12 s after the pause
		want    int
	}{
		{"made within the cache, landed after it", 4500 * time.Millisecond, 0},
		{"made after the cache", 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := New(1, DefaultConfig()).check
				c.history["alpha"] = append(c.history["alpha"], limitAt{from: c.w.now(), limit: 5, flow: flow{paused: true}})
				time.Sleep(12 * time.Second)
				arn := "arn:aws:states:us-east-1:123456789012:execution:sample:alpha-j1-1"
				c.put(map[string]ddbtypes.AttributeValue{
					"status":       &ddbtypes.AttributeValueMemberS{Value: "starting"},
					"executionArn": &ddbtypes.AttributeValueMemberS{Value: arn},
					"updatedAt":    &ddbtypes.AttributeValueMemberS{Value: c.w.now().Add(-tt.madeAgo).Format(time.RFC3339Nano)},
				})
				c.checkPaused(&execution{arn: arn, name: "alpha-j1-1", meta: job.Meta{Type: "alpha", ID: "j1"}})
				if got := len(c.violations); got != tt.want {
					t.Errorf("violations %v, want %d", kinds(c.violations), tt.want)
				}
			})
		})
	}
}
