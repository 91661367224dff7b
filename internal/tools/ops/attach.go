package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// StackAccess is what a stack lets the limiter start, as read from the stack. The template grants
// states:StartExecution (and DescribeExecution) on an explicit list: its own state machines and
// those of the ExtraStateMachineArns parameter; its status-change rules match the same list. So a
// state machine outside the list needs a redeploy, and one inside it needs nothing more.
type StackAccess struct {
	// Own are the stack's own state machines, by output name (the sample, the bare workflow).
	Own map[string]string
	// Extra is the ExtraStateMachineArns parameter, and ExtraErr why it could not be read.
	Extra    []string
	ExtraErr error
	// Releaser is the releaser function's name, which a workflow's Release step names ("": unknown).
	Releaser string
	// Region is the stack's region, for the StartExecution quota.
	Region string
	// Status is the deployed stack's status ("" for the local stack or when unknown).
	Status string
	// Redeploy returns the command that runs the stack with ExtraStateMachineArns set to extra.
	Redeploy func(extra []string) string
	// RedeployNotes go with the redeploy command.
	RedeployNotes []string
}

// startable says whether the stack's roles may start arn, and why. A version or alias ARN is
// startable when its state machine is listed: IAM authorizes a version or alias by the state
// machine's ARN, and the status-change rules and the sweep's ListExecutions name the state machine.
// A version or alias listed by itself grants nothing.
func (s *StackAccess) startable(arn string) (bool, string) {
	arn = job.UnqualifiedStateMachine(arn)
	names := make([]string, 0, len(s.Own))
	for n := range s.Own {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if s.Own[n] == arn {
			return true, "the stack's own state machine (" + n + ")"
		}
	}
	for _, x := range s.Extra {
		if x == arn {
			return true, "listed in the stack's ExtraStateMachineArns"
		}
	}
	return false, ""
}

// ParseArnList reads a CommaDelimitedList parameter value such as ExtraStateMachineArns ("" is
// none).
func ParseArnList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// appendNew returns the list a redeploy sets ExtraStateMachineArns to: list's state machine ARNs,
// then arn's state machine unless it is there already. A version or alias ARN is dropped: it grants
// nothing (IAM authorizes by the state machine's ARN) and the template refuses one. list is not
// changed.
func appendNew(list []string, arn string) []string {
	var out []string
	for _, x := range append(slices.Clone(list), job.UnqualifiedStateMachine(arn)) {
		if x == job.UnqualifiedStateMachine(x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// SamDeploy builds the sam deploy line that sets ExtraStateMachineArns on a deployed stack. On an
// existing stack, sam deploy keeps every parameter not given on its command line at the stack's
// current value (UsePreviousValue), so the line names only this one. A --parameter-overrides on the
// command line replaces samconfig.toml's parameter_overrides for that deploy (aws-sam-cli issue
// 2380), which is why the others are not restated from there either.
type SamDeploy struct {
	Stack, Region, Profile, ConfigEnv string
}

// Command returns the line.
func (d SamDeploy) Command(extra []string) string {
	parts := []string{"sam", "deploy"}
	if d.ConfigEnv != "" && d.ConfigEnv != "default" {
		parts = append(parts, "--config-env", ShellQuote(d.ConfigEnv))
	}
	if d.Stack != "" {
		parts = append(parts, "--stack-name", ShellQuote(d.Stack))
	}
	if d.Region != "" {
		parts = append(parts, "--region", ShellQuote(d.Region))
	}
	if d.Profile != "" {
		parts = append(parts, "--profile", ShellQuote(d.Profile))
	}
	// Always quoted: it is one argument of sam's, whatever the ARNs hold.
	parts = append(parts, "--parameter-overrides", singleQuote("ExtraStateMachineArns="+strings.Join(extra, ",")))
	return strings.Join(parts, " ")
}

// LocalUp builds the `sfnlimit local up` line that runs the local stack again with
// ExtraStateMachineArns set: the parameters it runs with now, and the new list.
type LocalUp struct {
	Info   string
	Params map[string]string
}

// Command returns the line.
func (l LocalUp) Command(extra []string) string {
	parts := []string{"sfnlimit", "local", "up"}
	if l.Info != "" {
		parts = append(parts, "--info", ShellQuote(l.Info))
	}
	keys := make([]string, 0, len(l.Params))
	for k := range l.Params {
		if k != "ExtraStateMachineArns" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, "--param", ShellQuote(k+"="+l.Params[k]))
	}
	parts = append(parts, "--param", singleQuote("ExtraStateMachineArns="+strings.Join(extra, ",")))
	return strings.Join(parts, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// ShellQuote returns s as one word of a POSIX shell: bare when nothing in it is special.
func ShellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return singleQuote(s)
}

func singleQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Attach is what `sfnlimit attach` asks for: limit a state machine as a job type.
type Attach struct {
	StateMachineArn string
	Type            string
	Limit           int
	// Release is the type's release mode; "" is events, as an attached workflow usually has no
	// Release state.
	Release     string
	MaxAttempts *int
}

// Validate checks the request with the limiter's rules, before anything is read or written.
func (a Attach) Validate() error {
	if !stateMachineArnRe.MatchString(a.StateMachineArn) {
		return usagef("%q is not a state machine ARN (%s)", a.StateMachineArn, stateMachineArnForm)
	}
	if err := job.ValidateType(a.Type); err != nil {
		return usagef("--type: %v", err)
	}
	if a.Limit < 1 || a.Limit >= config.MaxInFlight {
		return usagef("--limit %d must be at least 1 and under the SQS FIFO in-flight quota of %d", a.Limit, config.MaxInFlight)
	}
	if a.Release != "" {
		if _, err := parseReleaseFlag(a.Release); err != nil {
			return err
		}
	}
	if a.MaxAttempts != nil {
		if err := validateAttempts(*a.MaxAttempts); err != nil {
			return err
		}
	}
	return nil
}

func (a Attach) release() string {
	if a.Release == "" {
		return config.ReleaseEvents
	}
	m, _ := parseReleaseFlag(a.Release) // checked by Validate
	return m
}

// Results of a check.
const (
	CheckOK   = "ok"
	CheckNote = "note"
	CheckWarn = "warn"
	CheckFail = "fail"
)

// Check is one thing attach looked at, and what it found.
type Check struct {
	What   string `json:"what"`
	Result string `json:"result"` // CheckOK, CheckNote, CheckWarn or CheckFail
	Detail string `json:"detail"`
}

// AttachResult is what attach found, and what it wrote.
type AttachResult struct {
	StateMachineArn string  `json:"stateMachineArn"`
	Type            string  `json:"type"`
	Release         string  `json:"release"`
	Checks          []Check `json:"checks"`
	// Redeploy is the command that lets the stack start the state machine, when it cannot yet, and
	// RedeployNotes what to know about it.
	Redeploy      string   `json:"redeploy,omitempty"`
	RedeployNotes []string `json:"redeployNotes,omitempty"`
	// Written is the live override written; nil when attach refused.
	Written *OverrideView `json:"written,omitempty"`
	Set     *SetResult    `json:"set,omitempty"`
	// Submit is a command line that submits a job of the type (set by the command line).
	Submit string `json:"submit,omitempty"`
}

// ErrAttachRefused means attach found something that stops the type from running and wrote nothing.
var ErrAttachRefused = errors.New("attach refused, nothing written")

// Attach checks everything it can about running a state machine as a job type, and writes the
// type's live override (limit, state machine, release mode, and attempts if given; other stored
// fields stay) only if nothing stops it: the machine exists, is Standard and active, lives in the
// stack's region and account, the stack's roles may start it (else the redeploy command is in the
// result), and the limits stay under the SQS FIFO in-flight quota. The result lists each check,
// also when attach refuses (ErrAttachRefused).
func (e ConfigEditor) Attach(ctx context.Context, a Attach) (AttachResult, error) {
	if err := a.Validate(); err != nil {
		return AttachResult{}, err
	}
	arn := a.StateMachineArn
	res := AttachResult{StateMachineArn: arn, Type: a.Type, Release: a.release()}
	check := func(what, result, detail string) {
		res.Checks = append(res.Checks, Check{What: what, Result: result, Detail: detail})
	}
	refuse := func(what, detail string) (AttachResult, error) {
		check(what, CheckFail, detail)
		return res, fmt.Errorf("%w: %s", ErrAttachRefused, detail)
	}

	// The state machine itself. The starter's client calls its own region, and its role belongs to
	// its own account: a machine elsewhere is refused before anything is asked.
	if sample := e.Defaults.StateMachineArn; sample != "" && arnScope(sample) != arnScope(arn) {
		return refuse("region and account", fmt.Sprintf("state machine %s is in %s, the limiter in %s: the starter starts state machines of its own region and account only", arn, arnScope(arn), arnScope(sample)))
	}
	if e.SFN == nil {
		return refuse("state machine", "no Step Functions client to describe it with")
	}
	// A version or alias ARN starts the version or alias, but its executions, its status events and
	// its IAM are the state machine's: the machine is what is described and must be listed.
	// DescribeStateMachine takes a version's ARN but not an alias's.
	machine := job.UnqualifiedStateMachine(arn)
	out, err := e.SFN.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(machine)})
	var missing *sfntypes.StateMachineDoesNotExist
	switch {
	case errors.As(err, &missing):
		return refuse("state machine", fmt.Sprintf("state machine %s does not exist", machine))
	case err != nil:
		return refuse("state machine", fmt.Sprintf("could not describe state machine %s (%v): attach checks that it is Standard before it writes anything (it needs states:DescribeStateMachine)", arn, err))
	}
	name := aws.ToString(out.Name)
	if name == "" {
		name = shortArn(arn)
	}
	if out.Type == sfntypes.StateMachineTypeExpress {
		return refuse("state machine", fmt.Sprintf("state machine %s is EXPRESS; the limiter runs Standard workflows only. Express workflows send no status events (events mode could not release their lanes), and their starts are neither idempotent by name nor visible to DescribeExecution, which the starter and the sweep rely on", name))
	}
	if out.Status != "" && out.Status != sfntypes.StateMachineStatusActive {
		return refuse("state machine", fmt.Sprintf("state machine %s is %s, not ACTIVE", name, out.Status))
	}
	check("state machine", CheckOK, fmt.Sprintf("%s exists: STANDARD, ACTIVE", name))
	if q := strings.TrimPrefix(arn, machine+":"); machine != arn {
		kind := "alias"
		if strings.Trim(q, "0123456789") == "" {
			kind = "version"
		}
		check("version or alias", CheckNote, fmt.Sprintf("the type starts %s %s of %s; its executions are %s's (named without the %s), which the stack's roles, status-change rules and sweep name. Attach does not check that the %s exists: Step Functions refuses a start on a missing one, and its job is dead-lettered (start_refused)",
			kind, q, name, name, kind, kind))
	}
	if e.Stack != nil && e.Stack.Releaser != "" {
		calls := strings.Contains(aws.ToString(out.Definition), e.Stack.Releaser)
		switch {
		case res.Release == config.ReleaseStep && !calls:
			check("release", CheckWarn, fmt.Sprintf("step mode, but the definition of %s does not name the releaser (%s): no Release state releases its lanes, so only status events and the sweep do, later. Attach it in events mode (the default), or add the Release states (statemachine/README.md)", name, e.Stack.Releaser))
		case res.Release == config.ReleaseStep:
			check("release", CheckOK, "step mode: its Release state calls the releaser")
		case calls:
			check("release", CheckNote, fmt.Sprintf("events mode, and %s also calls the releaser (a Release state): each lane is still released once; --release step uses the state and saves the status event's delay", name))
		default:
			check("release", CheckOK, "events mode: the execution's status-change event releases its lane, the workflow runs unchanged")
		}
	}

	// The stack's roles: an explicit list of state machines.
	if e.Stack == nil {
		return refuse("stack roles", "the stack's roles could not be read, so attach cannot tell whether the starter may start it")
	}
	if ok, why := e.Stack.startable(arn); ok {
		check("stack roles", CheckOK, why+": the starter may start it and describe its executions")
		check("status events", CheckOK, "the status-change rules match the same list, so its status events reach the releaser")
	} else {
		if e.Stack.ExtraErr != nil {
			return refuse("stack roles", fmt.Sprintf("could not read the stack's ExtraStateMachineArns parameter, which lists the state machines the starter may start: %v", e.Stack.ExtraErr))
		}
		if e.Stack.Redeploy != nil {
			res.Redeploy = e.Stack.Redeploy(appendNew(e.Stack.Extra, machine))
			res.RedeployNotes = e.Stack.RedeployNotes
		}
		return refuse("stack roles", fmt.Sprintf("the stack's roles may not start %s: it is neither the stack's own state machine nor in ExtraStateMachineArns (now: %s). Redeploy with it listed, which also makes the status-change rules match its events, then run attach again",
			name, listOrNone(e.Stack.Extra)))
	}
	if st := e.Stack.Status; strings.HasSuffix(st, "_IN_PROGRESS") || strings.HasSuffix(st, "_FAILED") {
		check("stack", CheckWarn, fmt.Sprintf("the stack is %s: its roles may not match its parameters yet", st))
	}

	// The override and the quota.
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return res, err
	}
	before, err := e.view(ctx, ovs)
	if err != nil {
		return res, err
	}
	o, rest := splitOverrides(ovs, a.Type)
	was := before.typeView(a.Type, e.Defaults, ovs)
	o.Limit, o.StateMachineArn, o.Release = a.Limit, arn, res.Release
	if a.MaxAttempts != nil {
		o.MaxAttempts = *a.MaxAttempts
	}
	if err := o.Validate(); err != nil {
		return refuse("type", fmt.Sprintf("%v (the stored override of type %s keeps its other fields: fix them with config set, or config reset it)", err, a.Type))
	}
	switch {
	case was.Limit == 0:
		check("type", CheckOK, fmt.Sprintf("%s is a new type", a.Type))
	case was.StateMachineArn != arn:
		check("type", CheckWarn, fmt.Sprintf("%s ran state machine %s: its new jobs start %s, the jobs already started finish where they are", a.Type, shortArn(was.StateMachineArn), name))
	default:
		check("type", CheckOK, fmt.Sprintf("%s already runs %s: its limit is now %d", a.Type, name, a.Limit))
	}
	next := append(rest, o)
	if err := e.checkSet(ctx, next); err != nil {
		return refuse("quota", err.Error())
	}
	n := lanes(e.Defaults, next)
	bucket, refill := startQuota(e.Stack.Region)
	detail := fmt.Sprintf("limits add up to %d lanes of the SQS FIFO in-flight quota of %d. StartExecution refills %d/s in %s: %d lanes stay full only with jobs of %s s or longer on average",
		n, config.MaxInFlight, refill, regionText(e.Stack.Region), n, secondsText(float64(n)/float64(refill)))
	if n > bucket {
		check("quota", CheckWarn, fmt.Sprintf("%s, and they are more than StartExecution's bucket of %d: filling them all at once takes about %d s of throttled starts (each gives its lane back and is retried after StartRetrySeconds; nothing is lost). The quota is the account's in the region: raise it if that matters",
			detail, bucket, (n-bucket+refill-1)/refill))
	} else {
		check("quota", CheckOK, detail)
	}

	if err := e.Store.SetOverride(ctx, o); err != nil {
		return res, err
	}
	res.Written = overrideView(o)
	set, err := e.result(ctx, a.Type, before, nil)
	if err != nil {
		return res, err
	}
	set.written(e.CacheAge)
	res.Set = &set
	return res, nil
}

// arnScope is an ARN's partition, region and account ("aws:us-east-1:123456789012").
func arnScope(arn string) string {
	p := strings.SplitN(arn, ":", 6)
	if len(p) < 5 {
		return arn
	}
	return p[1] + ":" + p[3] + ":" + p[4]
}

// startQuota is Step Functions' StartExecution token bucket in a region: its size and its refill
// per second. The larger figures are those of US East (N. Virginia), US West (Oregon) and Europe
// (Ireland); the Step Functions quotas page has them, and they can be raised.
func startQuota(region string) (bucket, refill int) {
	switch region {
	case "us-east-1", "us-west-2", "eu-west-1":
		return 1300, 300
	}
	return 800, 150
}

// secondsText prints a few seconds to two significant digits, more as whole seconds.
func secondsText(s float64) string {
	if s >= 10 {
		return fmt.Sprintf("%.0f", s)
	}
	return fmt.Sprintf("%.2g", s)
}

func regionText(region string) string {
	if region == "" {
		return "the stack's region"
	}
	return region
}

func listOrNone(list []string) string {
	if len(list) == 0 {
		return "empty"
	}
	return strings.Join(list, ",")
}

// WriteTable prints what attach found and did.
func (r AttachResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "attach %s as type %s, release mode %s\n", r.StateMachineArn, r.Type, r.Release)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "  %-4s  %-13s  %s\n", c.Result, c.What, c.Detail)
	}
	if r.Redeploy != "" {
		fmt.Fprintf(w, "\nThe stack's roles may not start it yet. Redeploy with it listed in ExtraStateMachineArns:\n  %s\n", r.Redeploy)
		for _, n := range r.RedeployNotes {
			fmt.Fprintln(w, "note:", n)
		}
		fmt.Fprintln(w, "then run attach again.")
	}
	if r.Written == nil {
		return nil
	}
	fmt.Fprintf(w, "\nwrote the live override of type %s: %s\n", r.Type, r.Written.String())
	if r.Set != nil {
		if err := r.Set.WriteTable(w); err != nil {
			return err
		}
	}
	if r.Submit != "" {
		fmt.Fprintf(w, "\nSubmit a job (its execution's input is {\"job\": {...}, \"input\": <the job's input>}: the workflow reads its own at $.input):\n  %s\n", r.Submit)
	}
	return nil
}
