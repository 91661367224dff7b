package simworld

import "testing"

// A job is its type, key and id (docs/design.md, "Job identity across tenants"): the workload's
// producers sometimes name a job as another key's job of its type was named, shortly after it
// (reuseOtherKeysID; Faults.SharedIDs, in the gate profile). Every seed must keep every invariant, each of those jobs running and ending
// once, and one must run both jobs of a shared id. Without the key in the limiter's names, the
// second is dropped as the first's copy (by SQS's deduplication, or as ExecutionAlreadyExists)
// and never ends.
func TestSharedIDsOfTwoKeysBothRun(t *testing.T) {
	holdsOnPath(t, "shared", 30, func(w *World) bool {
		ran := map[string]map[string]bool{} // type/id -> keys with an execution
		for _, e := range w.sfn.order {
			if e.meta.Key == "" {
				continue
			}
			k := e.meta.Type + "/" + e.meta.ID
			if ran[k] == nil {
				ran[k] = map[string]bool{}
			}
			ran[k][e.meta.Key] = true
		}
		for _, keys := range ran {
			if len(keys) > 1 {
				return true
			}
		}
		return false
	})
}
