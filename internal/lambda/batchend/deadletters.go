package batchend

import (
	"context"
	"errors"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
)

type deadLetterer interface {
	Send(ctx context.Context, e deadletter.Entry) error
}

// DeadLetters sends dead letters through Next, recording each job's end in its batch first (as
// dead-lettered, or refused when the entry says so): every function that dead-letters a job does
// so through it, so none can end a batch's job without counting it.
type DeadLetters struct {
	Next    deadLetterer
	Tracker *Tracker
}

// Send records e's job in its batch (Ended; unless e.BatchRecorded), then sends e. A failed record sends nothing: the caller
// retries the whole, which the ledger answers as a duplicate if the record had been written. A
// record that closed the batch and could not send its completion event (ErrAnnouncementPending)
// sends the dead letter all the same, and leaves the event to the sweep: a refused job's retries
// are its general-queue message's deliveries, and after maxReceiveCount of them SQS would move the
// message to the dead-letter queue without a reason, with the event never sent (issue 22, defect 4).
func (d DeadLetters) Send(ctx context.Context, e deadletter.Entry) error {
	outcome := batch.DeadLettered
	if e.Refused {
		outcome = batch.Refused
	}
	if !e.BatchRecorded {
		end := End{Batch: e.Batch, Type: e.Type, Key: e.Key, ID: e.JobID, Redrive: e.Redrive, Outcome: outcome}
		if err := d.Tracker.Ended(ctx, end); err != nil && !errors.Is(err, ErrAnnouncementPending) {
			return err
		}
	}
	return d.Next.Send(ctx, e)
}
