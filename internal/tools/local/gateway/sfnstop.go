package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// sfnStops keeps the error and cause each StopExecution gave, which moto 5.2.1 drops (its
// stop_execution stops the execution with an empty error and cause), and puts them back into the
// DescribeExecution answers of the executions they stopped, as Step Functions keeps them. The
// limiter reads a stop's error from DescribeExecution: a release tells a stop by the overflow rule
// cancel (error sfnlimit.Cancelled) from an operator's stop by it.
type sfnStops struct {
	mu sync.Mutex
	// stops are the error and cause of the first StopExecution that succeeded, per execution ARN:
	// the one that closed it, when it was running.
	stops map[string]stopReason
}

type stopReason struct{ Error, Cause string }

// serve handles StopExecution and DescribeExecution (JSON protocol) and reports whether it did.
func (s *sfnStops) serve(w http.ResponseWriter, r *http.Request, operation string, up *upstream) bool {
	if (operation != "StopExecution" && operation != "DescribeExecution") || r.Body == nil {
		return false
	}
	body, ok := keepBody(w, r)
	if !ok {
		return true
	}
	var in struct {
		ExecutionArn string `json:"executionArn"`
		Error        string `json:"error"`
		Cause        string `json:"cause"`
	}
	_ = json.Unmarshal(body, &in)
	rec := forward(up, r)
	if rec.Code != http.StatusOK || in.ExecutionArn == "" {
		replay(w, rec)
		return true
	}
	if operation == "StopExecution" {
		s.mu.Lock()
		if s.stops == nil {
			s.stops = map[string]stopReason{}
		}
		// The first stop that succeeded decides, even with no reasons (an operator's): a later
		// one finds the execution closed and changes nothing, on AWS.
		if _, ok := s.stops[in.ExecutionArn]; !ok {
			s.stops[in.ExecutionArn] = stopReason{in.Error, in.Cause}
		}
		s.mu.Unlock()
		replay(w, rec)
		return true
	}
	s.mu.Lock()
	why, ok := s.stops[in.ExecutionArn]
	s.mu.Unlock()
	var out map[string]any
	if !ok || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out["status"] != "ABORTED" {
		replay(w, rec)
		return true
	}
	// Only an ABORTED execution is given its stop's reasons: a stop that found the execution
	// already closed changed nothing.
	if e, _ := out["error"].(string); e == "" && why.Error != "" {
		out["error"] = why.Error
	}
	if c, _ := out["cause"].(string); c == "" && why.Cause != "" {
		out["cause"] = why.Cause
	}
	b, err := json.Marshal(out)
	if err != nil {
		replay(w, rec)
		return true
	}
	rec.Body.Reset()
	rec.Body.Write(b)
	rec.Header().Set("Content-Length", strconv.Itoa(len(b)))
	replay(w, rec)
	return true
}

// keepBody reads a JSON-protocol request's body and puts it back for the proxy; false when it could
// not be read, and the client was answered so.
func keepBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "SerializationException", "read request body: "+err.Error(), jsonType)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}
