package simworld

import "testing"

// Another tenant's jobs naming the workload's batches (junk, the batch's size, another size, and
// forged router attributes) never change a batch: every one is refused as batch_not_owned, none
// runs or is recorded, and every batch still closes with its own jobs' counts. Seeds run until one
// whose interloper reached an open batch with each kind of job; all must keep every invariant.
func TestInterloperNeverChangesABatch(t *testing.T) {
	holdsOnPath(t, "interloper", 20, func(w *World) bool {
		return len(w.batches.interlopers) >= 4 && traced(w, "batch_not_owned")
	})
}
