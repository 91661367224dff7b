package job

import "fmt"

// ErrorCancelled is the error an execution is stopped with by the overflow rule cancel: a newer job
// of its key, from the same sender, took its place. A release that finds an execution ABORTED with it
// ends the job "cancelled" (not retried, not dead-lettered); any other stop is an operator's, and
// dead-letters the job as before.
const ErrorCancelled = "sfnlimit.Cancelled"

// CancelCause is the cause an execution stopped by the newer job of id is given: it names that job
// (never its input).
func CancelCause(id string) string {
	return fmt.Sprintf("superseded by job %s of the same key (overflow rule cancel)", id)
}
