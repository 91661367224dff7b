package simworld

import "testing"

// A job is its type, sender, key and id (docs/design.md, "Job identity across tenants"): the
// interloper sends jobs of its own reusing a workload job's type, key and id, shortly after it
// (interloperReuses). Every seed must keep every invariant, the workload's job running and ending
// once, and one must run both jobs. Without the sender in the limiter's names, one of the two is
// dropped as the other's copy (by SQS's deduplication, or as ExecutionAlreadyExists) and never
// ends.
func TestInterloperReusingAWorkloadJobsIdentityBothRun(t *testing.T) {
	holdsOnPath(t, "interloper", 20, func(w *World) bool {
		ran := map[string]bool{}
		for _, e := range w.sfn.order {
			ran[e.jk] = true
		}
		for _, p := range w.interloperReused {
			if ran[p[0]] && ran[p[1]] {
				return true
			}
		}
		return false
	})
}
