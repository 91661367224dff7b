package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
)

func eventsClient(t *testing.T, g *Gateway, appID string) *eventbridge.Client {
	t.Helper()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return eventbridge.New(eventbridge.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), AppID: appID, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
	})
}

func entry(source, detailType, detail string) ebtypes.PutEventsRequestEntry {
	e := ebtypes.PutEventsRequestEntry{}
	if source != "" {
		e.Source = aws.String(source)
	}
	if detailType != "" {
		e.DetailType = aws.String(detailType)
	}
	if detail != "" {
		e.Detail = aws.String(detail)
	}
	return e
}

// The gateway answers PutEvents as EventBridge does: valid entries are accepted and kept in order,
// invalid ones fail alone with EventBridge's code in the answer, and a call with too many entries
// or too many bytes fails as a whole.
func TestPutEvents(t *testing.T) {
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := eventsClient(t, g, "")
	at := time.Date(2026, 11, 27, 10, 0, 0, 500_000_000, time.UTC)
	first := entry("sfnlimit", "sfnlimit Batch Completed", `{"batch":"b1"}`)
	first.Time = aws.Time(at)
	out, err := c.PutEvents(t.Context(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
		first,
		entry("", "t", `{}`),
		entry("s", "", `{}`),
		entry("s", "t", ""),
		entry("s", "t", `{"unclosed": `),
		entry("s", "t", `[1, 2]`),
		{Source: aws.String("s"), DetailType: aws.String("second"), Detail: aws.String(`{"n": 2}`), EventBusName: aws.String("orders")},
	}})
	if err != nil {
		t.Fatalf("PutEvents() = %v", err)
	}
	if out.FailedEntryCount != 5 || len(out.Entries) != 7 {
		t.Fatalf("FailedEntryCount %d, %d entries; want 5 of 7", out.FailedEntryCount, len(out.Entries))
	}
	wantCodes := []string{"", "InvalidArgument", "InvalidArgument", "InvalidArgument", "MalformedDetail", "MalformedDetail", ""}
	for i, e := range out.Entries {
		if got := aws.ToString(e.ErrorCode); got != wantCodes[i] {
			t.Errorf("entry %d: ErrorCode %q (%s), want %q", i, got, aws.ToString(e.ErrorMessage), wantCodes[i])
		}
		if (aws.ToString(e.EventId) == "") != (wantCodes[i] != "") {
			t.Errorf("entry %d: EventId %q with ErrorCode %q", i, aws.ToString(e.EventId), aws.ToString(e.ErrorCode))
		}
	}
	if msg := aws.ToString(out.Entries[1].ErrorMessage); msg != "Parameter Source is not valid. Reason: Source is a required argument." {
		t.Errorf("missing Source: message %q", msg)
	}
	evs := g.Events()
	if len(evs) != 2 {
		t.Fatalf("Events() = %+v, want the 2 valid entries", evs)
	}
	if e := evs[0]; e.Source != "sfnlimit" || e.DetailType != "sfnlimit Batch Completed" || string(e.Detail) != `{"batch":"b1"}` ||
		e.Bus != "default" || !e.Time.Equal(at) || e.ID != aws.ToString(out.Entries[0].EventId) {
		t.Errorf("first event = %+v, want the first entry on the default bus at %v", e, at)
	}
	if e := evs[1]; e.DetailType != "second" || e.Bus != "orders" || time.Since(e.Time) > time.Minute {
		t.Errorf("second event = %+v, want the last entry on bus orders, stamped now", e)
	}
	if n := g.Calls()[Call{Service: "events", Operation: "PutEvents"}]; n != 1 {
		t.Errorf("PutEvents calls counted %d, want 1", n)
	}

	// Whole-call refusals.
	var eleven []ebtypes.PutEventsRequestEntry
	for range 11 {
		eleven = append(eleven, entry("s", "t", `{}`))
	}
	big := `{"pad":"` + strings.Repeat("x", MaxPutEventsBytes) + `"}`
	// Just under the limit: Source, DetailType and Detail add up to 256 KiB - 1 bytes.
	under := `{"pad":"` + strings.Repeat("x", MaxPutEventsBytes-1-len(`{"pad":""}`)-2) + `"}`
	for _, c2 := range []struct {
		name    string
		entries []ebtypes.PutEventsRequestEntry
		code    string
	}{
		{"no entries", []ebtypes.PutEventsRequestEntry{}, "ValidationException"},
		{"11 entries", eleven, "ValidationException"},
		{"over 256 KiB", []ebtypes.PutEventsRequestEntry{entry("s", "t", big)}, "ValidationException"},
		{"over 256 KiB in all", []ebtypes.PutEventsRequestEntry{entry("s", "t", under), entry("s", "t", `{}`)}, "ValidationException"},
		{"just under 256 KiB", []ebtypes.PutEventsRequestEntry{entry("s", "t", under)}, ""},
	} {
		before := len(g.Events())
		_, err := c.PutEvents(t.Context(), &eventbridge.PutEventsInput{Entries: c2.entries})
		var ae smithy.APIError
		switch {
		case c2.code == "" && err != nil:
			t.Errorf("%s: PutEvents() = %v, want it accepted", c2.name, err)
		case c2.code != "" && (!errors.As(err, &ae) || ae.ErrorCode() != c2.code):
			t.Errorf("%s: PutEvents() = %v, want %s", c2.name, err, c2.code)
		case c2.code != "" && len(g.Events()) != before:
			t.Errorf("%s: a refused call kept events", c2.name)
		}
	}
}

// Fault injection reaches PutEvents: a test's own rule fails the call, and the random faults fail
// entries in the answer (retryable InternalFailure), never an observer's.
func TestPutEventsFaults(t *testing.T) {
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := eventsClient(t, g, "")
	in := &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry("s", "t", `{}`), entry("s", "t", `{}`)}}

	g.SetFaults(func(target string) *Fault {
		if target == "AWSEvents.PutEvents" {
			return &Fault{Status: http.StatusBadRequest, Code: "AccessDeniedException", Message: "no"}
		}
		return nil
	})
	var ae smithy.APIError
	if _, err := c.PutEvents(t.Context(), in); !errors.As(err, &ae) || ae.ErrorCode() != "AccessDeniedException" {
		t.Errorf("PutEvents() with a fault rule = %v, want AccessDeniedException", err)
	}
	g.SetFaults(nil)

	g.InjectFaults(&Faults{PutEventsFailure: 1, Seed: 1})
	out, err := c.PutEvents(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	if out.FailedEntryCount != 2 || aws.ToString(out.Entries[0].ErrorCode) != "InternalFailure" {
		t.Errorf("PutEvents() with every entry failing: %d failed, first %q; want 2, InternalFailure", out.FailedEntryCount, aws.ToString(out.Entries[0].ErrorCode))
	}
	if n := g.Injected()[InjectedPutEventsFailure]; n != 2 {
		t.Errorf("Injected()[%s] = %d, want 2", InjectedPutEventsFailure, n)
	}
	if len(g.Events()) != 0 {
		t.Errorf("failed entries were kept: %+v", g.Events())
	}
	observer := eventsClient(t, g, ObserverAppID)
	if out, err := observer.PutEvents(t.Context(), in); err != nil || out.FailedEntryCount != 0 {
		t.Errorf("an observer's PutEvents: %v, %v failed; want none", err, fmt.Sprint(out.FailedEntryCount))
	}
	if len(g.Events()) != 2 {
		t.Errorf("Events() = %d, want the observer's 2", len(g.Events()))
	}
}
