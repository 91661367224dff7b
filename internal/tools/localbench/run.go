package localbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// Job is one measured job. Times are seconds since the run's time zero (just before the first
// job's scheduled submission).
type Job struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
	// Seconds is the job's duration, the sample workflow's input.seconds.
	Seconds float64 `json:"seconds"`
	// Scheduled is when the workload said to submit it; Submit when SendMessage was called.
	Scheduled float64 `json:"scheduled"`
	Submit    float64 `json:"submit"`
	// Start is its execution's start date; WorkEnd when the execution entered its release state;
	// Stop its stop date (the lane's message and lease are gone by then).
	Start   float64 `json:"start"`
	WorkEnd float64 `json:"workEnd"`
	Stop    float64 `json:"stop"`
	// Lane is the lane the limiter gave it (the execution input's job.lane).
	Lane int `json:"lane"`
	// Executions counts its executions; each job should have exactly one.
	Executions int    `json:"executions"`
	Status     string `json:"status"`
}

// Wait is how long the job waited from its submission to its execution's start.
func (j Job) Wait() float64 { return j.Start - j.Submit }

// Measurement is what one run on the local stack recorded.
type Measurement struct {
	Config Config `json:"config"`
	// Name is the workload's name, part of every job id.
	Name string `json:"name"`
	Jobs []Job  `json:"jobs"`
	// Peak is the most executions of the type that worked at one instant (Step Functions' records:
	// start to entering the release state).
	Peak int `json:"peak"`
	// StackSeconds is how long the stack took to come up and run the warm-up job; RunSeconds the
	// time from time zero until every job had ended.
	StackSeconds float64 `json:"stackSeconds"`
	RunSeconds   float64 `json:"runSeconds"`
	// SubmitLag is the largest delay of a submission behind its schedule.
	SubmitLag float64 `json:"submitLag"`
}

// RunOptions shape a run on the local stack.
type RunOptions struct {
	// Root is the repository root (template.yaml); default: found from the working directory.
	Root string
	// Progress receives a line every ProgressEvery while the run goes (default: discarded).
	Progress      io.Writer
	ProgressEvery time.Duration
	// Log receives the stack's and the handlers' logs (default: discarded).
	Log *slog.Logger
	// Timeout bounds the run from time zero (default: 10 minutes).
	Timeout time.Duration
}

// Measure starts a local stack with the type's limit c.Lanes and LaneStrategy c.Strategy, submits
// c's workload to the general queue, each job at its scheduled time with input {"seconds":
// duration}, waits for every job to end and reads what Step Functions recorded.
func Measure(ctx context.Context, c Config, o RunOptions) (Measurement, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Measurement{}, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	w := c.Workload()
	m := Measurement{Config: c, Name: w.Name}
	began := time.Now()
	s, err := stack.Start(ctx, stack.Options{
		Root: o.Root,
		Parameters: map[string]string{
			"TypeLimits":   fmt.Sprintf("%s=%d,%s=1", sim.JobType, c.Lanes, WarmupType),
			"DefaultLimit": "0",
			"LaneStrategy": c.Strategy,
		},
		// A start that finds its lane's lease not yet deleted by the release is retried after
		// this (jittered up to twice as long); the template's 5 s would dwarf the durations.
		FunctionEnv: map[string]string{"START_RETRY_SECONDS": "1"},
		Log:         o.Log,
	})
	if err != nil {
		return m, fmt.Errorf("start the local stack: %w", err)
	}
	defer s.Close()
	if err := s.StartRuntime(ctx); err != nil {
		return m, fmt.Errorf("start the local runtime: %w", err)
	}
	c2 := s.Clients()
	info := s.Info()
	general, sm := info.Output("GeneralQueueUrl"), info.Output("SampleStateMachineArn")
	if general == "" || sm == "" {
		return m, fmt.Errorf("the stack's outputs lack GeneralQueueUrl or SampleStateMachineArn: %v", info.Outputs)
	}
	if err := warmUp(ctx, c2, general, sm); err != nil {
		return m, err
	}
	m.StackSeconds = time.Since(began).Seconds()
	fmt.Fprintf(o.Progress, "localbench %s: stack up and warm in %.1fs; submitting %d jobs over %.0fs\n",
		c.Strategy, m.StackSeconds, c.Jobs, w.Arrivals[len(w.Arrivals)-1])

	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	t0 := time.Now()
	submits := make([]time.Time, c.Jobs)
	var submitted atomic.Int64
	subErr := make(chan error, 1)
	go func() { subErr <- submitAll(ctx, c2, general, w, t0, submits, &submitted) }()

	var (
		subDone   bool
		lastPrint time.Time
		tick      = time.NewTicker(500 * time.Millisecond)
	)
	defer tick.Stop()
	for {
		select {
		case err := <-subErr:
			if err != nil {
				return m, err
			}
			subDone = true
		case <-ctx.Done():
			return m, fmt.Errorf("run did not end within %s: %w", o.Timeout, ctx.Err())
		case <-tick.C:
		}
		if !subDone {
			if time.Since(lastPrint) < o.ProgressEvery {
				continue
			}
		}
		counts, err := countExecutions(ctx, c2, sm, sim.JobType)
		if err != nil {
			return m, err
		}
		if bad := counts[sfntypes.ExecutionStatusFailed] + counts[sfntypes.ExecutionStatusTimedOut] + counts[sfntypes.ExecutionStatusAborted]; bad > 0 {
			return m, fmt.Errorf("%d executions of %s did not succeed (%v); the workload's jobs should all succeed", bad, sim.JobType, counts)
		}
		done := subDone && counts[sfntypes.ExecutionStatusSucceeded] >= c.Jobs
		if done || time.Since(lastPrint) >= o.ProgressEvery {
			lastPrint = time.Now()
			fmt.Fprintf(o.Progress, "localbench %s: %5.1fs  %d/%d submitted  %d running (limit %d)  %d ended\n",
				c.Strategy, time.Since(t0).Seconds(), submitted.Load(), c.Jobs, counts[sfntypes.ExecutionStatusRunning], c.Lanes,
				counts[sfntypes.ExecutionStatusSucceeded])
		}
		if done {
			break
		}
	}
	m.RunSeconds = time.Since(t0).Seconds()
	xs, err := observe.Collect(ctx, c2.SFN, []string{sm})
	if err != nil {
		return m, err
	}
	if err := m.fill(w, t0, submits, xs); err != nil {
		return m, err
	}
	return m, nil
}

// fill turns the submissions and executions into the measurement's jobs and peak.
func (m *Measurement) fill(w sim.Workload, t0 time.Time, submits []time.Time, xs []observe.Execution) error {
	sec := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return t.Sub(t0).Seconds()
	}
	byID := map[string]int{}
	m.Jobs = make([]Job, w.Len())
	for i := range w.Len() {
		id := w.Job(i).ID
		byID[id] = i
		m.Jobs[i] = Job{Index: i, ID: id, Seconds: w.Durations[i], Scheduled: w.Arrivals[i], Submit: sec(submits[i])}
		m.SubmitLag = max(m.SubmitLag, m.Jobs[i].Submit-m.Jobs[i].Scheduled)
	}
	var mine []observe.Execution
	for _, x := range xs {
		if x.Job.Type != sim.JobType {
			continue
		}
		i, ok := byID[x.Job.ID]
		if !ok {
			return fmt.Errorf("execution %s is of a job the workload does not have (%s)", x.Name, x.Job.ID)
		}
		mine = append(mine, x)
		j := &m.Jobs[i]
		j.Executions++
		if j.Executions == 1 || sec(x.Start) < j.Start {
			j.Start, j.WorkEnd, j.Stop, j.Lane, j.Status = sec(x.Start), sec(x.WorkEnd), sec(x.Stop), x.Job.Lane, x.Status
		}
	}
	var problems []string
	for _, j := range m.Jobs {
		if j.Executions != 1 || j.Status != string(sfntypes.ExecutionStatusSucceeded) {
			problems = append(problems, fmt.Sprintf("%s: %d executions, %s", j.ID, j.Executions, j.Status))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("want one SUCCEEDED execution per job: %s", strings.Join(problems[:min(len(problems), 5)], "; "))
	}
	m.Peak = observe.Peaks(mine, time.Now())[sim.JobType].Max
	return nil
}

// warmUp runs one job of WarmupType through the stack and waits for its execution to succeed.
func warmUp(ctx context.Context, c app.Clients, general, sm string) error {
	body := fmt.Sprintf(`{"type":%q,"id":"warmup-1","input":{"seconds":0}}`, WarmupType)
	if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &general, MessageBody: &body}); err != nil {
		return fmt.Errorf("submit the warm-up job: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		counts, err := countExecutions(ctx, c, sm, WarmupType)
		if err != nil {
			return err
		}
		if counts[sfntypes.ExecutionStatusSucceeded] > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return errors.New("the warm-up job did not succeed within a minute")
}

// submitAll sends job i of w at t0 + its arrival, recording when each SendMessage was called.
func submitAll(ctx context.Context, c app.Clients, url string, w sim.Workload, t0 time.Time, submits []time.Time, n *atomic.Int64) error {
	for i := range w.Len() {
		at := t0.Add(time.Duration(w.Arrivals[i] * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		j := w.Job(i)
		body, err := json.Marshal(map[string]any{"type": j.Type, "id": j.ID, "input": map[string]any{"seconds": int(w.Durations[i])}})
		if err != nil {
			return err
		}
		submits[i] = time.Now()
		if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(string(body))}); err != nil {
			return fmt.Errorf("submit job %s: %w", j.ID, err)
		}
		n.Add(1)
	}
	return nil
}

// countExecutions counts the executions of type typ by status (execution names are
// {type}-{id}-{attempt}, and a type has no "-").
func countExecutions(ctx context.Context, c app.Clients, sm, typ string) (map[sfntypes.ExecutionStatus]int, error) {
	out := map[sfntypes.ExecutionStatus]int{}
	p := sfn.NewListExecutionsPaginator(c.SFN, &sfn.ListExecutionsInput{StateMachineArn: &sm})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list executions: %w", err)
		}
		for _, e := range page.Executions {
			if !strings.HasPrefix(aws.ToString(e.Name), typ+"-") {
				continue
			}
			out[e.Status]++
		}
	}
	return out, nil
}
