package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// EventBridge PutEvents, answered by the gateway itself: the local stack has no event bus its
// functions' events could reach a reader through (moto accepts them and keeps nothing readable
// without rules and targets), so the gateway validates each entry as EventBridge does, keeps the
// accepted ones in order and lets tests and the demo read them (Events).
//
// What EventBridge checks (API reference, PutEvents and PutEventsResultEntry; User Guide,
// "Calculating Amazon EventBridge PutEvents event entry size"):
//   - 1 to 10 entries, else the whole call fails: ValidationException;
//   - the entries' total size under 256 KiB (an entry counts its Source, DetailType, Detail and each
//     of its Resources in UTF-8 bytes, plus 14 bytes for a Time), else the whole call fails:
//     ValidationException;
//   - per entry, Source, DetailType and Detail are required (InvalidArgument) and Detail must be a
//     JSON object (MalformedDetail): such an entry fails alone, in the answer's Entries at its
//     index, counted in FailedEntryCount, and the others are accepted.
const (
	MaxPutEventsEntries = 10
	MaxPutEventsBytes   = 256 * 1024
)

// Event is one event the gateway accepted from PutEvents.
type Event struct {
	ID string
	// Bus is the entry's EventBusName as given ("default" when it named none).
	Bus        string
	Source     string
	DetailType string
	Detail     json.RawMessage
	Resources  []string
	// Time is the entry's Time, or when the gateway received it, as EventBridge stamps an event
	// without one. Received is when the gateway received it.
	Time, Received time.Time
}

type eventLog struct {
	mu     sync.Mutex
	events []Event
}

// Events returns the events accepted so far, in the order they were accepted.
func (g *Gateway) Events() []Event {
	g.events.mu.Lock()
	defer g.events.mu.Unlock()
	return append([]Event(nil), g.events.events...)
}

// putEventsEntry is a PutEventsRequestEntry as the JSON protocol carries it.
type putEventsEntry struct {
	Source, DetailType, Detail, EventBusName *string
	Resources                                []string
	// Time is seconds since the epoch (the SDKs send a number, possibly with a fraction).
	Time *json.Number
}

func (e putEventsEntry) size() int {
	n := 0
	if e.Time != nil {
		n += 14
	}
	for _, s := range []*string{e.Source, e.DetailType, e.Detail} {
		if s != nil {
			n += len(*s) // Go strings are UTF-8 bytes
		}
	}
	for _, r := range e.Resources {
		n += len(r)
	}
	return n
}

type putEventsResultEntry struct {
	EventID      string `json:"EventId,omitempty"`
	ErrorCode    string `json:",omitempty"`
	ErrorMessage string `json:",omitempty"`
}

const eventsContentType = "application/x-amz-json-1.1"

// putEvents answers an AWSEvents.PutEvents call.
func (g *Gateway) putEvents(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "SerializationException", err.Error(), eventsContentType)
		return
	}
	var req struct{ Entries []putEventsEntry }
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "SerializationException", "Start of structure or map found where not expected: "+err.Error(), eventsContentType)
		return
	}
	switch n := len(req.Entries); {
	case n == 0:
		writeJSONError(w, http.StatusBadRequest, "ValidationException",
			"1 validation error detected: Value '[]' at 'entries' failed to satisfy constraint: Member must have length greater than or equal to 1", eventsContentType)
		return
	case n > MaxPutEventsEntries:
		writeJSONError(w, http.StatusBadRequest, "ValidationException", fmt.Sprintf(
			"1 validation error detected: Value '[PutEventsRequestEntry]' at 'entries' failed to satisfy constraint: Member must have length less than or equal to %d", MaxPutEventsEntries), eventsContentType)
		return
	}
	total := 0
	for _, e := range req.Entries {
		total += e.size()
	}
	if total >= MaxPutEventsBytes {
		writeJSONError(w, http.StatusBadRequest, "ValidationException", "Total size of the entries in the request is over the limit.", eventsContentType)
		return
	}
	injected := g.inject.entryFailures(r, len(req.Entries))
	now := time.Now()
	out := struct {
		FailedEntryCount int
		Entries          []putEventsResultEntry
	}{Entries: make([]putEventsResultEntry, len(req.Entries))}
	g.events.mu.Lock()
	defer g.events.mu.Unlock()
	for i, e := range req.Entries {
		code, msg := validateEntry(e)
		if code == "" && injected[i] {
			code, msg = "InternalFailure", "Internal Failure (injected by the local gateway)"
		}
		if code != "" {
			out.Entries[i] = putEventsResultEntry{ErrorCode: code, ErrorMessage: msg}
			out.FailedEntryCount++
			continue
		}
		ev := Event{
			ID: newRequestID(), Bus: "default", Source: *e.Source, DetailType: *e.DetailType,
			Detail: json.RawMessage(*e.Detail), Resources: e.Resources, Time: now, Received: now,
		}
		if e.EventBusName != nil && *e.EventBusName != "" {
			ev.Bus = *e.EventBusName
		}
		if e.Time != nil {
			if secs, err := e.Time.Float64(); err == nil {
				whole, frac := math.Modf(secs)
				ev.Time = time.Unix(int64(whole), int64(frac*1e9)).UTC()
			}
		}
		g.events.events = append(g.events.events, ev)
		out.Entries[i] = putEventsResultEntry{EventID: ev.ID}
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", eventsContentType)
	w.Header().Set("X-Amzn-Requestid", newRequestID())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// validateEntry returns the error code and message EventBridge answers an invalid entry with
// (moto 5.2.1 words them the same), or "".
func validateEntry(e putEventsEntry) (code, msg string) {
	required := func(name string, v *string) (string, string) {
		if v == nil || *v == "" {
			return "InvalidArgument", fmt.Sprintf("Parameter %s is not valid. Reason: %s is a required argument.", name, name)
		}
		return "", ""
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"Source", e.Source}, {"DetailType", e.DetailType}, {"Detail", e.Detail}} {
		if code, msg := required(f.name, f.v); code != "" {
			return code, msg
		}
	}
	var obj map[string]json.RawMessage
	if !utf8.ValidString(*e.Detail) || !strings.HasPrefix(strings.TrimSpace(*e.Detail), "{") || json.Unmarshal([]byte(*e.Detail), &obj) != nil {
		return "MalformedDetail", "Detail is malformed."
	}
	return "", ""
}
