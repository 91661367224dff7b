// Package job defines the job contract: what a producer sends, the rules its fields follow, and the
// names derived from it (message group, deduplication id, execution name). The router, the starter and
// the command line all validate with this package, so a job is judged the same way everywhere.
package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const (
	// MaxTypeLen is the longest job type.
	MaxTypeLen = 40
	// MaxIDLen is the longest job id.
	MaxIDLen = 128
	// MaxKeyLen is the longest concurrency key. A key's waiting group is "{type}#{key}": at most
	// 40+1+64 = 105 characters, within SQS's 128 for a MessageGroupId.
	MaxKeyLen = 64
	// MaxExecutionInput is Step Functions' limit on an execution's input, in bytes.
	MaxExecutionInput = 256 * 1024
	// MaxMessageIDLen is the longest SQS message id: the starter puts the lanes-queue message's id in
	// the execution input (Meta.MessageID). SQS documents message ids as up to 100 characters ("Queue
	// and message identifiers", Amazon SQS Developer Guide); today they are 36-character UUIDs, and
	// AWS support advises not to rely on that.
	MaxMessageIDLen = 100
	// MaxSenderLen is the longest job sender (Sender): a principal, ">" and another.
	MaxSenderLen = 128 + 1 + 128
	// maxExecutionName is Step Functions' limit on an execution's name.
	maxExecutionName = 80
	// maxDedupID is SQS's limit on a MessageDeduplicationId.
	maxDedupID = 128
)

var (
	typeRe = regexp.MustCompile(`^[A-Za-z0-9_]{1,40}$`)
	idRe   = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
	keyRe  = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
	// principalRe is a principal as a sender names it: an IAM unique id (AIDA..., AROA...), a
	// federated user's "{account}:{name}" (names are of A-Z a-z 0-9 + = , . @ _ -), an emulator's.
	principalRe = regexp.MustCompile(`^[A-Za-z0-9_+=,.@:-]{1,128}$`)
	senderRe    = regexp.MustCompile(`^[A-Za-z0-9_+=,.@:-]{1,128}(>[A-Za-z0-9_+=,.@:-]{1,128})?$`)
	nameSafe    = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// Reason says why a job was refused. It travels as the dead-letter message's "reason" attribute.
type Reason string

// Reasons a job is refused.
const (
	ReasonNotJSON      Reason = "not_json"
	ReasonMissingType  Reason = "missing_type"
	ReasonInvalidType  Reason = "invalid_type"
	ReasonInvalidID    Reason = "invalid_id"
	ReasonInvalidKey   Reason = "invalid_key"
	ReasonUnknownType  Reason = "unknown_type"
	ReasonInputTooLong Reason = "input_too_large"
	// ReasonUnlistedTypes refuses a job of a type that is not listed while UNLISTED_TYPES_LIMIT
	// other unlisted types hold lanes (internal/lambda/unlisted).
	ReasonUnlistedTypes Reason = "too_many_unlisted_types"
)

// Error is a job refused for a reason; it is never worth retrying.
type Error struct {
	Reason Reason
	Detail string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Detail }

// ReasonOf returns the reason of a refused job, or "" when err is not one.
func ReasonOf(err error) Reason {
	var je *Error
	if errors.As(err, &je) {
		return je.Reason
	}
	return ""
}

// Submission is the body a producer sends to the general queue.
type Submission struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
	// Key is the job's concurrency key (a tenant, a customer): a type may cap the jobs of one key
	// that run at once, and shares its lanes fairly between keys. Empty is the default key.
	Key   string          `json:"key,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// Priority orders a type's waiting jobs: "low", "normal" (the default), "high", or 1-9.
	Priority json.RawMessage `json:"priority,omitempty"`
	// Redrive counts how often the job came back from the dead-letter queue. Producers leave it
	// out; dead letters carry the next value, so a redriven job runs under fresh execution names.
	Redrive int `json:"redrive,omitempty"`
	// Batch is the batch the job belongs to ("": none); BatchSize, on any of its jobs, opens the
	// batch with that many jobs (every job carrying it must give the same size).
	Batch     string `json:"batch,omitempty"`
	BatchSize int    `json:"batchSize,omitempty"`
}

// Job is a validated submission on its way to a lane; it is the body of a lanes-queue message.
type Job struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Key  string `json:"key,omitempty"`
	// Sender is the principal that sent the job (Sender): part of its identity, so another
	// producer's job with the same type, key and id is another job. The router writes it; a
	// producer cannot (a body's "sender" is not read from the general queue). "" for jobs routed
	// before senders were part of a job's identity, which keep the names they had.
	Sender      string          `json:"sender,omitempty"`
	Input       json.RawMessage `json:"input"`
	SubmittedAt time.Time       `json:"submittedAt"`
	// Priority is 1-9, higher first; 0 (none given, or routed before jobs had priorities) is normal.
	Priority int `json:"priority,omitempty"`
	// Attempts counts the executions already made for this job; it is carried when a job moves lanes.
	Attempts int `json:"attempt,omitempty"`
	Redrive  int `json:"redrive,omitempty"`
	// Batch and BatchSize are the job's batch, as submitted.
	Batch     string `json:"batch,omitempty"`
	BatchSize int    `json:"batchSize,omitempty"`
}

// Meta is the job metadata an execution receives beside the job's input.
type Meta struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// Key is the job's concurrency key ("" is the default key): per-key counts can be checked from
	// Step Functions' own records.
	Key string `json:"key,omitempty"`
	// Sender is the job's sender (Job.Sender), "" for a job routed before senders were part of a
	// job's identity.
	Sender string `json:"sender,omitempty"`
	// Priority is the job's priority when it is not normal.
	Priority int `json:"priority,omitempty"`
	// Batch is the batch the job belongs to, if any.
	Batch       string    `json:"batch,omitempty"`
	Lane        int       `json:"lane"`
	Attempt     int       `json:"attempt"`
	Redrive     int       `json:"redrive,omitempty"`
	SubmittedAt time.Time `json:"submittedAt"`
	// MessageID is the lanes-queue message that started the execution. Step Functions keeps it
	// with the execution, so a delivery that finds its attempt's execution already closed can tell
	// its own ended attempt (go on from its outcome) from a duplicate message's (drop the copy),
	// even when the lane's lease was deleted.
	MessageID string `json:"messageId,omitempty"`
	// Receive is that message's receive count when it started the execution. It makes each
	// delivery's input its own: Step Functions answers a repeated StartExecution with the running
	// execution only for the same name and input, so a start answered with success is this
	// delivery's (or a copy of this very delivery's), and any other delivery of the message is told
	// ExecutionAlreadyExists and looks the execution up. Without it, two deliveries racing to start
	// one attempt could each take the start for their own and count it twice.
	Receive int `json:"receive,omitempty"`
}

// ExecutionName is the deterministic name of this attempt's execution.
func (m Meta) ExecutionName() string {
	return RunName(m.Type, m.Sender, m.Key, m.ID, m.Redrive, m.Attempt)
}

// ExecutionInput is what the workflow receives: the job's metadata and its input, never a receipt handle.
type ExecutionInput struct {
	Job   Meta            `json:"job"`
	Input json.RawMessage `json:"input"`
}

// ValidateType checks a job type against the contract.
func ValidateType(t string) error {
	if t == "" {
		return &Error{ReasonMissingType, `"type" is required`}
	}
	if !typeRe.MatchString(t) {
		return &Error{ReasonInvalidType, fmt.Sprintf("type %q must be 1-%d characters of A-Z a-z 0-9 _", clip(t), MaxTypeLen)}
	}
	return nil
}

// ValidateID checks a job id against the contract.
func ValidateID(id string) error {
	if !idRe.MatchString(id) {
		return &Error{ReasonInvalidID, fmt.Sprintf("id %q must be 1-%d characters of A-Z a-z 0-9 _ - . :", clip(id), MaxIDLen)}
	}
	return nil
}

// ValidateKey checks a concurrency key against the contract ("" is the default key and valid).
func ValidateKey(key string) error {
	if key != "" && !keyRe.MatchString(key) {
		return &Error{ReasonInvalidKey, fmt.Sprintf("key %q must be 1-%d characters of A-Z a-z 0-9 _ - . :", clip(key), MaxKeyLen)}
	}
	return nil
}

// Sender is the sender part of a job's identity for a message whose (trusted) principal is
// principal and which says it was sent on behalf of onBehalfOf ("" when it says not): the principal,
// or "{principal}>{onBehalfOf}" when the message names another principal (an operator's dlq redrive
// of another producer's job). A principal can name any other, but only under its own name: no
// sender can make a job that is another principal's. An empty principal (a message without a
// SenderId) is no sender: "", the names of a job without one. A principal out of the contract
// (only an emulator's could be) is named "=" and a hash of it, and an onBehalfOf out of the contract
// is ignored.
func Sender(principal, onBehalfOf string) string {
	if principal == "" {
		return ""
	}
	if !principalRe.MatchString(principal) {
		principal = "=" + hash(principal, 32)
	}
	if onBehalfOf == "" || onBehalfOf == principal || !principalRe.MatchString(onBehalfOf) {
		return principal
	}
	return principal + ">" + onBehalfOf
}

// SenderPrincipal is the principal that sent a job of sender (Sender): the part before ">".
func SenderPrincipal(sender string) string {
	p, _, _ := strings.Cut(sender, ">")
	return p
}

// ValidateSender checks a job's sender ("" is none and valid), as Sender builds it.
func ValidateSender(sender string) error {
	if sender != "" && !senderRe.MatchString(sender) {
		return &Error{ReasonInvalidID, fmt.Sprintf("sender %q must be a principal of 1-128 characters of A-Z a-z 0-9 _ + = , . @ : -, and optionally > and another", clip(sender))}
	}
	return nil
}

// Parse validates a general-queue body. defaultID (the general-queue message id) is used when the body
// has no id, and submitted is when the producer sent it. The type's limit is checked by the caller,
// which knows the configuration.
func Parse(body []byte, defaultID string, submitted time.Time) (Job, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var s Submission
	if err := dec.Decode(&s); err != nil {
		return Job{}, &Error{ReasonNotJSON, decodeDetail(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return Job{}, &Error{ReasonNotJSON, "body has data after its JSON object"}
	}
	// What is known of a refused job travels with the refusal, so its dead letter names it.
	// A job without an id takes its first message's id (the same on every redelivery).
	if s.ID == "" {
		s.ID = defaultID
	}
	known := Job{Type: s.Type, ID: s.ID, Key: s.Key, Batch: s.Batch, BatchSize: s.BatchSize}
	if s.Redrive < 0 || s.Redrive > 999 {
		return known, &Error{ReasonInvalidID, fmt.Sprintf("redrive %d must be 0-999", s.Redrive)}
	}
	known.Redrive = s.Redrive
	if err := ValidateType(s.Type); err != nil {
		// The type is not named (it may be anything); the batch still counts the refusal.
		return Job{ID: s.ID, Batch: s.Batch, BatchSize: s.BatchSize, Redrive: s.Redrive}, err
	}
	if err := ValidateID(s.ID); err != nil {
		return known, err
	}
	if err := ValidateKey(s.Key); err != nil {
		return known, err
	}
	prio, err := ParsePriority(s.Priority)
	if err != nil {
		return known, err
	}
	if err := ValidateBatch(s.Batch, s.BatchSize); err != nil {
		return known, err
	}
	if prio == DefaultPriority {
		prio = 0 // normal jobs' bodies and groups stay as before jobs had priorities
	}
	in := s.Input
	if len(bytes.TrimSpace(in)) == 0 || bytes.Equal(bytes.TrimSpace(in), []byte("null")) {
		in = json.RawMessage(`{}`)
	}
	j := Job{Type: s.Type, ID: s.ID, Key: s.Key, Priority: prio, Input: in, SubmittedAt: submitted.UTC(), Redrive: s.Redrive,
		Batch: s.Batch, BatchSize: s.BatchSize}
	// The execution input adds metadata to the job input; check the whole against Step Functions' limit,
	// at the widest lane, attempt, lanes-queue message id and receive count the starter may put in it,
	// and the widest sender the router may name it with.
	widest := j.ExecutionInput(maxLaneForSize, 99)
	widest.Job.MessageID, widest.Job.Receive = strings.Repeat("0", MaxMessageIDLen), MaxReceiveForSize
	widest.Job.Sender = strings.Repeat("s", MaxSenderLen)
	if n := len(widest.MustJSON()); n > MaxExecutionInput {
		return known, &Error{ReasonInputTooLong, fmt.Sprintf("execution input would be %d bytes, more than Step Functions' %d", n, MaxExecutionInput)}
	}
	return j, nil
}

// maxLaneForSize is the widest lane number, used to size the execution input conservatively.
const maxLaneForSize = 120000

// MaxReceiveForSize is the widest receive count (Meta.Receive) the execution input is sized for. A
// message is received again each time it outlives its visibility timeout or backs off, for as long as
// the queue keeps it (14 days at most): a few hundred thousand receives at a few seconds each. SQS
// gives the count as a decimal string; this is the largest 32-bit count, beyond any it reaches.
const MaxReceiveForSize = 1<<31 - 1

// ExecutionInput builds the workflow's input for a lane and attempt.
func (j Job) ExecutionInput(lane, attempt int) ExecutionInput {
	return ExecutionInput{
		Job:   Meta{ID: j.ID, Type: j.Type, Key: j.Key, Sender: j.Sender, Priority: j.Priority, Batch: j.Batch, Lane: lane, Attempt: attempt, Redrive: j.Redrive, SubmittedAt: j.SubmittedAt},
		Input: j.Input,
	}
}

// MustJSON encodes the execution input; it cannot fail since Input is valid JSON.
func (e ExecutionInput) MustJSON() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("job: encode execution input: %v", err))
	}
	return b
}

// WaitingLane is the lane number of a type's waiting groups: jobs of a first-free type wait there
// until the starter binds them to a free lane. A waiting group never runs a job.
const WaitingLane = 0

// GroupID is the lanes-queue MessageGroupId of a type's lane.
func GroupID(typ string, lane int) string { return typ + "-" + strconv.Itoa(lane) }

// WaitingGroupID is the MessageGroupId of a type's waiting group k (0-based): "{type}-0" for the
// first, as before a type had several, and "{type}-w{k}" for the others.
func WaitingGroupID(typ string, k int) string {
	if k <= 0 {
		return GroupID(typ, WaitingLane)
	}
	return typ + "-w" + strconv.Itoa(k)
}

// KeyGroupID is the MessageGroupId of the waiting group of a concurrency key: "{type}#{key}" (a
// type, even one named before types lost their "-", and a key have no "#"). Every job of the key
// waits there, so one binder at a time (FIFO serves a group's messages one batch at a time, in
// order) counts the key's running jobs and binds, and a key at its cap holds only its own group.
func KeyGroupID(typ, key string) string { return typ + "#" + key }

// ParseGroupID splits a MessageGroupId into its type and lane (WaitingLane for a waiting group).
func ParseGroupID(g string) (typ string, lane int, err error) {
	if strings.Contains(g, "!") {
		base, _, err := GroupPriority(g)
		if err != nil {
			return "", 0, err
		}
		typ, lane, err := ParseGroupID(base)
		if err != nil || lane != WaitingLane {
			return "", 0, fmt.Errorf("message group %q: a priority is only on a waiting group", g)
		}
		return typ, lane, nil
	}
	if typ, key, ok := strings.Cut(g, "#"); ok {
		if typ == "" || !keyRe.MatchString(key) {
			return "", 0, fmt.Errorf("message group %q is not {type}#{key}", g)
		}
		return typ, WaitingLane, nil
	}
	i := strings.LastIndexByte(g, '-')
	if i <= 0 {
		return "", 0, fmt.Errorf("message group %q is not {type}-{lane}", g)
	}
	if k, ok := strings.CutPrefix(g[i+1:], "w"); ok {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 || strconv.Itoa(n) != k {
			return "", 0, fmt.Errorf("message group %q has no waiting group number", g)
		}
		return g[:i], WaitingLane, nil
	}
	lane, err = strconv.Atoi(g[i+1:])
	if err != nil || lane < WaitingLane || strconv.Itoa(lane) != g[i+1:] {
		return "", 0, fmt.Errorf("message group %q has no lane number", g)
	}
	return g[:i], lane, nil
}

// DedupID is the lanes-queue MessageDeduplicationId of a job's run (generation redrive: how often it
// came back from the dead-letter queue), so a job sent twice within SQS's five-minute deduplication
// interval is enqueued once, and a redriven job, sent again on purpose, is not taken for its earlier
// run. SQS keeps an id for five minutes even after its message was deleted ("Amazon SQS continues
// tracking the deduplication ID even after the message has been received and deleted", SQS
// Developer Guide, FIFO queue key terms), so anything sent again on purpose needs a new id.
//
// A job is its type, sender, key and id: a job of another key or sender with the same id is another
// job, never deduplicated with it. Generation 0 of a job without a key or sender keeps the form used
// before keys, senders and redrive generations were part of it: "{type}-{id}".
func DedupID(typ, sender, key, id string, redrive int) string {
	return dedupID(typ, id, keyPart(key)+senderPart(sender)+generation(redrive))
}

// MovedDedupID is the MessageDeduplicationId of the copy the starter sends when it moves the job in
// message from (its SQS message id) to lane to: a lane above a lowered limit, or a lane bound to
// another job, to a lane within the limit or to a waiting group (WaitingLane). Each message moves at
// most once, so the id is the copy's own, and a move retried is dropped by SQS. It names the message
// rather than the attempts made, as a job may be moved twice with the same attempts within SQS's
// five-minute deduplication window, and a second copy with the first's id would be dropped: lost.
func MovedDedupID(typ, sender, key, id string, redrive, to int, from string) string {
	return dedupID(typ, id, keyPart(key)+senderPart(sender)+"~moved~"+strconv.Itoa(to)+"~"+from+generation(redrive))
}

// BoundDedupID is the MessageDeduplicationId of the copy the starter sends when it binds the job in
// waiting message from (its SQS message id) to lane to, in the bind stamped bind (the bound lease's
// start, in Unix nanoseconds): a bind retried is dropped by SQS, while a job that comes back to wait
// (its lane was taken back) and binds again, in a new message, is not; nor is a second bind of the
// same message to the same lane (a duplicate delivery, or a send whose answer was lost, bound again
// after the first copy ran and freed the lane), whose copy must reach the lane to free it again.
func BoundDedupID(typ, sender, key, id string, redrive, to int, from string, bind int64) string {
	return dedupID(typ, id, keyPart(key)+senderPart(sender)+"~bound~"+strconv.Itoa(to)+"~"+from+"~"+strconv.FormatInt(bind, 10)+"~g"+strconv.Itoa(redrive))
}

// keyPart is a key's part of a deduplication id: "" for the default key, else "~k{key}" (a key has
// no "~", so the next "~" or the end closes it; no other part starts with "~k").
func keyPart(key string) string {
	if key == "" {
		return ""
	}
	return "~k" + key
}

// senderPart is a sender's part of a deduplication id: "" for a job without a sender (routed before
// senders were part of a job's identity), else "~s{sender}" (a sender has no "~"; no other part
// starts with "~s").
func senderPart(sender string) string {
	if sender == "" {
		return ""
	}
	return "~s" + sender
}

func generation(redrive int) string {
	if redrive <= 0 {
		return ""
	}
	return "~g" + strconv.Itoa(redrive)
}

// dedupID is "{type}-{id}{suffix}" when it fits SQS's 128 characters, else "{type}#" and the sha256
// hex digest of that whole string. No two jobs, generations or copies share one:
//   - a plain form splits back into its parts: a type has no "-", so the first "-" ends it; an id has
//     no "~", so the first "~" after it ends the id; then comes "~k{key}" for a job with a key (a key
//     has no "~"), "~s{sender}" for a job with a sender (a sender has no "~"), and the suffix: "", "~g{n}" (n > 0), "~moved~{lane}~{message id}" with an optional
//     "~g{n}", or "~bound~{lane}~{message id}~{bind}~g{n}", with canonical decimal numbers (an SQS
//     message id has no "~");
//   - a hashed form has a "#", which neither types, ids nor suffixes contain, so it never equals a
//     plain form (a bare digest would: 64 hex digits are a valid id), and two hashed forms are equal
//     only if their plain strings are (sha256).
//
// A MessageDeduplicationId may hold up to 128 alphanumerics and punctuation
// (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~) (SQS API reference, SendMessage).
func dedupID(typ, id, suffix string) string {
	d := typ + "-" + id + suffix
	if len(d) <= maxDedupID {
		return d
	}
	return typ + "#" + hash(d, 64)
}

// ExecutionArn is the ARN of the execution named name of a state machine. It keeps the state
// machine's partition, region and account. A version or alias ARN (arn:...:stateMachine:NAME:3,
// arn:...:stateMachine:NAME:PROD) starts an execution of the state machine itself: Step Functions
// names it arn:...:execution:NAME:EXEC, and reports the version or alias beside it
// (stateMachineVersionArn, stateMachineAliasArn), so the qualifier is not part of it.
func ExecutionArn(stateMachineArn, name string) string {
	return strings.Replace(UnqualifiedStateMachine(stateMachineArn), ":stateMachine:", ":execution:", 1) + ":" + name
}

// UnqualifiedStateMachine is the ARN of the state machine a version or alias ARN belongs to
// (arn:...:stateMachine:NAME for arn:...:stateMachine:NAME:3 or :PROD), and any other ARN as it
// is. Execution names are unique per state machine, whatever version or alias started them; the
// state machine's ARN is what ListExecutions lists all of them by, and what IAM authorizes a
// version or alias by ("Step Functions uses the state machine's ARN instead of using the version
// ARN or alias ARN", Step Functions Developer Guide, authorization for versions and aliases).
func UnqualifiedStateMachine(arn string) string {
	const marker = ":stateMachine:"
	i := strings.Index(arn, marker)
	if i < 0 {
		return arn
	}
	i += len(marker)
	if j := strings.IndexByte(arn[i:], ':'); j >= 0 {
		return arn[:i+j]
	}
	return arn
}

// UnqualifiedExecution is an execution's ARN as Step Functions names it, for an ARN derived by
// earlier versions of ExecutionArn from a version or alias ARN, which kept the qualifier
// (arn:...:execution:NAME:3:EXEC becomes arn:...:execution:NAME:EXEC); any other ARN is returned as
// it is. A state machine's name and an execution's have no ":", so an execution ARN with one field
// more than arn:PARTITION:states:REGION:ACCOUNT:execution:NAME:EXEC is such an ARN.
func UnqualifiedExecution(arn string) string {
	p := strings.Split(arn, ":")
	if len(p) != 9 || p[0] != "arn" || p[2] != "states" || p[5] != "execution" {
		return arn
	}
	return strings.Join(append(p[:7:7], p[8]), ":")
}

// StateMachineOf is the ARN of the state machine of the execution executionArn ("" for an ARN that
// is not an execution's).
func StateMachineOf(executionArn string) string {
	i := strings.LastIndex(executionArn, ":")
	if i < 0 || !strings.Contains(executionArn[:i], ":execution:") {
		return ""
	}
	return strings.Replace(executionArn[:i], ":execution:", ":stateMachine:", 1)
}

// ExecutionName is the deterministic Step Functions execution name of a job's attempt, so that a
// start that is retried or delivered twice finds the execution it already made.
//
// Names of different jobs never meet: a type has no "-", so the first "-" ends it; a plain name
// "{type}-{id}-{attempt}" is used only for ids of name-safe characters without "__", and every
// shortened name "{type}-{prefix}__{hash}-{attempt}" has "__" before its hash of the id.
func ExecutionName(typ, id string, attempt int) string { return RunName(typ, "", "", id, 0, attempt) }

// RunName is ExecutionName for a job of any key, redriven or not. Redrive n > 0 adds "g{n}" after a
// "__" ("{type}-{id}__g{n}-{attempt}", or "{type}-{prefix}__{hash}g{n}-{attempt}"), which no plain
// name (no "__") and no first-run shortened name (16 hex digits after "__") can equal.
//
// A job with a key is always named the shortened way, with "k" before a hash of its key and id:
// "{type}-{prefix}__k{hash}{gen}-{attempt}". Read from its end, that is the attempt, an optional
// "g{n}", 16 hex digits and "__k": a shortened name without a key has "__" right before its 16 hex
// digits, and a redriven plain one ends "__g{n}-{attempt}" (no hex digits before its "g"), so no job
// without a key shares a keyed job's name, and two keys' jobs with one id have different hashes.
// Jobs without a key keep the names they had before keys were part of a job's identity.
//
// A job with a sender (every job the router routes since senders are part of a job's identity) is
// named like a keyed job, its sender folded into the hash: "k" and a hash of "{sender}/{key}/{id}"
// (key "" for the default key). A sender, a key and an id have no "/", so that string has two "/"
// where a keyed job's without a sender ("{key}/{id}") has one: two senders' jobs with one type, key
// and id have different names, and none is named like a job without a sender, whose names are
// the ones it had before.
func RunName(typ, sender, key, id string, redrive, attempt int) string {
	suffix := "-" + strconv.Itoa(attempt)
	gen := ""
	if redrive > 0 {
		gen = "g" + strconv.Itoa(redrive)
	}
	if sender != "" {
		return shortName(typ, id, "k"+hash(sender+"/"+key+"/"+id, 16)+gen, suffix)
	}
	if key != "" {
		return shortName(typ, id, "k"+hash(key+"/"+id, 16)+gen, suffix)
	}
	plainID := id
	if gen != "" {
		plainID = id + "__" + gen
	}
	if n := typ + "-" + plainID + suffix; len(n) <= maxExecutionName && nameSafe.MatchString(id) && !strings.Contains(id, "__") {
		return n
	}
	return shortName(typ, id, hash(id, 16)+gen, suffix)
}

// shortName is "{type}-{prefix}__{tail}{suffix}", the id's prefix (sanitized) cut to fit 80 characters.
func shortName(typ, id, tail, suffix string) string {
	room := maxExecutionName - len(typ) - 1 - len(suffix) - len(tail) - 2
	prefix := sanitize(id)
	if len(prefix) > room {
		prefix = prefix[:max(room, 0)]
	}
	return typ + "-" + prefix + "__" + tail + suffix
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') {
			return r
		}
		return '_'
	}, s)
}

func hash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
