package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// Options shape a demo run.
type Options struct {
	Workload Workload
	// OutDir receives report.md, report.json, concurrency.svg and limiter.log.
	OutDir string
	// Fauxqs runs SQS on fauxqs instead of moto.
	Fauxqs bool
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Out receives the live view and the report; Live redraws in place (a terminal).
	Out  io.Writer
	Live bool
	// Strategy is the lane strategy of every type ("" is the template's default): one that can be
	// chosen (lane.CheckChoosable), not the retired least-loaded.
	Strategy string
	// Release is the release mode of every type (config.ReleaseStep or config.ReleaseEvents); ""
	// keeps each type's own (TypeSpec.Release).
	Release string
}

// Run starts a local stack, runs the workload on it and writes the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Strategy != "" {
		s, err := lane.CheckChoosable(o.Strategy)
		if err != nil {
			return nil, fmt.Errorf("demo strategy: %w", err)
		}
		o.Strategy = s
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	logf, err := os.Create(filepath.Join(o.OutDir, "limiter.log"))
	if err != nil {
		return nil, fmt.Errorf("create log file: %w", err)
	}
	defer logf.Close()
	log := slog.New(slog.NewJSONHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))

	w := o.Workload
	if o.Release != "" {
		mode, err := config.ParseReleaseMode(o.Release)
		if err != nil {
			return nil, fmt.Errorf("demo release mode: %w", err)
		}
		for i := range w.Types {
			w.Types[i].Release = mode
		}
	}
	params := map[string]string{"TypeLimits": w.TypeLimits(), "DefaultLimit": "0", "DefaultMaxAttempts": "3"}
	pools := ""
	if len(w.Pools) > 0 {
		params["Pools"], params["TypePools"] = w.PoolCaps(), w.TypePools()
		pools = fmt.Sprintf(", pools %s (%s)", w.PoolCaps(), w.TypePools())
	}
	strategy := "the default lane strategy"
	if o.Strategy != "" {
		params["LaneStrategy"] = o.Strategy
		strategy = "lane strategy " + o.Strategy
	}
	fmt.Fprintf(o.Out, "Starting the local stack (moto%s) with limits %s%s, %s, release modes %s ...\n", map[bool]string{true: ", SQS on fauxqs", false: ", SQS on moto"}[o.Fauxqs], w.TypeLimits(), pools, strategy, w.ReleaseModes())
	began := time.Now()
	s, err := stack.Start(ctx, stack.Options{
		Parameters: params,
		// The sweep looks every 5 s at leases and executions idle for 10 s: the local bus delivers a
		// status event about a second after its execution stopped, so on a healthy run the sweep
		// releases nothing (LeasesSwept 0), even on a busy machine.
		FunctionEnv: map[string]string{
			"START_RETRY_SECONDS": "1", "SWEEP_MIN_AGE_SECONDS": "10",
		},
		SweepEvery: 5 * time.Second, Fauxqs: o.Fauxqs, Log: log,
	})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	obs := s.Clients() // the demo's own reads and writes are not part of the limiter's cost
	info := s.Info()
	sm, bare := info.Output("SampleStateMachineArn"), info.Output("BareStateMachineArn")
	// Types in events mode run on the bare workflow: live config items, written before the
	// functions first read the config.
	store := config.NewDynamoStore(obs.DDB, info.Output("TableName"))
	for _, t := range w.Types {
		if t.Release == config.ReleaseEvents {
			if err := store.SetOverride(ctx, config.Override{Type: t.Type, StateMachineArn: bare, Release: config.ReleaseEvents}); err != nil {
				return nil, fmt.Errorf("put type %s on the bare workflow: %w", t.Type, err)
			}
		}
	}
	if err := s.StartRuntime(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "Stack ready in %.1fs at %s; handler logs in %s\n", time.Since(began).Seconds(), s.Info().Endpoint, logf.Name())

	producer := s.Counter("producer")
	c := app.NewClients(s.AWSConfig(producer))
	jobs := w.Jobs()
	// The demo's reads of its batches are not the limiter's cost either.
	batches := newBatchWatch(ledger.New(obs.DDB, info.Output("TableName")), jobs)
	batches.owner = info.SenderID
	if err := batches.open(ctx, time.Now()); err != nil {
		return nil, err
	}
	if len(batches.batches) > 0 {
		fmt.Fprintf(o.Out, "Opened batches %s\n", batches)
	}

	start := time.Now()
	batches.start = start
	if err := submit(ctx, c, info.Output("GeneralQueueUrl"), jobs); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "Submitted %d jobs (%d malformed) in %.1fs\n\n", len(jobs), countMalformed(jobs), time.Since(start).Seconds())

	v := &liveView{out: o.Out, live: o.Live, types: w.Types, pools: w.Pools}
	leases := lease.NewStore(obs.DDB, info.Output("TableName"))
	dlqURL := info.Output("DeadLetterQueueUrl")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var batchesRead time.Time
	const batchEvery = 3 * time.Second
	for {
		st, err := progress(ctx, obs, leases, []string{sm, bare}, dlqURL, w.Types)
		if err != nil {
			return nil, err
		}
		st.elapsed, st.total = time.Since(start), len(jobs)
		if time.Since(batchesRead) >= batchEvery {
			// A close is told by its time in the ledger, so the batches are read less often
			// than the rest: they would load the emulator's one core.
			batchesRead = time.Now()
			closed, err := batches.poll(ctx)
			if err != nil {
				return nil, err
			}
			v.note(closed)
		}
		v.draw(st)
		if st.succeeded+st.deadLettered >= len(jobs) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("demo did not finish within %s: %d of %d jobs ended", o.Timeout, st.succeeded+st.deadLettered, len(jobs))
		case <-tick.C:
		}
	}
	wall := time.Since(start)
	// A batch closes with its last job's record: in events mode that comes with the status event,
	// after the execution ended.
	if err := batches.settle(ctx, o.Out, 30*time.Second); err != nil {
		return nil, err
	}
	// Let the last releases and the runtime settle before counting calls.
	time.Sleep(3 * time.Second)
	s.StopRuntime()

	xs, err := observe.Collect(ctx, obs.SFN, []string{sm, bare})
	if err != nil {
		return nil, err
	}
	dead, err := drainDeadLetters(ctx, obs, dlqURL)
	if err != nil {
		return nil, err
	}
	rep := buildReport(w, jobs, xs, dead, wall, s)
	rep.Batches = batches.results()
	rep.Mismatches = append(rep.Mismatches, batchMismatches(rep.Batches)...)
	if err := rep.write(o.OutDir); err != nil {
		return nil, err
	}
	fmt.Fprintln(o.Out)
	rep.Print(o.Out)
	fmt.Fprintf(o.Out, "\nChart: %s\nReport: %s\n", filepath.Join(o.OutDir, "concurrency.svg"), filepath.Join(o.OutDir, "report.md"))
	return rep, nil
}

func countMalformed(jobs []Job) int {
	n := 0
	for _, j := range jobs {
		if j.Expect != "succeeded" && j.Expect != "dead-lettered" {
			n++
		}
	}
	return n
}

func submit(ctx context.Context, c app.Clients, url string, jobs []Job) error {
	entries := make([]sqstypes.SendMessageBatchRequestEntry, 0, len(jobs))
	for i, j := range jobs {
		entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(j.Body)})
	}
	// The oversized job alone is over SQS's batch size limit with others: send it by itself.
	var small, big []sqstypes.SendMessageBatchRequestEntry
	for _, e := range entries {
		if len(*e.MessageBody) > 200*1024 {
			big = append(big, e)
		} else {
			small = append(small, e)
		}
	}
	failed, err := sqsbatch.NewSender(c.SQS, url).Send(ctx, small)
	if err != nil {
		return err
	}
	for _, e := range big {
		if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: e.MessageBody}); err != nil {
			return fmt.Errorf("submit oversized job: %w", err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d jobs could not be submitted: %s %s", len(failed), failed[0].Code, failed[0].Message)
	}
	return nil
}

type status struct {
	running                 map[string]int
	succeeded, deadLettered int
	total                   int
	elapsed                 time.Duration
}

func progress(ctx context.Context, c app.Clients, leases *lease.Store, sms []string, dlq string, types []TypeSpec) (status, error) {
	st := status{running: map[string]int{}}
	for _, t := range types {
		ls, err := leases.ListType(ctx, t.Type)
		if err != nil {
			return st, err
		}
		for _, l := range ls {
			// A started job's lease is its claim (a start writes nothing after it).
			if l.Status == lease.Starting {
				st.running[t.Type]++
			}
		}
	}
	for _, sm := range sms {
		p := sfn.NewListExecutionsPaginator(c.SFN, &sfn.ListExecutionsInput{StateMachineArn: &sm, StatusFilter: sfntypes.ExecutionStatusSucceeded})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return st, fmt.Errorf("list executions: %w", err)
			}
			st.succeeded += len(page.Executions)
		}
	}
	out, err := c.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &dlq, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		return st, fmt.Errorf("read dead-letter queue depth: %w", err)
	}
	st.deadLettered, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	return st, nil
}

// DeadLetter is one message of the dead-letter queue.
type DeadLetter struct {
	Reason, Type, JobID, Error, Source string
}

func drainDeadLetters(ctx context.Context, c app.Clients, url string) ([]DeadLetter, error) {
	var out []DeadLetter
	for empty := 0; empty < 2; {
		r, err := c.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}, VisibilityTimeout: 60})
		if err != nil {
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		if len(r.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range r.Messages {
			a := func(k string) string { return aws.ToString(m.MessageAttributes[k].StringValue) }
			d := DeadLetter{Reason: a(deadletter.AttrReason), Type: a(deadletter.AttrType), JobID: a(deadletter.AttrJobID), Error: a(deadletter.AttrError), Source: a(deadletter.AttrSource)}
			if d.JobID == "" { // a refused body without an id: recognise the demo's malformed jobs by body
				var b struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &b)
				d.JobID = b.ID
				if d.JobID == "" && strings.Contains(aws.ToString(m.Body), `"type": "payments", "id": `) {
					d.JobID = "bad-json"
				}
			}
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JobID < out[j].JobID })
	return out, nil
}

// liveView shows running versus limit per type and overall progress.
type liveView struct {
	out   io.Writer
	live  bool
	types []TypeSpec
	pools []PoolSpec
	lines int
	last  time.Time
}

// note writes lines above the view (a batch that closed): on a terminal the view is drawn again
// below them.
func (v *liveView) note(lines []string) {
	if len(lines) == 0 {
		return
	}
	if v.live && v.lines > 0 {
		fmt.Fprintf(v.out, "\033[%dA", v.lines)
		v.lines = 0
	}
	for _, l := range lines {
		fmt.Fprintf(v.out, "%s%s\n", l, v.clear())
	}
	if !v.live {
		v.last = time.Time{} // the view follows at once
	}
}

// clear erases the rest of a line redrawn in place.
func (v *liveView) clear() string {
	if v.live {
		return "\033[K"
	}
	return ""
}

func (v *liveView) draw(st status) {
	if !v.live && time.Since(v.last) < 5*time.Second && st.succeeded+st.deadLettered < st.total {
		return
	}
	v.last = time.Now()
	var b strings.Builder
	for _, t := range v.types {
		n := st.running[t.Type]
		bar := strings.Repeat("█", min(n, t.Limit)) + strings.Repeat("·", max(t.Limit-n, 0))
		fmt.Fprintf(&b, "  %-10s %2d/%-2d running  %s%s\n", t.Type, n, t.Limit, bar, v.clear())
	}
	for _, p := range v.pools {
		n := 0
		for _, m := range p.Members {
			n += st.running[m]
		}
		bar := strings.Repeat("█", min(n, p.Cap)) + strings.Repeat("·", max(p.Cap-n, 0))
		fmt.Fprintf(&b, "  pool %-5s %2d/%-2d running  %s  (%s)%s\n", p.Name, n, p.Cap, bar, strings.Join(p.Members, "+"), v.clear())
	}
	done := st.succeeded + st.deadLettered
	width := 40
	filled := width * done / max(st.total, 1)
	fmt.Fprintf(&b, "  progress   [%s%s] %d/%d jobs ended (%d succeeded, %d dead-lettered)  %4.0fs%s\n",
		strings.Repeat("#", filled), strings.Repeat(" ", width-filled), done, st.total, st.succeeded, st.deadLettered, st.elapsed.Seconds(), v.clear())
	if v.live && v.lines > 0 {
		fmt.Fprintf(v.out, "\033[%dA", v.lines)
	}
	if !v.live {
		fmt.Fprintln(v.out, "---")
	}
	fmt.Fprint(v.out, b.String())
	v.lines = strings.Count(b.String(), "\n")
}
