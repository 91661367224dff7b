package simworld

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
)

// EventBridge's PutEvents, as the batches' completion events meet it (the "Sending events with
// PutEvents" page of the EventBridge User Guide, and the API reference):
//   - a call takes 1-10 entries; each needs Source, DetailType and a Detail that is a JSON object,
//     and is at most 256 KiB;
//   - a call refused whole (ThrottlingException, InternalException) accepts nothing; the SDK
//     retries those itself, so the world's errors stand for the last of its attempts;
//   - a call may answer 200 with some entries not accepted: FailedEntryCount counts them, and the
//     answer's Entries (as many as the request's, in its order) give each failed one an ErrorCode
//     and ErrorMessage, each accepted one an EventId. The SDK does not retry those: the caller must.

// BusFaults are the faults of EventBridge's PutEvents (class events).
type BusFaults struct {
	// Throttle: a call refused whole with ThrottlingException (past the SDK's retries).
	Throttle float64
	// EntryFailed: a call answered with FailedEntryCount 1, its entry refused with ErrorCode
	// InternalFailure.
	EntryFailed float64
	// Outage: the chance that a run has one EventBridge outage, 3-15 minutes in which every
	// call fails with InternalException.
	Outage float64
}

func (a BusFaults) merge(b BusFaults) BusFaults {
	return BusFaults{Throttle: a.Throttle + b.Throttle, EntryFailed: a.EntryFailed + b.EntryFailed, Outage: a.Outage + b.Outage}
}

// without turns off in a every fault b has on.
func (a BusFaults) without(b BusFaults) BusFaults {
	z := func(x, y float64) float64 {
		if y != 0 {
			return 0
		}
		return x
	}
	return BusFaults{Throttle: z(a.Throttle, b.Throttle), EntryFailed: z(a.EntryFailed, b.EntryFailed), Outage: z(a.Outage, b.Outage)}
}

// faultEntryFailed: a PutEvents answered with its entry refused (FailedEntryCount).
const faultEntryFailed fault = 64

// busFault draws the fault of one PutEvents call from r (the world's draw for the call).
func (w *World) busFault(r float64) fault {
	f := w.cfg.Faults.Bus
	switch {
	case r < f.Throttle:
		return faultThrottle
	case r < f.Throttle+f.EntryFailed:
		return faultEntryFailed
	}
	return faultNone
}

// bus is the account's default event bus: what it accepted, and its outage.
type bus struct {
	accepted         []busEvent
	downFrom, downTo time.Time
	seq              int
}

// busEvent is one completion event the bus accepted.
type busEvent struct {
	at     time.Time
	detail batchend.Detail
	// sender is the invocation that sent it; lost says its answer never reached it (killed
	// after the call).
	sender *proc
	lost   bool
}

func (b *bus) down(now time.Time) bool {
	return !b.downFrom.IsZero() && !now.Before(b.downFrom) && now.Before(b.downTo)
}

type eventsClient struct{ w *World }

func (e eventsClient) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	var key strings.Builder
	for _, x := range in.Entries {
		var d batchend.Detail
		_ = json.Unmarshal([]byte(aws.ToString(x.Detail)), &d)
		key.WriteString(d.Batch + " ")
	}
	c, err := e.w.gate(ctx, "events.PutEvents", key.String())
	if err != nil {
		return nil, err
	}
	out, err := e.w.put(c, in)
	return after(c, out, err)
}

// put is PutEvents at the bus, under the call's fault.
func (w *World) put(c *call, in *eventbridge.PutEventsInput) (*eventbridge.PutEventsOutput, error) {
	b := &w.batches.bus
	if n := len(in.Entries); n < 1 || n > 10 {
		return nil, apiError("ValidationException", fmt.Sprintf("1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length between 1 and 10 (%d)", n))
	}
	if b.down(w.now()) {
		w.trace("events", "events.PutEvents refused: EventBridge outage")
		return nil, &ebtypes.InternalException{Message: aws.String("simulated: EventBridge outage")}
	}
	if c.fault == faultThrottle {
		w.trace("events", "events.PutEvents throttled")
		return nil, apiError("ThrottlingException", "Rate exceeded (simulated, after the SDK's retries)")
	}
	out := &eventbridge.PutEventsOutput{}
	for _, x := range in.Entries {
		res := w.acceptEntry(c, x)
		if res.ErrorCode != nil {
			out.FailedEntryCount++
		}
		out.Entries = append(out.Entries, res)
	}
	return out, nil
}

// acceptEntry accepts one entry, or answers why not.
func (w *World) acceptEntry(c *call, x ebtypes.PutEventsRequestEntry) ebtypes.PutEventsResultEntry {
	b := &w.batches.bus
	refuse := func(code, msg string) ebtypes.PutEventsResultEntry {
		w.trace("events", "events.PutEvents entry refused: %s", code)
		return ebtypes.PutEventsResultEntry{ErrorCode: aws.String(code), ErrorMessage: aws.String(msg)}
	}
	var d batchend.Detail
	switch {
	case aws.ToString(x.Source) == "" || aws.ToString(x.DetailType) == "":
		return refuse("InvalidArgument", "Parameter(s) Source, DetailType must be specified")
	case len(aws.ToString(x.Detail)) > 256*1024:
		return refuse("InvalidArgument", "Total size of the entries in the request is over the limit")
	case json.Unmarshal([]byte(aws.ToString(x.Detail)), &d) != nil:
		return refuse("MalformedDetail", "Detail is malformed")
	case c.fault == faultEntryFailed:
		return refuse("InternalFailure", "simulated: the entry was not accepted")
	}
	b.seq++
	lost := c.kill == killAfter
	b.accepted = append(b.accepted, busEvent{at: w.now(), detail: d, sender: c.proc, lost: lost})
	w.putEvents++
	w.trace("batch "+d.Batch, "events.PutEvents accepted %s %s of batch %s from %s (answer lost: %v)", aws.ToString(x.Source), aws.ToString(x.DetailType), d.Batch, c.proc.name, lost)
	return ebtypes.PutEventsResultEntry{EventId: aws.String(fmt.Sprintf("ev-%06d", b.seq))}
}
