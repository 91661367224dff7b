package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

// SQSLimits are the request sizes the gateway lets through to the SQS emulator. It refuses bigger
// ones as SQS does, whichever emulator is behind it: moto counts only bodies, in characters, and
// fauxqs ignores the gateway's settings. docs/emulators.md ("Request sizes") has the sources.
type SQSLimits struct {
	// MaxMessageBytes is the largest message SendMessage takes: body plus each message attribute's
	// name, data type and value, in bytes (0: not checked). Over it, SQS answers InvalidParameterValue.
	MaxMessageBytes int
	// MaxBatchBytes is the most the messages of one SendMessageBatch may add up to, counted the same
	// way (0: not checked). Over it, SQS refuses the whole request with BatchRequestTooLong.
	MaxBatchBytes int
}

// AWSSQSLimits are SQS's figures since August 2025: 1 MiB for a message and for a batch's total
// (internal/lambda/sqsbatch cites the AWS documentation). The gateway enforces them unless
// SetSQSLimits says otherwise.
func AWSSQSLimits() SQSLimits {
	return SQSLimits{MaxMessageBytes: sqsbatch.MaxMessageBytes, MaxBatchBytes: sqsbatch.MaxBatchBytes}
}

// SetSQSLimits replaces the enforced limits; SQSLimits{} turns the checks off. A test can set the
// 256 KiB of regions or queues that still have SQS's former limit.
func (g *Gateway) SetSQSLimits(l SQSLimits) { g.sqsLimits.Store(&l) }

func (g *Gateway) limits() SQSLimits {
	if l := g.sqsLimits.Load(); l != nil {
		return *l
	}
	return AWSSQSLimits()
}

// sqsError is an SQS error as both of its protocols carry it. SQS's JSON protocol names the error in
// "__type" and, being query-compatible, gives the legacy code in the x-amzn-query-error header,
// which the SDKs report as the error code.
type sqsError struct {
	jsonType  string // "__type" of the JSON protocol
	queryCode string // code of the query protocol and of x-amzn-query-error
	message   string
}

// batchTooLong is SQS's answer to a SendMessageBatch over its total, as AWS documents the error
// (SendMessageBatch API reference: BatchRequestTooLong, HTTP 400) and real SQS words it ("Batch
// requests cannot be longer than 1048576 bytes. You have sent 1200000 bytes.").
func batchTooLong(limit, total int) sqsError {
	return sqsError{
		jsonType:  "com.amazonaws.sqs#BatchRequestTooLong",
		queryCode: "AWS.SimpleQueueService.BatchRequestTooLong",
		message:   fmt.Sprintf("Batch requests cannot be longer than %d bytes. You have sent %d bytes.", limit, total),
	}
}

// messageTooLong is SQS's answer to a SendMessage over its largest message (HTTP 400,
// InvalidParameterValue, JSON type com.amazon.coral.service#InvalidParameterValueException).
func messageTooLong(limit int) sqsError {
	return sqsError{
		jsonType:  "com.amazon.coral.service#InvalidParameterValueException",
		queryCode: "InvalidParameterValue",
		message:   fmt.Sprintf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", limit),
	}
}

// sqsLimit refuses a SendMessage or SendMessageBatch over the limits as SQS would, and reports
// whether it did. Other requests, and requests it cannot read, go on to the emulator unchanged.
func (g *Gateway) sqsLimit(w http.ResponseWriter, r *http.Request, req request) bool {
	if req.operation != "SendMessage" && req.operation != "SendMessageBatch" {
		return false
	}
	l := g.limits()
	if (req.operation == "SendMessage" && l.MaxMessageBytes <= 0) || (req.operation == "SendMessageBatch" && l.MaxBatchBytes <= 0) {
		return false
	}
	if r.Body == nil {
		return false
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	var sizes []int // one per message
	switch req.protocol {
	case jsonProtocol:
		sizes, err = jsonMessageSizes(body, req.operation)
	case queryProtocol:
		sizes, err = queryMessageSizes(body, req.operation)
	default:
		return false
	}
	if err != nil {
		return false // the emulator answers a malformed request
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	var refuse *sqsError
	switch {
	case req.operation == "SendMessage" && total > l.MaxMessageBytes:
		e := messageTooLong(l.MaxMessageBytes)
		refuse = &e
	case req.operation == "SendMessageBatch" && total > l.MaxBatchBytes:
		// An entry over MaxMessageBytes alone, in a batch under MaxBatchBytes, is one SQS reports in
		// the response's Failed list; with SQS's figures (both 1 MiB) such a batch cannot exist.
		e := batchTooLong(l.MaxBatchBytes, total)
		refuse = &e
	}
	if refuse == nil {
		return false
	}
	g.logger.Info("gateway refused an SQS request over SQS's size limits", "operation", req.operation, "bytes", total, "code", refuse.queryCode)
	writeSQSError(w, req.protocol, *refuse)
	return true
}

// sqsAttr is a message attribute as the JSON protocol carries it ([]byte fields are base64).
type sqsAttr struct {
	DataType         string
	StringValue      string
	BinaryValue      []byte
	StringListValues []string
	BinaryListValues [][]byte
}

type sqsMessage struct {
	MessageBody       string
	MessageAttributes map[string]sqsAttr
}

// size counts a message as SQS documents it: the body and each message attribute's name, type and
// value, in bytes.
func (m sqsMessage) size() int {
	n := len(m.MessageBody)
	for name, a := range m.MessageAttributes {
		n += len(name) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
		for _, s := range a.StringListValues {
			n += len(s)
		}
		for _, b := range a.BinaryListValues {
			n += len(b)
		}
	}
	return n
}

func jsonMessageSizes(body []byte, op string) ([]int, error) {
	var in struct {
		sqsMessage
		Entries []sqsMessage
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if op == "SendMessage" {
		return []int{in.size()}, nil
	}
	sizes := make([]int, len(in.Entries))
	for i, e := range in.Entries {
		sizes[i] = e.size()
	}
	return sizes, nil
}

// queryMessageSizes reads the query protocol's form: MessageBody and MessageAttribute.N.{Name,
// Value.DataType, Value.StringValue, Value.BinaryValue}, each under SendMessageBatchRequestEntry.N.
// in a batch. Each entry's parts count toward the total; the sum is what matters.
func queryMessageSizes(body []byte, op string) ([]int, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, err
	}
	byEntry := map[string]int{}
	for key, vs := range form {
		if len(vs) == 0 {
			continue
		}
		entry, field := "", key
		if op == "SendMessageBatch" {
			rest, ok := strings.CutPrefix(key, "SendMessageBatchRequestEntry.")
			if !ok {
				continue
			}
			entry, field, _ = strings.Cut(rest, ".")
		}
		v := vs[0]
		switch {
		case field == "MessageBody":
			byEntry[entry] += len(v)
		case !strings.HasPrefix(field, "MessageAttribute."):
		case strings.HasSuffix(field, ".Name"), strings.HasSuffix(field, ".Value.DataType"), strings.HasSuffix(field, ".Value.StringValue"):
			byEntry[entry] += len(v)
		case strings.HasSuffix(field, ".Value.BinaryValue"):
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return nil, err
			}
			byEntry[entry] += len(b)
		}
	}
	sizes := make([]int, 0, len(byEntry))
	for _, n := range byEntry {
		sizes = append(sizes, n)
	}
	if len(sizes) == 0 {
		sizes = append(sizes, 0)
	}
	return sizes, nil
}

func writeSQSError(w http.ResponseWriter, p protocol, e sqsError) {
	if p == queryProtocol {
		writeQueryError(w, http.StatusBadRequest, e.queryCode, e.message)
		return
	}
	body, _ := json.Marshal(map[string]string{"__type": e.jsonType, "message": e.message})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", newRequestID())
	w.Header().Set("X-Amzn-Query-Error", e.queryCode+";Sender")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(body)
}
