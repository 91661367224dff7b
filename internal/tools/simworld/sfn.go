package simworld

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// Step Functions (Standard) as documented: StartExecution is idempotent for the same name and
// input while that execution runs, and answers ExecutionAlreadyExists for a closed one or another
// input (names are unique for 90 days); DescribeExecution and ListExecutions are eventually
// consistent (the faultStale answers: an execution started in the last StaleWindow may be missing,
// one closed in it may still show RUNNING).

// StaleWindow is how far behind an eventually consistent Step Functions read may be.
const StaleWindow = 2 * time.Second

const (
	sampleSM = "arn:aws:states:us-east-1:123456789012:stateMachine:sample"
	bareSM   = "arn:aws:states:us-east-1:123456789012:stateMachine:bare"
)

type execution struct {
	arn, name, sm, input string
	status               sfntypes.ExecutionStatus
	start, stop          time.Time
	errName, cause       string
	meta                 job.Meta
	jk                   string // type/id
	spec                 *jobSpec
	// released: the execution's work is over and only its Release step (and last transition) is
	// left; it no longer counts as running for the limits (the Release step frees the lane before
	// it returns, by design).
	released bool
}

// running says whether e counts against its type's limit: started and neither closed nor past
// its Release step.
func (e *execution) running() bool { return e.status == sfntypes.ExecutionStatusRunning && !e.released }

type sfnService struct {
	w     *World
	execs map[string]*execution
	order []*execution
	// open are the executions not closed, in start order.
	open []*execution
}

func validName(n string) bool {
	if n == "" || len(n) > 80 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (s *sfnService) start(sm, name, input string) (*sfn.StartExecutionOutput, error) {
	if sm != sampleSM && sm != bareSM {
		return nil, &sfntypes.StateMachineDoesNotExist{Message: aws.String("State Machine Does Not Exist: '" + sm + "'")}
	}
	if !validName(name) {
		return nil, &sfntypes.InvalidName{Message: aws.String("Invalid Name: '" + name + "'")}
	}
	if len(input) > 256*1024 {
		return nil, &sfntypes.InvalidExecutionInput{Message: aws.String("input is over 256 KiB")}
	}
	arn := job.ExecutionArn(sm, name)
	if e, ok := s.execs[arn]; ok {
		if e.status == sfntypes.ExecutionStatusRunning && e.input == input {
			s.w.trace(e.meta.Type+"-"+e.meta.ID, "sfn.start %s again: same execution", name)
			return &sfn.StartExecutionOutput{ExecutionArn: aws.String(arn), StartDate: aws.Time(e.start)}, nil
		}
		return nil, &sfntypes.ExecutionAlreadyExists{Message: aws.String("Execution Already Exists: '" + arn + "'")}
	}
	now := s.w.now()
	e := &execution{arn: arn, name: name, sm: sm, input: input, status: sfntypes.ExecutionStatusRunning, start: now}
	var in job.ExecutionInput
	if json.Unmarshal([]byte(input), &in) == nil {
		e.meta = in.Job
		e.jk = jobKeyOf(in.Job.Type, in.Job.Sender, in.Job.Key, in.Job.ID)
		e.spec = s.w.jobs[e.jk]
	}
	s.execs[arn] = e
	s.order = append(s.order, e)
	s.open = append(s.open, e)
	s.w.trace(e.meta.Type+"-"+e.meta.ID, "sfn.start %s lane=%d attempt=%d", name, e.meta.Lane, e.meta.Attempt)
	s.w.started(e)
	s.run(e)
	return &sfn.StartExecutionOutput{ExecutionArn: aws.String(arn), StartDate: aws.Time(now)}, nil
}

// run plays the workflow: the work takes the job's duration and fails when the job asks to; the
// sample machine then calls the releaser (its Release or ReleaseFailed step, with the ASL's
// retries); the bare one ends at once. An execution longer than the timeout ends TIMED_OUT
// without its Release step.
func (s *sfnService) run(e *execution) {
	d, fail := time.Second, false
	if e.spec != nil {
		d = e.spec.duration
		fail = e.spec.fail || e.meta.Attempt <= e.spec.failAttempts
	}
	if d >= s.w.cfg.ExecutionTimeout {
		s.w.sched.after(s.w.cfg.ExecutionTimeout, func() {
			s.close(e, sfntypes.ExecutionStatusTimedOut, "States.Timeout", "")
		})
		return
	}
	s.w.sched.after(d, func() {
		if e.status != sfntypes.ExecutionStatusRunning {
			return
		}
		if e.sm == bareSM {
			if fail {
				s.close(e, sfntypes.ExecutionStatusFailed, "JobFailed", "the job input asked the work to fail")
			} else {
				s.close(e, sfntypes.ExecutionStatusSucceeded, "", "")
			}
			return
		}
		outcome, errName := "succeeded", ""
		if fail {
			outcome, errName = "failed", "JobFailed"
		}
		ev := map[string]any{"source": "workflow", "outcome": outcome, "job": e.meta, "executionArn": e.arn}
		if fail {
			ev["error"], ev["cause"] = errName, "the job input asked the work to fail"
		}
		raw, _ := json.Marshal(ev)
		e.released = true
		s.releaseStep(e, raw, 0, fail)
	})
}

// releaseStep invokes the releaser synchronously, retried as the ASL says (6 attempts, 1 s
// doubling, full jitter); after the last failure the success path ends SUCCEEDED
// (DoneReleasePending) and the failure path ends FAILED.
func (s *sfnService) releaseStep(e *execution, raw []byte, try int, fail bool) {
	if e.status != sfntypes.ExecutionStatusRunning {
		return
	}
	s.w.invokeReleaser("release-step", e.meta.Type, raw, func(err error) {
		if e.status != sfntypes.ExecutionStatusRunning {
			return
		}
		if err == nil {
			s.w.sched.after(s.w.latency(), func() {
				if fail {
					s.close(e, sfntypes.ExecutionStatusFailed, "JobFailed", "the job's work failed; its lane was released with outcome failed")
				} else {
					s.close(e, sfntypes.ExecutionStatusSucceeded, "", "")
				}
			})
			return
		}
		if try+1 >= 7 {
			if fail {
				s.close(e, sfntypes.ExecutionStatusFailed, "States.TaskFailed", err.Error())
			} else {
				s.close(e, sfntypes.ExecutionStatusSucceeded, "", "")
			}
			return
		}
		backoff := time.Second << try
		s.w.sched.after(time.Duration(s.w.rng.Int64N(int64(backoff)+1)), func() { s.releaseStep(e, raw, try+1, fail) })
	})
}

func (s *sfnService) close(e *execution, st sfntypes.ExecutionStatus, errName, cause string) {
	if e.status != sfntypes.ExecutionStatusRunning {
		return
	}
	e.status, e.stop, e.errName, e.cause = st, s.w.now(), errName, cause
	for i, x := range s.open {
		if x == e {
			s.open = append(s.open[:i], s.open[i+1:]...)
			break
		}
	}
	s.w.trace(e.meta.Type+"-"+e.meta.ID, "sfn.close %s %s", e.name, st)
	s.w.closed(e)
	// EventBridge rules of template.yaml: StatusChange (FAILED, TIMED_OUT, ABORTED of every
	// machine), Succeeded (SUCCEEDED of the bare machine).
	if st != sfntypes.ExecutionStatusSucceeded || e.sm == bareSM {
		s.w.statusEvent(e)
	}
}

func (s *sfnService) describe(arn string, stale bool) (*sfn.DescribeExecutionOutput, error) {
	e, ok := s.execs[arn]
	now := s.w.now()
	if !ok || (stale && now.Sub(e.start) < StaleWindow) {
		return nil, &sfntypes.ExecutionDoesNotExist{Message: aws.String("Execution Does Not Exist: '" + arn + "'")}
	}
	out := &sfn.DescribeExecutionOutput{
		ExecutionArn: aws.String(e.arn), StateMachineArn: aws.String(e.sm), Name: aws.String(e.name),
		Status: e.status, Input: aws.String(e.input), StartDate: aws.Time(e.start),
	}
	if stale && e.status != sfntypes.ExecutionStatusRunning && now.Sub(e.stop) < StaleWindow {
		out.Status = sfntypes.ExecutionStatusRunning
		return out, nil
	}
	if e.status != sfntypes.ExecutionStatusRunning {
		out.StopDate = aws.Time(e.stop)
		if e.errName != "" {
			out.Error, out.Cause = aws.String(e.errName), aws.String(e.cause)
		}
	}
	return out, nil
}

func (s *sfnService) list(in *sfn.ListExecutionsInput, stale bool) (*sfn.ListExecutionsOutput, error) {
	sm := aws.ToString(in.StateMachineArn)
	now := s.w.now()
	out := &sfn.ListExecutionsOutput{}
	for _, e := range s.order {
		if e.sm != sm {
			continue
		}
		st := e.status
		if stale {
			if now.Sub(e.start) < StaleWindow {
				continue
			}
			if st != sfntypes.ExecutionStatusRunning && now.Sub(e.stop) < StaleWindow {
				st = sfntypes.ExecutionStatusRunning
			}
		}
		if in.StatusFilter != "" && st != in.StatusFilter {
			continue
		}
		item := sfntypes.ExecutionListItem{ExecutionArn: aws.String(e.arn), StateMachineArn: aws.String(e.sm), Name: aws.String(e.name), Status: st, StartDate: aws.Time(e.start)}
		out.Executions = append(out.Executions, item)
	}
	return out, nil
}

// stopCall is a StopExecution call (the overflow rule cancel): as on AWS, a RUNNING execution
// ends ABORTED with the call's error and cause, and its Release step never runs; one already closed
// is left as it is; an unknown ARN is ExecutionDoesNotExist.
func (s *sfnService) stopCall(arn, errName, cause string) (*sfn.StopExecutionOutput, error) {
	e, ok := s.execs[arn]
	if !ok {
		return nil, &sfntypes.ExecutionDoesNotExist{Message: aws.String("Execution Does Not Exist: '" + arn + "'")}
	}
	s.close(e, sfntypes.ExecutionStatusAborted, errName, cause)
	return &sfn.StopExecutionOutput{StopDate: aws.Time(e.stop)}, nil
}

// stop is an operator's StopExecution: the execution ends ABORTED, its Release step never runs.
func (s *sfnService) stop(e *execution) {
	s.close(e, sfntypes.ExecutionStatusAborted, "", "stopped by the operator")
}

// jobKey names a job as the limiter does: its type, key and id ("{type}/{id}", "{type}/{id}/{key}"
// with a key), so two keys' jobs with one id are two jobs to every invariant.
// jobKeyOf names the job of sender (job.Job.Sender; from a dead letter, its sender attribute) as
// the simulation does: a job is its type, sender, key and id. The workload's producer's jobs are
// named by jobKey, as before senders were part of a job; another sender's have "@" and the producer
// they are of: the sender itself, or for the producer's (the operator's) redrive on behalf of
// another, "{producer}>{other}", the other. So the operator's redrive of another tenant's job names
// that tenant's job, while a tenant's message naming the producer (a forged sfnlimitSender) is the
// tenant's own "@{tenant}>{producer}".
func jobKeyOf(typ, sender, key, id string) string {
	k, origin := jobKey(typ, key, id), sender
	if p, other, ok := strings.Cut(sender, ">"); ok && p == producerPrincipal {
		origin = other
	}
	if origin == "" || origin == producerPrincipal {
		return k
	}
	return k + "@" + origin
}

// producerPrincipal is the principal of the workload's producer (and operator), ProducerSenderID.
var producerPrincipal = batch.Principal(ProducerSenderID)

func jobKey(typ, key, id string) string {
	if key == "" {
		return typ + "/" + id
	}
	return typ + "/" + id + "/" + key
}

// keyOfBody is the key of a job body (a producer's, or a dead letter's, which is one).
func keyOfBody(body string) string {
	var b struct {
		Key string `json:"key"`
	}
	_ = json.Unmarshal([]byte(body), &b)
	return b.Key
}

func typeOfGroup(g string) string {
	if i := strings.IndexAny(g, "-#!"); i > 0 {
		return g[:i]
	}
	return g
}
