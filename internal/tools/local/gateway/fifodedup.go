package gateway

// FIFO deduplication as SQS applies it, in front of emulators that do not.
//
// SQS: "If a message with a particular message deduplication ID is sent successfully, any messages sent
// with the same message deduplication ID are accepted successfully but aren't delivered during the
// 5-minute deduplication interval" (SendMessage, MessageDeduplicationId), and "Amazon SQS continues
// tracking the deduplication ID even after the message has been received and deleted" (SQS Developer
// Guide, FIFO queue key terms). With content-based deduplication the id is the SHA-256 of the body;
// an explicit id overrides it. With DeduplicationScope messageGroup the interval applies per message
// group, else per queue.
//
// moto 5.2.1 drops a copy only while a message with its id is still in the queue (sent less than 300 s
// before), in any message group: a copy sent after the first was deleted is enqueued, and one sent to
// another group of a messageGroup-scoped queue is dropped. fauxqs 2.4.1 keeps ids 5 minutes after
// deletion (up to 10,000 of them) but in any group. The gateway therefore decides itself, and keeps
// the emulator from deciding again: a send it lets through whose id the emulator may still hold (it
// forwarded that id to the queue less than 5 minutes ago) goes with a fresh id.
//
// docs/emulators.md, "FIFO deduplication", says what each emulator does and what this enforces.

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDedupWindow is SQS's FIFO deduplication interval.
const DefaultDedupWindow = 5 * time.Minute

// emulatorDedupWindow is how long moto 5.2.1 and fauxqs 2.4.1 may drop a copy of an id themselves.
const emulatorDedupWindow = 5 * time.Minute

// SetDedupWindow sets the FIFO deduplication interval the gateway applies (d <= 0: SQS's 5 minutes).
// Tests shorten it so they need not wait five minutes to see a copy enqueued again.
func (g *Gateway) SetDedupWindow(d time.Duration) { g.dedup.window.Store(int64(max(d, 0))) }

// DedupWindow returns the FIFO deduplication interval the gateway applies.
func (g *Gateway) DedupWindow() time.Duration { return g.dedup.windowOf() }

// fifoDedup is the gateway's FIFO deduplication state; the zero value is ready to use.
type fifoDedup struct {
	window atomic.Int64 // nanoseconds; 0: DefaultDedupWindow

	mu     sync.Mutex
	queues map[string]queueDedup // learned from CreateQueue and SetQueueAttributes, by queue path
	sent   map[string]*dedupEntry
	sentQ  []expiring
	fwd    map[string]time.Time // queue path + id forwarded to the emulator -> when
	fwdQ   []expiring
	seq    uint64
}

// queueDedup is how a queue deduplicates. A queue the gateway did not see created or changed is
// taken as SQS's default: queue scope (content-based deduplication is applied to sends with no id;
// the emulator refuses them when the queue does not have it).
type queueDedup struct {
	noContentBased bool
	groupScope     bool
}

// dedupEntry is one deduplication id accepted (or being sent) within its scope.
type dedupEntry struct {
	done      chan struct{} // closed once the send that claimed it answered
	ok        bool          // the send was accepted
	at        time.Time
	messageID string
	sequence  string
}

type expiring struct {
	key string
	at  time.Time
}

// sendEntry is the part of a SendMessage request (or of a SendMessageBatch entry) deduplication reads.
type sendEntry struct {
	ID                     string                   `json:"Id"`
	QueueURL               string                   `json:"QueueUrl"`
	MessageBody            *string                  `json:"MessageBody"`
	MessageGroupID         string                   `json:"MessageGroupId"`
	MessageDeduplicationID string                   `json:"MessageDeduplicationId"`
	MessageAttributes      map[string]attributeJSON `json:"MessageAttributes"`
}

type attributeJSON struct {
	DataType    string  `json:"DataType"`
	StringValue *string `json:"StringValue"`
	BinaryValue []byte  `json:"BinaryValue"`
}

func (d *fifoDedup) windowOf() time.Duration {
	if w := time.Duration(d.window.Load()); w > 0 {
		return w
	}
	return DefaultDedupWindow
}

// serve handles the SQS JSON-protocol calls deduplication needs to see, and reports whether it did;
// other calls (and query-protocol ones) are forwarded by the caller as they are.
func (d *fifoDedup) serve(w http.ResponseWriter, r *http.Request, operation string, up *upstream) bool {
	switch operation {
	case "CreateQueue", "SetQueueAttributes", "DeleteQueue", "SendMessage", "SendMessageBatch":
	default:
		return false
	}
	if r.Body == nil {
		return false
	}
	body, ok := keepBody(w, r)
	if !ok {
		return true
	}
	switch operation {
	case "SendMessage":
		return d.sendMessage(w, r, body, up)
	case "SendMessageBatch":
		return d.sendMessageBatch(w, r, body, up)
	}
	rec := forward(up, r)
	if rec.Code == http.StatusOK {
		d.learn(operation, body, rec.Body.Bytes())
	}
	replay(w, rec)
	return true
}

const jsonType = "application/x-amz-json-1.0"

// learn records a queue's deduplication settings from a CreateQueue or SetQueueAttributes that
// succeeded, and forgets a deleted queue.
func (d *fifoDedup) learn(operation string, req, resp []byte) {
	var in struct {
		QueueURL   string            `json:"QueueUrl"`
		Attributes map[string]string `json:"Attributes"`
	}
	if json.Unmarshal(req, &in) != nil {
		return
	}
	if operation == "CreateQueue" {
		var out struct {
			QueueURL string `json:"QueueUrl"`
		}
		if json.Unmarshal(resp, &out) != nil {
			return
		}
		in.QueueURL = out.QueueURL
	}
	q := queuePath(in.QueueURL)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.queues == nil {
		d.queues = map[string]queueDedup{}
	}
	if operation == "DeleteQueue" {
		delete(d.queues, q)
		for k := range d.sent {
			if strings.HasPrefix(k, q+"\x00") {
				delete(d.sent, k)
			}
		}
		return
	}
	cur := d.queues[q]
	if v, ok := in.Attributes["ContentBasedDeduplication"]; ok {
		cur.noContentBased = v != "true"
	}
	if v, ok := in.Attributes["DeduplicationScope"]; ok {
		cur.groupScope = v == "messageGroup"
	}
	d.queues[q] = cur
}

// isFIFO reports whether a queue URL names a FIFO queue (SQS requires the ".fifo" suffix).
func isFIFO(queueURL string) bool { return strings.HasSuffix(queueURL, ".fifo") }

// queuePath identifies a queue by its URL's path ("/{account}/{name}"): clients may reach the same
// queue through different hosts.
func queuePath(queueURL string) string {
	if u, err := url.Parse(queueURL); err == nil && u.Path != "" {
		return u.Path
	}
	return queueURL
}

// keyOf returns the deduplication key of a send within its scope and the id the emulator would
// deduplicate it by; ok is false when the send has no id and the queue no content-based
// deduplication (the emulator refuses it).
func (d *fifoDedup) keyOf(q string, e sendEntry) (key, id string, ok bool) {
	d.mu.Lock()
	attrs := d.queues[q]
	d.mu.Unlock()
	id = e.MessageDeduplicationID
	if id == "" {
		if attrs.noContentBased || e.MessageBody == nil {
			return "", "", false
		}
		sum := sha256.Sum256([]byte(*e.MessageBody))
		id = hex.EncodeToString(sum[:])
	}
	group := ""
	if attrs.groupScope {
		group = e.MessageGroupID
	}
	return q + "\x00" + group + "\x00" + id, id, true
}

// claim takes the keys (sorted, distinct) for one request: for each, the entry of an accepted copy
// within the window (dup), or a new entry this request must settle with accept or release (mine).
// A key another request is sending waits for that request's answer; keys are taken in order, so two
// requests never wait for each other.
func (d *fifoDedup) claim(r *http.Request, keys []string) (dup, mine map[string]*dedupEntry, err error) {
	dup, mine = map[string]*dedupEntry{}, map[string]*dedupEntry{}
	for _, k := range keys {
		for {
			d.mu.Lock()
			now := time.Now()
			d.prune(now)
			e := d.sent[k]
			if e != nil && !e.settled() {
				d.mu.Unlock()
				select {
				case <-e.done:
					continue
				case <-r.Context().Done():
					for k, m := range mine {
						d.release(k, m)
					}
					return nil, nil, r.Context().Err()
				}
			}
			if e != nil && e.ok && now.Sub(e.at) < d.windowOf() {
				dup[k] = e
			} else {
				if d.sent == nil {
					d.sent = map[string]*dedupEntry{}
				}
				m := &dedupEntry{done: make(chan struct{})}
				d.sent[k] = m
				mine[k] = m
			}
			d.mu.Unlock()
			break
		}
	}
	return dup, mine, nil
}

func (e *dedupEntry) settled() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// accept records the send of a claimed key as accepted now.
func (d *fifoDedup) accept(k string, e *dedupEntry, messageID, sequence string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e.ok, e.at, e.messageID, e.sequence = true, time.Now(), messageID, sequence
	d.sentQ = append(d.sentQ, expiring{key: k, at: e.at})
	close(e.done)
}

// release gives a claimed key back: its send failed, so a copy sent next is the first.
func (d *fifoDedup) release(k string, e *dedupEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sent[k] == e {
		delete(d.sent, k)
	}
	if !e.settled() {
		close(e.done)
	}
}

// prune forgets ids older than the window and forwards older than the emulators' own window.
func (d *fifoDedup) prune(now time.Time) {
	window := d.windowOf()
	for len(d.sentQ) > 0 && now.Sub(d.sentQ[0].at) >= window {
		x := d.sentQ[0]
		if e := d.sent[x.key]; e != nil && e.settled() && e.at.Equal(x.at) {
			delete(d.sent, x.key)
		}
		d.sentQ = d.sentQ[1:]
	}
	for len(d.fwdQ) > 0 && now.Sub(d.fwdQ[0].at) >= emulatorDedupWindow {
		x := d.fwdQ[0]
		if at, ok := d.fwd[x.key]; ok && at.Equal(x.at) {
			delete(d.fwd, x.key)
		}
		d.fwdQ = d.fwdQ[1:]
	}
}

// upstreamID returns the deduplication id to forward a send with: "" to keep its own, or a fresh one
// when the emulator may still hold its id from an earlier forward and would drop it where SQS does
// not (another message group, or after a shortened window).
func (d *fifoDedup) upstreamID(q, id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	k := q + "\x00" + id
	if d.fwd == nil {
		d.fwd = map[string]time.Time{}
	}
	_, held := d.fwd[k]
	fresh := ""
	if held {
		d.seq++
		sum := sha256.Sum256([]byte(id))
		fresh = "gateway~" + strconv.FormatUint(d.seq, 10) + "~" + hex.EncodeToString(sum[:12])
		k = q + "\x00" + fresh
	}
	d.fwd[k] = now
	d.fwdQ = append(d.fwdQ, expiring{key: k, at: now})
	return fresh
}

// sendMessage deduplicates one SendMessage to a FIFO queue.
func (d *fifoDedup) sendMessage(w http.ResponseWriter, r *http.Request, body []byte, up *upstream) bool {
	var e sendEntry
	if json.Unmarshal(body, &e) != nil || !isFIFO(e.QueueURL) {
		return false
	}
	q := queuePath(e.QueueURL)
	key, id, ok := d.keyOf(q, e)
	if !ok {
		return false
	}
	dup, mine, err := d.claim(r, []string{key})
	if err != nil {
		writeJSONError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "gateway: "+err.Error(), jsonType)
		return true
	}
	if p := dup[key]; p != nil {
		writeJSON(w, duplicateResult(e, p))
		return true
	}
	m := mine[key]
	if fresh := d.upstreamID(q, id); fresh != "" {
		setBody(r, withDedupID(body, fresh))
	}
	rec := forward(up, r)
	var out struct {
		MessageID      string `json:"MessageId"`
		SequenceNumber string `json:"SequenceNumber"`
	}
	if rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &out) == nil {
		d.accept(key, m, out.MessageID, out.SequenceNumber)
	} else {
		d.release(key, m)
	}
	replay(w, rec)
	return true
}

// sendMessageBatch deduplicates a SendMessageBatch to a FIFO queue: copies of ids accepted within
// the window, and later entries repeating an earlier entry's id, succeed without being forwarded.
func (d *fifoDedup) sendMessageBatch(w http.ResponseWriter, r *http.Request, body []byte, up *upstream) bool {
	var in struct {
		QueueURL string            `json:"QueueUrl"`
		Entries  []json.RawMessage `json:"Entries"`
	}
	if json.Unmarshal(body, &in) != nil || !isFIFO(in.QueueURL) || len(in.Entries) == 0 {
		return false
	}
	q := queuePath(in.QueueURL)
	entries := make([]sendEntry, len(in.Entries))
	keys := make([]string, len(in.Entries))
	ids := make([]string, len(in.Entries))
	var distinct []string
	for i, raw := range in.Entries {
		var ok bool
		if json.Unmarshal(raw, &entries[i]) != nil {
			return false
		}
		if keys[i], ids[i], ok = d.keyOf(q, entries[i]); !ok {
			return false // the emulator refuses the entry; nothing to deduplicate
		}
		distinct = append(distinct, keys[i])
	}
	sort.Strings(distinct)
	distinct = uniqueSorted(distinct)
	dup, mine, err := d.claim(r, distinct)
	if err != nil {
		writeJSONError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "gateway: "+err.Error(), jsonType)
		return true
	}
	first := map[string]int{} // key -> the entry that sends it
	var forwarded []json.RawMessage
	for i, k := range keys {
		if dup[k] != nil {
			continue
		}
		if _, seen := first[k]; seen {
			continue
		}
		first[k] = i
		raw := in.Entries[i]
		if fresh := d.upstreamID(q, ids[i]); fresh != "" {
			raw = withDedupID(raw, fresh)
		}
		forwarded = append(forwarded, raw)
	}
	var out batchResult
	if len(forwarded) > 0 {
		if len(forwarded) != len(in.Entries) || !sameEntries(forwarded, in.Entries) {
			setBody(r, withEntries(body, forwarded))
		}
		rec := forward(up, r)
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
			// The whole request failed (or answered what the gateway cannot read): so does the batch.
			for k, m := range mine {
				d.release(k, m)
			}
			replay(w, rec)
			return true
		}
	}
	succeeded := map[string]map[string]any{}
	failed := map[string]map[string]any{}
	for _, s := range out.Successful {
		succeeded[fmt.Sprint(s["Id"])] = s
	}
	for _, f := range out.Failed {
		failed[fmt.Sprint(f["Id"])] = f
	}
	for k, m := range mine {
		e := entries[first[k]]
		if s, ok := succeeded[e.ID]; ok {
			d.accept(k, m, str(s["MessageId"]), str(s["SequenceNumber"]))
		} else {
			d.release(k, m)
		}
	}
	for i, k := range keys {
		e := entries[i]
		if p := dup[k]; p != nil {
			out.Successful = append(out.Successful, duplicateResult(e, p))
			continue
		}
		f := first[k]
		if f == i {
			continue // forwarded: the emulator's answer stands
		}
		// A later entry of the batch with an earlier entry's id shares that entry's fate.
		if s, ok := succeeded[entries[f].ID]; ok {
			out.Successful = append(out.Successful, duplicateResult(e, &dedupEntry{messageID: str(s["MessageId"]), sequence: str(s["SequenceNumber"])}))
		} else if fl, ok := failed[entries[f].ID]; ok {
			c := map[string]any{}
			for k, v := range fl {
				c[k] = v
			}
			c["Id"] = e.ID
			out.Failed = append(out.Failed, c)
		}
	}
	if out.Successful == nil {
		out.Successful = []map[string]any{}
	}
	if out.Failed == nil {
		out.Failed = []map[string]any{}
	}
	writeJSON(w, out)
	return true
}

type batchResult struct {
	Successful []map[string]any `json:"Successful"`
	Failed     []map[string]any `json:"Failed"`
}

// duplicateResult is SQS's answer to a copy it does not enqueue: success, with the first copy's
// message id and sequence number and this copy's checksums (the SDKs check MD5OfMessageBody).
func duplicateResult(e sendEntry, first *dedupEntry) map[string]any {
	res := map[string]any{"MessageId": first.messageID}
	if e.ID != "" {
		res["Id"] = e.ID
	}
	if e.MessageBody != nil {
		sum := md5.Sum([]byte(*e.MessageBody))
		res["MD5OfMessageBody"] = hex.EncodeToString(sum[:])
	}
	if len(e.MessageAttributes) > 0 {
		res["MD5OfMessageAttributes"] = md5OfAttributes(e.MessageAttributes)
	}
	if first.sequence != "" {
		res["SequenceNumber"] = first.sequence
	}
	return res
}

// md5OfAttributes is SQS's MD5OfMessageAttributes: the attributes sorted by name, each encoded as
// its name, data type, transport type (1 string, 2 binary) and value, lengths as 4-byte big-endian
// prefixes.
func md5OfAttributes(attrs map[string]attributeJSON) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	h := md5.New()
	field := func(b []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, n := range names {
		a := attrs[n]
		field([]byte(n))
		field([]byte(a.DataType))
		if a.StringValue != nil {
			h.Write([]byte{1})
			field([]byte(*a.StringValue))
		} else {
			h.Write([]byte{2})
			field(a.BinaryValue)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// forward sends the request to the emulator and keeps its answer for the gateway to read.
func forward(up *upstream, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	up.proxy.ServeHTTP(rec, r)
	return rec
}

// replay writes a kept answer.
func replay(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, vs := range rec.Header() {
		if k == "Content-Length" {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, "InternalFailure", "gateway: "+err.Error(), jsonType)
		return
	}
	w.Header().Set("Content-Type", jsonType)
	w.Header().Set("X-Amzn-Requestid", newRequestID())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func setBody(r *http.Request, b []byte) {
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.Header.Del("Content-Length")
}

// withDedupID returns a JSON object with its MessageDeduplicationId replaced.
func withDedupID(raw []byte, id string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	m["MessageDeduplicationId"], _ = json.Marshal(id)
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

// withEntries returns a SendMessageBatch request with its entries replaced.
func withEntries(body []byte, entries []json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	m["Entries"], _ = json.Marshal(entries)
	b, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return b
}

func sameEntries(a, b []json.RawMessage) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func uniqueSorted(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}
