package simworld

import "testing"

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
