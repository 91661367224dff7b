// Package ops is the logic of the sfnlimit command line: submitting jobs, reading the limiter's
// status, tuning live configuration, listing and redriving dead letters, and finding a job. Each
// operation takes narrow interfaces of the AWS clients it uses, so it runs the same against a
// deployed stack and the local one; the commands in cmd/sfnlimit only parse flags and print.
package ops

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

// placeholderID stands in for the SQS message id the router gives a job without an id (a UUID has
// 36 characters), so the size check counts it.
const placeholderID = "00000000-0000-0000-0000-000000000000"

// Line is one job to send: its body and where it came from.
type Line struct {
	// No is the line number in the input (1-based); 0 for a job given by flags.
	No   int
	Body []byte
	Type string
	Key  string // the job's key ("" the default key): a job is its type, key and id
	ID   string // "" when the body has none (the router then uses the SQS message id)
	// BatchSize is the batchSize the line carries itself (0: none).
	BatchSize int
}

// Invalid is a line that is not sent, and why.
type Invalid struct {
	No     int    `json:"line"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// TypeChecker says whether a type has a limit; nil skips the check. The router refuses a job whose
// type has none (unknown_type).
type TypeChecker func(ctx context.Context, typ string) error

// ResolverCheck checks types against the effective configuration, as the router does.
func ResolverCheck(r *config.Resolver) TypeChecker {
	return func(ctx context.Context, typ string) error {
		_, err := r.Get(ctx, typ)
		if errors.Is(err, config.ErrUnknownType) {
			return &job.Error{Reason: job.ReasonUnknownType, Detail: err.Error()}
		}
		return err
	}
}

// Parsed is the result of reading jobs: what will be sent and what will not.
type Parsed struct {
	Jobs    []Line
	Invalid []Invalid
	// Duplicates counts lines that repeat the type, key and id of an earlier line: they are sent, and
	// the limiter runs such a job once.
	Duplicates int
	// NoID counts jobs without an id: each is a new job, even when sent again.
	NoID int
}

// Parser reads jobs to submit.
type Parser struct {
	// Check, if not nil, checks each job's type has a limit.
	Check TypeChecker
	// Priority, if not "", is the priority of every job without one of its own (no "priority", or
	// null): a name or a number, as job.PriorityFromString reads it (submit --priority). A job's
	// own priority wins.
	Priority string
	// Batch, if not "", is put in every job ("batch"): submit --batch. A job naming another batch
	// is an error (ErrOtherBatch): nothing is sent.
	Batch string
}

// ErrOtherBatch: submit --batch was given jobs that name another batch.
var ErrOtherBatch = errors.New("a job names another batch")

// ParseJobs reads JSON Lines (one job a line, blank lines skipped) and validates each with the
// router's rules (internal/lambda/job) and, if check is not nil, the type's limit. Lines of any
// length are read; an error is returned only when r fails or check fails for another reason than a
// refusal.
func ParseJobs(ctx context.Context, r io.Reader, check TypeChecker) (Parsed, error) {
	return Parser{Check: check}.ParseJobs(ctx, r)
}

// ParseJobs reads JSON Lines as the function ParseJobs does, giving jobs without a priority the
// parser's.
func (ps Parser) ParseJobs(ctx context.Context, r io.Reader) (Parsed, error) {
	var p Parsed
	br := bufio.NewReaderSize(r, 1<<20)
	seen := map[string]int{}
	now := time.Now()
	for no := 1; ; no++ {
		raw, err := br.ReadBytes('\n')
		if len(raw) > 0 {
			body := bytes.TrimSpace(raw)
			if len(body) > 0 {
				body, err := ps.prepare(no, body)
				if err != nil {
					return p, err
				}
				if err := p.add(ctx, no, body, now, ps.Check, seen); err != nil {
					return p, err
				}
			}
		}
		if err == io.EOF {
			return p, nil
		}
		if err != nil {
			return p, fmt.Errorf("read jobs: %w", err)
		}
	}
}

// ParseJob validates one job given as a body (for `submit --type`).
func ParseJob(ctx context.Context, body []byte, check TypeChecker) (Parsed, error) {
	return Parser{Check: check}.ParseJob(ctx, body)
}

// ParseJob validates one job given as a body, giving it the parser's priority if it has none.
func (ps Parser) ParseJob(ctx context.Context, body []byte) (Parsed, error) {
	var p Parsed
	body, err := ps.prepare(0, body)
	if err != nil {
		return p, err
	}
	err = p.add(ctx, 0, body, time.Now(), ps.Check, map[string]int{})
	return p, err
}

// prepare gives a job's body the parser's priority and batch.
func (ps Parser) prepare(no int, body []byte) ([]byte, error) {
	body = ps.withPriority(body)
	if ps.Batch == "" {
		return body, nil
	}
	return withBatch(no, body, ps.Batch)
}

// withBatch puts "batch": id in a job's body. A body that names batch id already is left as it
// is; one that names another is ErrOtherBatch. A body that is not a JSON object is left for
// job.Parse to refuse with its reason.
func withBatch(no int, body []byte, id string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return body, nil
	}
	nulls := false
	for k, v := range fields {
		if !strings.EqualFold(k, "batch") {
			continue
		}
		var named *string
		if json.Unmarshal(v, &named) != nil || named != nil && *named != id {
			return nil, fmt.Errorf("%s names batch %s, not %s: submit it without --batch, or remove its \"batch\": %w",
				lineName(no), strings.TrimSpace(string(v)), id, ErrOtherBatch)
		}
		if named != nil {
			return body, nil // the batch given
		}
		nulls = true
		delete(fields, k)
	}
	raw, _ := json.Marshal(id)
	if nulls {
		fields["batch"] = raw
		return json.Marshal(fields)
	}
	return prepend(body, "batch", raw), nil
}

// prepend puts "key": raw first in a JSON object, so the rest of it is sent as written.
func prepend(body []byte, key string, raw json.RawMessage) []byte {
	body = bytes.TrimSpace(body) // an object: '{' first
	out := make([]byte, 0, len(body)+len(raw)+len(key)+6)
	out = append(out, '{', '"')
	out = append(out, key...)
	out = append(out, '"', ':')
	out = append(out, raw...)
	if rest := bytes.TrimSpace(body[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}

// jobName names a parsed job for people: by its line, or, for a job given by flags (no 0), by its
// type and id.
func jobName(no int, j job.Job) string {
	switch {
	case no > 0:
		return fmt.Sprintf("line %d", no)
	case j.ID == "" || j.ID == placeholderID:
		return "the job of type " + j.Type
	}
	return fmt.Sprintf("job %s/%s", j.Type, j.ID)
}

func lineName(no int) string {
	if no == 0 {
		return "the job"
	}
	return fmt.Sprintf("line %d", no)
}

// PriorityJSON is a priority as a job's body carries it: a name as a string ("high"), a number as
// a number (7). s is checked by the caller (job.PriorityFromString).
func PriorityJSON(s string) json.RawMessage {
	if _, err := strconv.Atoi(s); err == nil {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(strings.ToLower(s))
	return b
}

// withPriority gives a job's body the parser's priority when it has none of its own (no
// "priority", in any case, as the router's decoder matches it, or null). A body that is not a
// JSON object is left for job.Parse to refuse with its reason. The priority is put first, so the
// rest of the line is sent as written.
func (ps Parser) withPriority(body []byte) []byte {
	if ps.Priority == "" {
		return body
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return body
	}
	nulls := false
	for k, v := range fields {
		if strings.EqualFold(k, "priority") {
			if !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
				return body // the job's own priority wins
			}
			nulls = true
			delete(fields, k)
		}
	}
	raw := PriorityJSON(ps.Priority)
	if nulls {
		// Rare: rewrite the object, so no null is left for the router to read after ours.
		fields["priority"] = raw
		b, err := json.Marshal(fields)
		if err != nil {
			return body
		}
		return b
	}
	return prepend(body, "priority", raw)
}

func (p *Parsed) add(ctx context.Context, no int, body []byte, now time.Time, check TypeChecker, seen map[string]int) error {
	j, err := job.Parse(body, placeholderID, now)
	if err == nil && check != nil {
		err = check(ctx, j.Type)
		if err != nil && job.ReasonOf(err) == "" {
			return fmt.Errorf("check the type of %s: %w", jobName(no, j), err)
		}
	}
	if err != nil {
		p.Invalid = append(p.Invalid, Invalid{No: no, Reason: string(job.ReasonOf(err)), Detail: detail(err)})
		return nil
	}
	var s struct {
		ID *string `json:"id"`
	}
	_ = json.Unmarshal(body, &s) // Parse accepted it
	l := Line{No: no, Body: bytes.Clone(body), Type: j.Type, Key: j.Key, BatchSize: j.BatchSize}
	if s.ID != nil && *s.ID != "" {
		l.ID = j.ID
		key := job.BatchJobID(j.Type, j.Key, j.ID)
		if _, dup := seen[key]; dup {
			p.Duplicates++
		} else {
			seen[key] = no
		}
	} else {
		p.NoID++
	}
	p.Jobs = append(p.Jobs, l)
	return nil
}

func detail(err error) string {
	var je *job.Error
	if errors.As(err, &je) {
		return je.Detail
	}
	return err.Error()
}

// sendBatchAPI is the SQS calls a Submitter makes: SendMessage for the entries of a batch SQS
// refuses as too long (see sqsbatch).
type sendBatchAPI interface {
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Submitter sends jobs to the general queue in batches SQS accepts (sqsbatch.Split: at most ten
// entries and 1 MiB in all), several batches at once.
type Submitter struct {
	SQS      sendBatchAPI
	QueueURL string
	// Parallel is how many batches are in flight at once (default 16).
	Parallel int
	// Sender adjusts the batch sender (retries, back-off); tests use it. Nil: sqsbatch's defaults.
	Sender func(*sqsbatch.Sender)
}

// Failed is a job that could not be sent after every retry.
type Failed struct {
	No      int    `json:"line"`
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// SendResult is what a Submitter did.
type SendResult struct {
	Sent    int           `json:"sent"`
	Failed  []Failed      `json:"failed,omitempty"`
	Elapsed time.Duration `json:"-"`
}

// Send sends jobs and returns which were sent and which failed, with SQS's reasons. progress, if not
// nil, is called (from several goroutines, never at once) with the number of jobs done so far. A
// cancelled context stops sending; jobs not sent then are reported as failed with code Cancelled.
func (s Submitter) Send(ctx context.Context, jobs []Line, progress func(done int)) SendResult {
	began := time.Now()
	batches := batch(jobs)
	par := s.Parallel
	if par <= 0 {
		par = 16
	}
	sender := sqsbatch.NewSender(s.SQS, s.QueueURL)
	if s.Sender != nil {
		s.Sender(sender)
	}
	var (
		next, done atomic.Int64
		mu         sync.Mutex
		failed     []Failed
		wg         sync.WaitGroup
		progMu     sync.Mutex
	)
	for range min(par, len(batches)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(batches) {
					return
				}
				b := batches[i]
				var f []sqsbatch.Failure
				if ctx.Err() != nil {
					for _, e := range b.entries {
						f = append(f, sqsbatch.Failure{ID: *e.Id, Code: "Cancelled", Message: ctx.Err().Error()})
					}
				} else {
					f, _ = sender.Send(ctx, b.entries) // a cancelled send reports its entries as failures
				}
				if len(f) > 0 {
					mu.Lock()
					for _, x := range f {
						l := b.lines[x.ID]
						failed = append(failed, Failed{No: l.No, Type: l.Type, ID: l.ID, Code: x.Code, Message: x.Message})
					}
					mu.Unlock()
				}
				n := done.Add(int64(len(b.entries)))
				if progress != nil {
					progMu.Lock()
					progress(int(n))
					progMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	sort.Slice(failed, func(i, j int) bool { return failed[i].No < failed[j].No })
	return SendResult{Sent: len(jobs) - len(failed), Failed: failed, Elapsed: time.Since(began)}
}

type sendBatch struct {
	entries []types.SendMessageBatchRequestEntry
	lines   map[string]Line // by entry id
}

// batch groups jobs in order into the batches sqsbatch.Split makes, each with its lines by entry id.
func batch(jobs []Line) []sendBatch {
	entries := make([]types.SendMessageBatchRequestEntry, len(jobs))
	for i, l := range jobs {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(l.Body))}
	}
	var out []sendBatch
	i := 0
	for _, es := range sqsbatch.Split(entries, sqsbatch.MaxBatchBytes) {
		b := sendBatch{entries: es, lines: make(map[string]Line, len(es))}
		for _, e := range es {
			b.lines[*e.Id] = jobs[i]
			i++
		}
		out = append(out, b)
	}
	return out
}
