package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
)

// leaseReader reads leases type by type (lease.Store).
type leaseReader = lease.TypeLister

type describeExecutionAPI interface {
	DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
}

// admissionReader reads the fates of a job of a type with key caps (admission.Store).
type admissionReader interface {
	Find(ctx context.Context, typ, sender, key, id string) ([]admission.Fate, error)
}

// JobFinder finds a job from its lease and its executions, which have deterministic names
// (job.RunName), so no index of jobs is needed.
type JobFinder struct {
	Leases leaseReader
	SFN    describeExecutionAPI
	// Admission, when not nil, reads the fates of the jobs of a type with key caps, where the
	// overflow rule skip acts (admission.Store), asked only for such a type's job that holds no
	// lease: a skipped job has neither a lease nor an execution. nil: such a job shows as
	// not-started.
	Admission admissionReader
	// Config resolves the effective configuration (a config.Resolver): the type's state machine
	// and attempts, and the types to search when none is given.
	Config   *config.Resolver
	Defaults config.Defaults
	// Caller is the principal of the command line's credentials (batch.Principal; "" unknown): the
	// sender of the jobs it submits. A job is its type, sender, key and id, and an execution's name
	// hashes its sender in, so a job is found only under senders looked for.
	Caller string
	// Senders, when not nil, are the only senders Show looks for (job show --sender). nil: a job
	// without a sender (routed before senders were part of a job's identity), the caller's, and
	// every sender whose job holds a lane.
	Senders []string
}

// JobView is what is known of one job.
type JobView struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// Key is the job's concurrency key, from its lease, else from its last execution's input
	// (job.key); "" for the default key. KeyCap is the cap its key has now, when the type caps keys.
	Key    string `json:"key,omitempty"`
	KeyCap int    `json:"keyCap,omitempty"`
	// Sender is the job's sender (job.Job.Sender: its producer's principal, or for an operator's
	// redrive "{operator}>{producer}"); "" for a job routed before senders were part of a job's
	// identity.
	Sender string `json:"sender,omitempty"`
	// Priority is the job's priority as its last execution's input has it (job.priority):
	// job.PriorityName of it, "normal" when the input has none; "" when the job has no execution
	// (its lease does not carry it).
	Priority string `json:"priority,omitempty"`
	// State is the lease's status when the job holds a lane (bound, starting, running, retrying,
	// dead-lettering), else what its last execution says: succeeded, dead-lettered (attempts
	// exhausted or aborted), cancelled (stopped by a newer job of its key: the overflow rule cancel),
	// skipped (ended without running, its key at its cap with an older job of its sender holding a
	// lane: the overflow rule skip; its admission record says so), or not-started. A claim (lease
	// status starting) whose execution exists is running: a confirmed start writes nothing after
	// the claim.
	State       string          `json:"state"`
	Detail      string          `json:"detail"`
	Lane        int             `json:"lane,omitempty"`
	Attempt     int             `json:"attempt,omitempty"`
	MaxAttempts int             `json:"maxAttempts"`
	Redrive     int             `json:"redrive,omitempty"`
	SubmittedAt *time.Time      `json:"submittedAt,omitempty"`
	Lease       *LeaseView      `json:"lease,omitempty"`
	Executions  []ExecutionView `json:"executions"`
}

// LeaseView is the lease a job holds.
type LeaseView struct {
	Lane         int       `json:"lane"`
	Key          string    `json:"key,omitempty"`
	Status       string    `json:"status"`
	Attempt      int       `json:"attempt"`
	Redrive      int       `json:"redrive,omitempty"`
	ExecutionArn string    `json:"executionArn,omitempty"`
	StartedAt    time.Time `json:"startedAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

// ExecutionView is one execution of a job.
type ExecutionView struct {
	Attempt   int        `json:"attempt"`
	Redrive   int        `json:"redrive,omitempty"`
	Lane      int        `json:"lane,omitempty"`
	Name      string     `json:"name"`
	Arn       string     `json:"arn"`
	Status    string     `json:"status"`
	StartDate *time.Time `json:"startDate,omitempty"`
	StopDate  *time.Time `json:"stopDate,omitempty"`
	Error     string     `json:"error,omitempty"`
	Cause     string     `json:"cause,omitempty"`
	// Key is the job's concurrency key as its execution input has it (job.key).
	Key string `json:"key,omitempty"`
	// Priority is the job's priority as its execution input has it (job.priority, 1-9; 0 when
	// absent: normal).
	Priority int `json:"priority,omitempty"`

	submittedAt time.Time // from the execution input
	batch       string    // from the execution input
}

// ErrJobNotFound means no lease and no execution of the job was found.
var ErrJobNotFound = errors.New("job not found")

// stateRunning is the state job show gives a job whose lease names an execution that runs (or has
// just ended and is about to be released).
const stateRunning = "running"

const (
	maxGenerations  = 50  // redrives searched at most
	maxAttemptsSeen = 200 // attempts searched per redrive at most
	// maxRefusedGenerations is how many generations in a row with no execution the search looks
	// past. The starter dead-letters a job it refuses before any execution starts (unknown_type,
	// start_refused) with the next generation (starter.refuse), so a job redriven after that runs
	// only under later names ({type}-{id}__g1-1), and its lease is gone once it ended. Each
	// generation looked at costs a DescribeExecution or two; a job refused more than this many
	// times in a row before it ran is not found beyond them.
	maxRefusedGenerations = 2
)

// Show finds a job of type typ, or of any type when typ is "" (the types with a limit or a lease).
// A job is its type, sender, key and id: key "" finds the job of the default key, and the job of
// any key that holds a lane (its lease names its key); a keyed job that holds none is found with
// its key. Likewise the senders looked for are f.Senders, or the job without a sender, the
// caller's, and any sender's that holds a lane: every match is returned.
// It returns ErrJobNotFound when no type has a lease or an execution of it.
func (f JobFinder) Show(ctx context.Context, typ, key, id string) ([]JobView, error) {
	if err := job.ValidateID(id); err != nil {
		return nil, UsageError{err}
	}
	if err := job.ValidateKey(key); err != nil {
		return nil, UsageError{err}
	}
	types := []string{typ}
	var leases []lease.Lease
	if typ == "" {
		cfgs, err := f.Config.All(ctx)
		if err != nil {
			return nil, err
		}
		types = types[:0]
		for _, c := range cfgs {
			types = append(types, c.Type)
		}
		all, err := lease.ListTypes(ctx, f.Leases, types, 8)
		if err != nil {
			return nil, err
		}
		leases = all
		for _, l := range all {
			if !slices.Contains(types, l.Type) {
				types = append(types, l.Type)
			}
		}
		sort.Strings(types)
	} else {
		if err := job.ValidateType(typ); err != nil {
			return nil, UsageError{err}
		}
		ls, err := f.Leases.ListType(ctx, typ)
		if err != nil {
			return nil, err
		}
		leases = ls
	}
	var out []JobView
	for _, t := range types {
		var none *JobView // the job of the first key, found nowhere
		n := len(out)
		for _, c := range f.jobsOf(leases, t, key, id) {
			v, err := f.show(ctx, t, c.sender, c.key, id, leases)
			if err != nil {
				return nil, err
			}
			switch {
			case v.found():
				out = append(out, v)
			case none == nil:
				none = &v
			}
		}
		if typ != "" && len(out) == n && none != nil {
			out = append(out, *none)
		}
	}
	if len(out) == 0 || (len(out) == 1 && !out[0].found()) {
		hint := ""
		if key == "" {
			hint = " (a job of a key that holds no lane: --key)"
		}
		if f.Senders == nil {
			hint += " (another sender's job that holds no lane: --sender)"
		}
		return out, fmt.Errorf("%w: no lease and no execution of job %s%s%s; it may wait in a queue, have been refused (sfnlimit dlq list --id %s), or never have been sent", ErrJobNotFound, id, ofType(typ), hint, id)
	}
	return out, nil
}

// found says that something of the job was found: a lease, an execution, or its skip.
func (v JobView) found() bool {
	return v.Lease != nil || len(v.Executions) > 0 || v.State == stateSkipped
}

// candidate is a sender and key whose job of an id is looked up.
type candidate struct{ sender, key string }

// jobsOf is the senders and keys whose job id of type typ is looked up: each of the senders looked
// for (f.Senders, else no sender and the caller's) with key when given, else with the default key;
// and every job id of typ that holds a lane, of a key and sender looked for.
func (f JobFinder) jobsOf(leases []lease.Lease, typ, key, id string) []candidate {
	senders := f.Senders
	if senders == nil {
		senders = []string{""}
		if s := job.Sender(f.Caller, ""); s != "" {
			senders = append(senders, s)
		}
	}
	var out []candidate
	for _, s := range senders {
		out = append(out, candidate{s, key})
	}
	for _, l := range leases {
		c := candidate{l.JobSender, l.JobKey}
		if l.Type != typ || l.JobID != id || slices.Contains(out, c) ||
			(key != "" && l.JobKey != key) || (f.Senders != nil && !slices.Contains(f.Senders, l.JobSender)) {
			continue
		}
		out = append(out, c)
	}
	return out
}

func ofType(typ string) string {
	if typ == "" {
		return " of any type"
	}
	return " of type " + typ
}

func (f JobFinder) show(ctx context.Context, typ, sender, key, id string, leases []lease.Lease) (JobView, error) {
	v := JobView{Type: typ, ID: id, Key: key, Sender: sender, MaxAttempts: f.Defaults.DefaultMaxAttempts, Executions: []ExecutionView{}}
	machines := []string{}
	var cfg *config.TypeConfig // nil: the type has no limit
	if c, err := f.Config.Get(ctx, typ); err == nil {
		cfg = &c
		v.MaxAttempts = c.MaxAttempts
		machines = append(machines, c.StateMachineArn)
	} else if !errors.Is(err, config.ErrUnknownType) {
		return v, err
	} else if n, ok := f.Defaults.MaxAttempts[typ]; ok {
		v.MaxAttempts = n
	}
	if f.Defaults.StateMachineArn != "" && !slices.Contains(machines, f.Defaults.StateMachineArn) {
		machines = append(machines, f.Defaults.StateMachineArn)
	}
	minGen := 0
	for _, l := range leases {
		if l.Type == typ && l.Holds(sender, key, id, l.Redrive) {
			v.Lease = &LeaseView{Lane: l.Lane, Key: l.JobKey, Status: string(l.Status), Attempt: l.Attempt, Redrive: l.Redrive, ExecutionArn: l.ExecutionArn, StartedAt: l.StartedAt, UpdatedAt: l.UpdatedAt}
			if !l.SubmittedAt.IsZero() {
				s := l.SubmittedAt
				v.SubmittedAt = &s
			}
			minGen = l.Redrive
			if l.ExecutionArn != "" {
				machines = append(machines, stateMachineOf(l.ExecutionArn))
			}
		}
	}
	machines = slices.Compact(machines)
	// empty counts the generations in a row, from the lease's on, with no execution.
	for gen, empty := 0, 0; gen < maxGenerations && empty <= maxRefusedGenerations; gen++ {
		found := 0
		misses := 0
		for attempt := 1; attempt <= maxAttemptsSeen && misses < 2; attempt++ {
			e, ok, err := f.find(ctx, machines, job.RunName(typ, sender, key, id, gen, attempt))
			if err != nil {
				return v, err
			}
			if !ok {
				misses++
				continue
			}
			misses = 0
			e.Attempt, e.Redrive = attempt, gen
			v.Executions = append(v.Executions, e)
			found++
		}
		switch {
		case found > 0:
			empty = 0
		case gen >= minGen:
			empty++
		}
	}
	f.summarize(&v)
	if err := f.skipped(ctx, &v, cfg, sender, key, id); err != nil {
		return v, err
	}
	v.setKey(cfg)
	if n := len(v.Executions); n > 0 {
		v.Priority = job.PriorityName(v.Executions[n-1].Priority) // 0 (absent) reads as normal
	}
	return v, nil
}

// setKey takes the job's key from its lease, else from its last execution's input, and its cap
// from the type's configuration (nil: the type has none).
func (v *JobView) setKey(cfg *config.TypeConfig) {
	switch {
	case v.Lease != nil:
		v.Key = v.Lease.Key
	case len(v.Executions) > 0:
		v.Key = v.Executions[len(v.Executions)-1].Key
	}
	if cfg != nil && cfg.CapsKeys() {
		v.KeyCap = cfg.KeyCap(v.Key)
	}
}

// find describes the execution of this name on each candidate state machine.
func (f JobFinder) find(ctx context.Context, machines []string, name string) (ExecutionView, bool, error) {
	for _, sm := range machines {
		arn := job.ExecutionArn(sm, name)
		out, err := f.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		var missing *sfntypes.ExecutionDoesNotExist
		if errors.As(err, &missing) {
			continue
		}
		if err != nil {
			return ExecutionView{}, false, fmt.Errorf("describe execution %s: %w", arn, err)
		}
		e := ExecutionView{Name: name, Arn: arn, Status: string(out.Status), Error: aws.ToString(out.Error), Cause: aws.ToString(out.Cause)}
		if out.StartDate != nil {
			t := out.StartDate.UTC()
			e.StartDate = &t
		}
		if out.StopDate != nil {
			t := out.StopDate.UTC()
			e.StopDate = &t
		}
		var in job.ExecutionInput
		if json.Unmarshal([]byte(aws.ToString(out.Input)), &in) == nil {
			e.Lane, e.Key, e.Priority, e.submittedAt, e.batch = in.Job.Lane, in.Job.Key, in.Job.Priority, in.Job.SubmittedAt.UTC(), in.Job.Batch
		}
		return e, true, nil
	}
	return ExecutionView{}, false, nil
}

// summarize works out the job's state from its lease and its last execution.
func (f JobFinder) summarize(v *JobView) {
	var last *ExecutionView
	if n := len(v.Executions); n > 0 {
		last = &v.Executions[n-1]
		v.Lane, v.Attempt, v.Redrive = last.Lane, last.Attempt, last.Redrive
		if v.SubmittedAt == nil && !last.submittedAt.IsZero() {
			s := last.submittedAt
			v.SubmittedAt = &s
		}
	}
	if l := v.Lease; l != nil {
		v.State, v.Lane, v.Attempt, v.Redrive = l.Status, l.Lane, l.Attempt, l.Redrive
		switch lease.Status(l.Status) {
		case lease.Bound:
			// A bound lease counts the attempts already made: the next one starts on the lane.
			v.Detail = fmt.Sprintf("bound to lane %d from its waiting group; attempt %d of %d starts when its copy reaches the lane", l.Lane, l.Attempt+1, v.MaxAttempts)
		case lease.Starting:
			e := leaseExecution(v)
			switch {
			case e == nil:
				v.Detail = fmt.Sprintf("starting attempt %d of %d on lane %d (its execution is not found yet)", l.Attempt, v.MaxAttempts, l.Lane)
			case e.Status == string(sfntypes.ExecutionStatusRunning):
				v.State = stateRunning
				v.Detail = fmt.Sprintf("running attempt %d of %d on lane %d", l.Attempt, v.MaxAttempts, l.Lane)
			case e.Status == string(sfntypes.ExecutionStatusAborted) && e.Error == job.ErrorCancelled:
				v.State = stateRunning
				v.Detail = fmt.Sprintf("%s; its lane %d is about to be released", cancelledText(*e), l.Lane)
			default:
				// Ended, and not released yet: its release (or the sweep, or its message's next
				// delivery) frees the lane.
				v.State = stateRunning
				v.Detail = fmt.Sprintf("attempt %d of %d ended %s on lane %d; its lane is about to be released", l.Attempt, v.MaxAttempts, strings.ToLower(e.Status), l.Lane)
			}
		case lease.Retrying:
			v.Detail = fmt.Sprintf("attempt %d of %d failed; waiting on lane %d to run again", l.Attempt, v.MaxAttempts, l.Lane)
		case lease.DeadLettering:
			v.Detail = fmt.Sprintf("ended for good after attempt %d; being dead-lettered from lane %d", l.Attempt, l.Lane)
		case lease.Moving:
			v.Detail = fmt.Sprintf("leaving lane %d (above a lowered limit or key cap) to wait again, after %d of %d attempts", l.Lane, l.Attempt, v.MaxAttempts)
		default:
			v.Detail = fmt.Sprintf("lease status %s on lane %d", l.Status, l.Lane)
		}
		return
	}
	if last == nil {
		v.State, v.Detail = "not-started", "no lease and no execution"
		return
	}
	switch sfntypes.ExecutionStatus(last.Status) {
	case sfntypes.ExecutionStatusSucceeded:
		v.State, v.Detail = "succeeded", fmt.Sprintf("attempt %d succeeded", last.Attempt)
	case sfntypes.ExecutionStatusAborted:
		if last.Error == job.ErrorCancelled {
			v.State, v.Detail = stateCancelled, cancelledText(*last)
			break
		}
		v.State, v.Detail = "dead-lettered", fmt.Sprintf("attempt %d was stopped (aborted); dead-lettered, not retried", last.Attempt)
	case sfntypes.ExecutionStatusRunning:
		v.State, v.Detail = "running", fmt.Sprintf("attempt %d is running, and no lease holds it (the sweep or the next delivery settles it)", last.Attempt)
	default:
		if last.Attempt >= v.MaxAttempts {
			v.State, v.Detail = "dead-lettered", fmt.Sprintf("attempt %d of %d %s: attempts exhausted, dead-lettered", last.Attempt, v.MaxAttempts, strings.ToLower(last.Status))
		} else {
			v.State, v.Detail = "failed", fmt.Sprintf("attempt %d of %d %s; no lease holds it", last.Attempt, v.MaxAttempts, strings.ToLower(last.Status))
		}
	}
}

// stateSkipped is the state job show gives a job that the overflow rule skip ended without running
// (admission.Skipped): its key was at its cap with an older job of its sender holding a lane. It used
// no attempt, and is not dead-lettered.
const stateSkipped = "skipped"

// skipped shows the job as skipped when it holds no lane, its newest fate is admission.Skipped, and
// no execution of that fate's generation (or a later one) exists. Only a type with key caps is asked
// (the rule skip acts at a key's cap, and its skips stand after the rule changed): any other type
// pays no read.
func (f JobFinder) skipped(ctx context.Context, v *JobView, cfg *config.TypeConfig, sender, key, id string) error {
	if f.Admission == nil || cfg == nil || !cfg.CapsKeys() || v.Lease != nil {
		return nil
	}
	fates, err := f.Admission.Find(ctx, v.Type, sender, key, id)
	if err != nil {
		return err
	}
	if len(fates) == 0 {
		return nil
	}
	last := fates[len(fates)-1]
	if last.Outcome != admission.Skipped {
		return nil
	}
	for _, e := range v.Executions {
		if e.Redrive >= last.Redrive {
			return nil // that generation ran: its executions tell
		}
	}
	behind := "an older job"
	if last.Behind != "" {
		behind = "job " + last.Behind
	}
	v.State = stateSkipped
	v.Detail = fmt.Sprintf("skipped at %s: its key was at its cap with %s of the same sender holding a lane (overflow rule skip); not run, no attempt used, not dead-lettered",
		last.At.UTC().Format(time.RFC3339), behind)
	v.Lane, v.Attempt, v.Redrive = 0, 0, last.Redrive
	if v.SubmittedAt == nil && !last.SubmittedAt.IsZero() {
		s := last.SubmittedAt.UTC()
		v.SubmittedAt = &s
	}
	return nil
}

// stateCancelled is the state job show gives a job whose execution a newer job of its key stopped
// (the overflow rule cancel, job.ErrorCancelled): it ended, and is not dead-lettered.
const stateCancelled = "cancelled"

// cancelledText says that an execution was stopped by a newer job of its key, and by which (its
// cause names it: job.CancelCause).
func cancelledText(e ExecutionView) string {
	cause := e.Cause
	if cause == "" {
		cause = "the stop gave no cause"
	}
	return fmt.Sprintf("attempt %d was stopped: %s; cancelled, not retried, not dead-lettered", e.Attempt, cause)
}

// leaseExecution is the execution of the attempt the job's lease holds, nil when none was found.
func leaseExecution(v *JobView) *ExecutionView {
	for i := range v.Executions {
		if e := &v.Executions[i]; e.Attempt == v.Lease.Attempt && e.Redrive == v.Lease.Redrive {
			return e
		}
	}
	return nil
}

// stateMachineOf is the state machine of an execution ARN.
func stateMachineOf(executionArn string) string {
	s := strings.Replace(executionArn, ":execution:", ":stateMachine:", 1)
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		return s[:i]
	}
	return s
}

// WriteJobs prints jobs for people.
func WriteJobs(w io.Writer, views []JobView) error {
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "job %s of type %s: %s (%s)\n", v.ID, v.Type, v.State, v.Detail)
		if v.SubmittedAt != nil {
			fmt.Fprintf(w, "  submitted  %s\n", v.SubmittedAt.Format(time.RFC3339))
		}
		if v.Sender != "" {
			fmt.Fprintf(w, "  sender     %s\n", v.Sender)
		}
		if v.Key != "" || v.KeyCap > 0 {
			fmt.Fprintf(w, "  key        %s\n", v.keyText())
		}
		if v.Priority != "" {
			fmt.Fprintf(w, "  priority   %s\n", v.Priority)
		}
		if l := v.Lease; l != nil {
			fmt.Fprintf(w, "  lease      lane %d, %s, attempt %d, since %s, updated %s\n", l.Lane, l.Status, l.Attempt, l.StartedAt.Format(time.RFC3339), l.UpdatedAt.Format(time.RFC3339))
			if l.ExecutionArn != "" {
				fmt.Fprintf(w, "  execution  %s\n", l.ExecutionArn)
			}
		}
		if len(v.Executions) == 0 {
			fmt.Fprintln(w, "  no executions")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  ATTEMPT\tREDRIVE\tLANE\tSTATUS\tSTARTED\tSTOPPED\tERROR\tEXECUTION")
		for _, e := range v.Executions {
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Attempt, e.Redrive, laneText(e.Lane), e.Status, timeText(e.StartDate), timeText(e.StopDate), clipText(dash(e.Error), 40), e.Arn)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// keyText is the job's key for people, with the cap its key has now.
func (v JobView) keyText() string {
	name := v.Key
	if name == "" {
		name = "none: the default key"
	}
	if v.KeyCap > 0 {
		return fmt.Sprintf("%s (its type runs at most %s of it at once)", name, plural(v.KeyCap, "job", "jobs"))
	}
	return name
}

func laneText(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func timeText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// MaxEarlierChecks is how many jobs of an input submit looks up before sending them (FindEarlier):
// each costs a DescribeExecution or two, so a large file is only sampled by its first jobs.
const MaxEarlierChecks = 10

// Earlier is a job submitted before: it has a lease or an execution. Execution names
// ({type}-{id}-{attempt}) are unique for 90 days and the lanes queue drops a copy within 5 minutes,
// so a job sent again by the same sender with the same type, key and id never runs again.
type Earlier struct {
	No    int    `json:"line,omitempty"`
	Type  string `json:"type"`
	Key   string `json:"key,omitempty"`
	ID    string `json:"id"`
	State string `json:"state"` // as job show works it out
	// Lane is the lane its lease holds (0: none); Execution and Status are its last execution's
	// name and status, if it has one.
	Lane      int    `json:"lane,omitempty"`
	Execution string `json:"execution,omitempty"`
	Status    string `json:"status,omitempty"`
	// Batch is the batch it was submitted as, from its lease, else from its last execution's
	// input (job.batch); "" for none.
	Batch string `json:"batch,omitempty"`
}

// Text says, for people, that the job will not run again and what to do.
func (e Earlier) Text() string {
	what := fmt.Sprintf("execution %s %s", e.Execution, e.Status)
	if e.Lane > 0 {
		what = fmt.Sprintf("it holds lane %d: %s", e.Lane, e.State)
	}
	todo := "use a new id"
	if e.State == "dead-lettered" || e.State == "failed" {
		todo += fmt.Sprintf(", or redrive its dead letter (sfnlimit dlq redrive --type %s --id %s)", e.Type, e.ID)
	}
	return fmt.Sprintf("%s/%s was already submitted (%s): it will not run again; %s", e.Type, e.ID, what, todo)
}

// FindEarlier looks up the first MaxEarlierChecks jobs with an id (a job without one gets a fresh
// message id: it is never a copy) as job show does, and returns those submitted before, how many
// it looked up, and how many jobs with an id it left unchecked. A lookup that fails is an error:
// the caller decides whether to send anyway.
func (f JobFinder) FindEarlier(ctx context.Context, jobs []Line) (found []Earlier, checked, unchecked int, err error) {
	// A job skipped ended without running: sending its id again is another submission, which may
	// run, so it is no copy, and its fate is not read.
	f.Admission = nil
	leases := map[string][]lease.Lease{} // by type, read once
	for _, l := range jobs {
		if l.ID == "" {
			continue
		}
		if checked == MaxEarlierChecks {
			unchecked++
			continue
		}
		checked++
		ls, ok := leases[l.Type]
		if !ok {
			if ls, err = f.Leases.ListType(ctx, l.Type); err != nil {
				return nil, checked, 0, fmt.Errorf("read the leases of type %s: %w", l.Type, err)
			}
			leases[l.Type] = ls
		}
		// The jobs are sent as the caller's: a line repeats only the caller's own job (a job
		// without a sender when the caller is unknown, as before senders were part of a job).
		v, err := f.show(ctx, l.Type, job.Sender(f.Caller, ""), l.Key, l.ID, ls)
		if err != nil {
			return nil, checked, 0, err
		}
		if v.Lease == nil && len(v.Executions) == 0 {
			continue
		}
		e := Earlier{No: l.No, Type: l.Type, Key: l.Key, ID: l.ID, State: v.State}
		if n := len(v.Executions); n > 0 {
			e.Execution, e.Status, e.Batch = v.Executions[n-1].Name, v.Executions[n-1].Status, v.Executions[n-1].batch
		}
		if v.Lease != nil {
			e.Lane, e.Batch = v.Lease.Lane, leaseBatch(ls, v.Sender, l.Key, l.ID)
		}
		found = append(found, e)
	}
	return found, checked, unchecked, nil
}

// leaseBatch is the batch of the lease of sender's and key's job id among a type's leases.
func leaseBatch(leases []lease.Lease, sender, key, id string) string {
	for _, l := range leases {
		if l.JobSender == sender && l.JobKey == key && l.JobID == id {
			return l.Batch
		}
	}
	return ""
}

// WithoutEarlier is jobs without the lines found submitted before (FindEarlier).
func WithoutEarlier(jobs []Line, found []Earlier) []Line {
	if len(found) == 0 {
		return jobs
	}
	drop := make(map[int]bool, len(found))
	for _, e := range found {
		drop[e.No] = true
	}
	out := make([]Line, 0, len(jobs)-len(found))
	for _, l := range jobs {
		if !drop[l.No] {
			out = append(out, l)
		}
	}
	return out
}
