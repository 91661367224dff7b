package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// AWS list prices (us-east-1), see docs/limits.md.
const (
	priceSQSPerMillion         = 0.50         // FIFO; standard is 0.40: every SQS call is priced as FIFO (an upper bound)
	priceTransition            = 0.025 / 1000 // Step Functions Standard, per state transition
	priceLambdaPerMillion      = 0.20
	priceLambdaGBSecond        = 0.0000133334 // arm64
	priceDynamoWritePerMillion = 0.625
	priceDynamoReadPerMillion  = 0.125
)

// TypeResult is one type's outcome.
type TypeResult struct {
	Type         string  `json:"type"`
	Limit        int     `json:"limit"`
	Release      string  `json:"release"`
	Peak         int     `json:"peakRunning"`
	Jobs         int     `json:"jobs"`
	Succeeded    int     `json:"succeeded"`
	Retried      int     `json:"retried"`
	DeadLettered int     `json:"deadLettered"`
	Executions   int     `json:"executions"`
	Utilization  float64 `json:"utilizationWhileBacklogged"`
	WaitP50      float64 `json:"waitP50Seconds"`
	WaitP99      float64 `json:"waitP99Seconds"`
	// HandoverP50 and HandoverP90 are the times from a job's work end to the next start of its
	// type, over the ends at which another job of the type waited: the limiter's own share of a
	// lane's idle time.
	HandoverP50 float64 `json:"handoverP50Seconds"`
	HandoverP90 float64 `json:"handoverP90Seconds"`
}

// CallRow is one API operation's calls per job.
type CallRow struct {
	Function  string  `json:"function"`
	Service   string  `json:"service"`
	Operation string  `json:"operation"`
	Calls     int64   `json:"calls"`
	PerJob    float64 `json:"perJob"`
}

// PoolResult is one shared pool's peak: the most of its member types' executions at work at once.
type PoolResult struct {
	Name    string   `json:"name"`
	Cap     int      `json:"cap"`
	Members []string `json:"members"`
	Peak    int      `json:"peakRunning"`
}

// CostRow is one priced item per million jobs.
type CostRow struct {
	Item       string  `json:"item"`
	PerJob     float64 `json:"unitsPerJob"`
	PerMillion float64 `json:"dollarsPerMillionJobs"`
}

// Report is what the demo measured.
type Report struct {
	// Strategy is the lane strategy every type ran on.
	Strategy        string         `json:"strategy"`
	WallSeconds     float64        `json:"wallSeconds"`
	Jobs            int            `json:"jobs"`
	Refused         map[string]int `json:"refused"`
	Types           []TypeResult   `json:"types"`
	Pools           []PoolResult   `json:"pools,omitempty"`
	Verified        int            `json:"verified"`
	Mismatches      []string       `json:"mismatches"`
	LimitHeld       bool           `json:"limitHeld"`
	Calls           []CallRow      `json:"calls"`
	Cost            []CostRow      `json:"cost"`
	TotalPerMillion float64        `json:"totalDollarsPerMillionJobs"`
	// WorkTransitionsPerJob are the sample work's own state transitions (the user's, not the limiter's).
	WorkTransitionsPerJob float64 `json:"workTransitionsPerJob"`
	// Metrics are the totals the functions published (CloudWatch embedded metric format), per type.
	Metrics map[string]map[string]float64 `json:"metrics"`
	// LongestStall is the longest a job waited with its lane free while its type started nothing; Trouble says what
	// went wrong that the outcomes do not show (a stall beyond StallAfter, handler failures).
	LongestStall Stall    `json:"longestStall"`
	Trouble      []string `json:"trouble,omitempty"`
	// Batches are the workload's batches (one per type) as they ended.
	Batches []BatchResult `json:"batches,omitempty"`

	execs []observe.Execution
	start time.Time
	end   time.Time
}

// runStrategy is the strategy the stack's types run on, for a LaneStrategy parameter: the
// functions' reading of it (lane.ParseStrategy), so a stack whose template still defaults to the
// retired least-loaded is reported as the first-free it runs.
func runStrategy(param string) string {
	s, err := lane.ParseStrategy(param)
	if err != nil {
		return param // the stack would not have started on it
	}
	return s
}

func buildReport(w Workload, jobs []Job, xs []observe.Execution, dead []DeadLetter, wall time.Duration, s *stack.Stack) *Report {
	r := &Report{WallSeconds: wall.Seconds(), Jobs: len(jobs), Refused: map[string]int{}, execs: xs, LimitHeld: true}
	r.Strategy = runStrategy(s.Info().Parameters["LaneStrategy"])
	byJob := map[string][]observe.Execution{}
	for _, x := range xs {
		k := x.Job.Type + "/" + x.Job.ID
		byJob[k] = append(byJob[k], x)
	}
	deadBy := map[string][]DeadLetter{}
	for _, d := range dead {
		deadBy[d.JobID] = append(deadBy[d.JobID], d)
		if d.Reason != "attempts_exhausted" {
			r.Refused[d.Reason]++
		}
	}
	// Expectations: every job ended exactly as the workload said it would.
	for _, j := range jobs {
		ex := byJob[j.Type+"/"+j.ID]
		succeeded := false
		for _, x := range ex {
			succeeded = succeeded || x.Status == "SUCCEEDED"
		}
		ds := deadBy[j.ID]
		var got string
		switch {
		case succeeded && len(ds) == 0:
			got = "succeeded"
		case !succeeded && len(ds) == 1 && ds[0].Reason == "attempts_exhausted":
			got = "dead-lettered"
		case !succeeded && len(ds) == 1:
			got = ds[0].Reason
		default:
			got = fmt.Sprintf("succeeded=%v, %d dead letters", succeeded, len(ds))
		}
		if got == j.Expect {
			r.Verified++
		} else {
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("%s: want %s, got %s", j.ID, j.Expect, got))
		}
	}

	if len(xs) > 0 {
		r.start, r.end = xs[0].Start, xs[0].Start
		for _, x := range xs {
			if x.Job.SubmittedAt.Before(r.start) && !x.Job.SubmittedAt.IsZero() {
				r.start = x.Job.SubmittedAt
			}
			if x.WorkEnd.After(r.end) {
				r.end = x.WorkEnd
			}
		}
	}
	peaks := observe.Peaks(xs, time.Now())
	var workTransitions int
	for _, x := range xs {
		workTransitions += x.Transitions - x.ReleaseTransitions
	}
	for _, t := range w.Types {
		tr := TypeResult{Type: t.Type, Limit: t.Limit, Release: orStep(t.Release), Peak: peaks[t.Type].Max, Jobs: t.Jobs}
		var waits []float64
		for k, ex := range byJob {
			if !strings.HasPrefix(k, t.Type+"/") {
				continue
			}
			tr.Executions += len(ex)
			if len(ex) > 1 {
				tr.Retried++
			}
			first := ex[0]
			for _, x := range ex {
				if x.Status == "SUCCEEDED" {
					tr.Succeeded++
				}
				if x.Start.Before(first.Start) {
					first = x
				}
			}
			waits = append(waits, first.Start.Sub(first.Job.SubmittedAt).Seconds())
		}
		for _, d := range dead {
			if d.Type == t.Type && d.Reason == "attempts_exhausted" {
				tr.DeadLettered++
			}
		}
		tr.WaitP50, tr.WaitP99 = quantile(waits, 0.5), quantile(waits, 0.99)
		tr.Utilization = utilization(byJob, t, r.start, r.end)
		hs := handovers(byJob, t)
		tr.HandoverP50, tr.HandoverP90 = quantile(hs, 0.5), quantile(hs, 0.9)
		if tr.Peak > t.Limit {
			r.LimitHeld = false
		}
		r.Types = append(r.Types, tr)
	}
	for _, p := range w.Pools {
		member := func(x observe.Execution) string {
			if slices.Contains(p.Members, x.Job.Type) {
				return p.Name
			}
			return ""
		}
		pr := PoolResult{Name: p.Name, Cap: p.Cap, Members: p.Members, Peak: observe.PeaksBy(xs, time.Now(), member)[p.Name].Max}
		if pr.Peak > p.Cap {
			r.LimitHeld = false
		}
		r.Pools = append(r.Pools, pr)
	}
	r.costs(s, xs, len(jobs), workTransitions)
	r.Metrics = s.Metrics().Totals()
	limits := map[string]int{}
	for _, t := range w.Types {
		limits[t.Type] = t.Limit
	}
	r.trouble(s.LastRuntimeStats(), longestStall(xs, limits, w.Pools))
	return r
}

// utilization is the mean share of a type's lanes in use over the moments when some job of the type
// was waiting (submitted, not running, not finished), sampled every 100 ms.
func utilization(byJob map[string][]observe.Execution, t TypeSpec, start, end time.Time) float64 {
	type span struct {
		sub, last time.Time
		runs      [][2]time.Time
	}
	var spans []span
	for k, ex := range byJob {
		if !strings.HasPrefix(k, t.Type+"/") {
			continue
		}
		sp := span{sub: ex[0].Job.SubmittedAt}
		for _, x := range ex {
			we := x.WorkEnd
			if we.IsZero() {
				we = end
			}
			sp.runs = append(sp.runs, [2]time.Time{x.Start, we})
			if we.After(sp.last) {
				sp.last = we
			}
		}
		spans = append(spans, sp)
	}
	var sum float64
	var n int
	for at := start; at.Before(end); at = at.Add(100 * time.Millisecond) {
		waiting, running := 0, 0
		for _, sp := range spans {
			in := false
			for _, r := range sp.runs {
				if !at.Before(r[0]) && at.Before(r[1]) {
					in = true
				}
			}
			switch {
			case in:
				running++
			case !at.Before(sp.sub) && at.Before(sp.last):
				waiting++
			}
		}
		if waiting > 0 {
			sum += float64(min(running, t.Limit)) / float64(t.Limit)
			n++
		}
	}
	if n == 0 {
		return 1
	}
	return sum / float64(n)
}

// handovers pairs each work end of type t at which another job of the type waited with the first
// start of the type after it not yet paired, in time order, and returns the gaps in seconds.
func handovers(byJob map[string][]observe.Execution, t TypeSpec) []float64 {
	type job struct {
		sub, last time.Time
		runs      [][2]time.Time
	}
	var jobs []job
	var starts, ends []time.Time
	for k, ex := range byJob {
		if !strings.HasPrefix(k, t.Type+"/") {
			continue
		}
		j := job{sub: ex[0].Job.SubmittedAt}
		for _, x := range ex {
			starts = append(starts, x.Start)
			if x.WorkEnd.IsZero() {
				continue
			}
			ends = append(ends, x.WorkEnd)
			j.runs = append(j.runs, [2]time.Time{x.Start, x.WorkEnd})
			if x.WorkEnd.After(j.last) {
				j.last = x.WorkEnd
			}
		}
		jobs = append(jobs, j)
	}
	waiting := func(at time.Time) bool {
		for _, j := range jobs {
			if at.Before(j.sub) || !at.Before(j.last) {
				continue
			}
			running := false
			for _, r := range j.runs {
				if !at.Before(r[0]) && at.Before(r[1]) {
					running = true
				}
			}
			if !running {
				return true
			}
		}
		return false
	}
	sort.Slice(starts, func(i, k int) bool { return starts[i].Before(starts[k]) })
	sort.Slice(ends, func(i, k int) bool { return ends[i].Before(ends[k]) })
	var out []float64
	next := 0
	for _, e := range ends {
		if !waiting(e) {
			continue
		}
		for next < len(starts) && starts[next].Before(e) {
			next++
		}
		if next == len(starts) {
			break
		}
		out = append(out, starts[next].Sub(e).Seconds())
		next++
	}
	return out
}

func orStep(mode string) string {
	if mode == "" {
		return "step"
	}
	return mode
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}

func (r *Report) costs(s *stack.Stack, xs []observe.Execution, jobs, workTransitions int) {
	perJob := func(n float64) float64 { return n / float64(jobs) }
	var sqsCalls, ddbWrites, ddbReads, lambdaReqs float64
	var lambdaGBs float64
	for _, name := range []string{"producer", "router", "starter", "releaser", "pollers"} {
		for _, row := range s.Counter(name).Snapshot() {
			if name == "pollers" && row.Operation == "ReceiveMessage" {
				continue // counted below: one receive per invocation; empty polls cost per poller-hour, not per job
			}
			r.Calls = append(r.Calls, CallRow{Function: name, Service: row.Service, Operation: row.Operation, Calls: row.Calls, PerJob: perJob(float64(row.Calls))})
			switch row.Service {
			case "SQS":
				sqsCalls += float64(row.Calls)
			case "DynamoDB":
				switch row.Operation {
				case "PutItem", "DeleteItem", "UpdateItem":
					ddbWrites += float64(row.Calls)
				case "TransactWriteItems":
					ddbWrites += 2 * float64(row.Items) // a transactional write costs two units per item
				default:
					ddbReads += float64(row.Calls)
				}
			}
		}
	}
	mem := memoryByKind(s)
	for kind, st := range s.LastRuntimeStats() {
		lambdaReqs += float64(st.Invocations)
		lambdaGBs += st.Busy.Seconds() * float64(mem[kind]) / 1024
		if st.Receives > 0 {
			r.Calls = append(r.Calls, CallRow{Function: kind + " poller", Service: "SQS", Operation: "ReceiveMessage (non-empty)", Calls: int64(st.Receives), PerJob: perJob(float64(st.Receives))})
			sqsCalls += float64(st.Receives)
		}
	}
	var releaseTransitions int
	for _, x := range xs {
		releaseTransitions += x.ReleaseTransitions
	}
	r.WorkTransitionsPerJob = perJob(float64(workTransitions))
	add := func(item string, units, price float64) {
		row := CostRow{Item: item, PerJob: perJob(units), PerMillion: perJob(units) * price * 1e6}
		r.Cost = append(r.Cost, row)
		r.TotalPerMillion += row.PerMillion
	}
	add("SQS requests (priced as FIFO)", sqsCalls, priceSQSPerMillion/1e6)
	add("Step Functions release transitions", float64(releaseTransitions), priceTransition)
	add("Lambda requests", lambdaReqs, priceLambdaPerMillion/1e6)
	add("Lambda GB-seconds (arm64, measured locally)", lambdaGBs, priceLambdaGBSecond)
	add("DynamoDB write units", ddbWrites, priceDynamoWritePerMillion/1e6)
	add("DynamoDB read units", ddbReads, priceDynamoReadPerMillion/1e6)
	sort.Slice(r.Calls, func(i, j int) bool {
		if r.Calls[i].Function != r.Calls[j].Function {
			return r.Calls[i].Function < r.Calls[j].Function
		}
		return r.Calls[i].Operation < r.Calls[j].Operation
	})
}

func memoryByKind(s *stack.Stack) map[string]int {
	out := map[string]int{}
	tpl, res := s.Template()
	for _, f := range tpl.Functions() {
		cfg, err := res.Function(f)
		if err != nil {
			continue
		}
		out[filepath.Base(filepath.Clean(cfg.CodeDir))] = max(cfg.MemorySize, 128)
	}
	return out
}

// Print writes the report as text tables.
func (r *Report) Print(w io.Writer) {
	verdict := "HELD"
	if !r.LimitHeld {
		verdict = "BROKEN"
	}
	trouble := ""
	if len(r.Trouble) > 0 {
		trouble = "; TROUBLE: " + strings.Join(r.Trouble, "; ")
	}
	fmt.Fprintf(w, "sfnlimit demo (%s lanes): %d jobs in %.1fs; every type's limit %s; %d/%d jobs ended as expected%s\n\n", r.Strategy, r.Jobs, r.WallSeconds, verdict, r.Verified, r.Jobs, trouble)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "type\tlimit\trelease\tpeak running\tjobs\tsucceeded\tretried\tdead-lettered\texecutions\tutilization*\twait p50\twait p99\thandover p50/p90**\t")
	for _, t := range r.Types {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f%%\t%.1fs\t%.1fs\t%.2fs/%.2fs\t\n", t.Type, t.Limit, t.Release, t.Peak, t.Jobs, t.Succeeded, t.Retried, t.DeadLettered, t.Executions, 100*t.Utilization, t.WaitP50, t.WaitP99, t.HandoverP50, t.HandoverP90)
	}
	tw.Flush()
	for _, p := range r.Pools {
		fmt.Fprintf(w, "pool %s (%s): peak running %d, cap %d\n", p.Name, strings.Join(p.Members, "+"), p.Peak, p.Cap)
	}
	fmt.Fprintln(w, "* share of the type's lanes running while some job of the type waited (a pool's cap holds its members below their limits)")
	fmt.Fprintln(w, "** from a job's work end to the type's next start, when another job of the type waited")
	if st := r.LongestStall; st.Seconds > 0 {
		fmt.Fprintf(w, "longest a job waited with its lane free while its type started nothing: %.1fs (%s, %.1fs-%.1fs into the run; over %v is a stall)\n", st.Seconds, st.Type, st.From, st.To, StallAfter)
	}
	if len(r.Refused) > 0 {
		var parts []string
		for k, v := range r.Refused {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "refused by the router or starter (dead-lettered with a reason): %s\n", strings.Join(parts, ", "))
	}
	printBatches(w, r.Batches)
	for _, m := range r.Mismatches {
		fmt.Fprintf(w, "UNEXPECTED: %s\n", m)
	}
	if len(r.Metrics) > 0 {
		fmt.Fprintln(w, "\nMetrics the functions published (totals; CloudWatch embedded metric format):")
		names := []string{metrics.JobsRouted, metrics.JobsRejected, metrics.JobsStarted, metrics.JobsHeldAgain, metrics.JobsMoved,
			metrics.JobsSucceeded, metrics.JobsRetried, metrics.JobsDeadLettered, metrics.LeasesSwept}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "type\t")
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t", strings.TrimPrefix(n, "Jobs"))
		}
		fmt.Fprintln(tw)
		types := make([]string, 0, len(r.Metrics))
		for t := range r.Metrics {
			types = append(types, t)
		}
		sort.Strings(types)
		for _, t := range types {
			fmt.Fprintf(tw, "%s\t", t)
			for _, n := range names {
				fmt.Fprintf(tw, "%.0f\t", r.Metrics[t][n])
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		for _, note := range r.metricNotes() {
			fmt.Fprintln(w, note)
		}
	}
	fmt.Fprintln(w, "\nAPI calls per job (all submissions):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  function\tservice\toperation\tcalls\tper job")
	for _, c := range r.Calls {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%.2f\n", c.Function, c.Service, c.Operation, c.Calls, c.PerJob)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nLimiter cost per million jobs at AWS list prices (us-east-1):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range r.Cost {
		fmt.Fprintf(tw, "  %s\t%.3f per job\t$%.2f\n", c.Item, c.PerJob, c.PerMillion)
	}
	fmt.Fprintf(tw, "  total\t\t$%.2f\n", r.TotalPerMillion)
	tw.Flush()
	fmt.Fprintf(w, "(the sample work's own %.1f transitions per job are the user's workflow, not the limiter's)\n", r.WorkTransitionsPerJob)
	if len(r.Trouble) > 0 {
		// Last as well as first: the line a reader of a scrolled terminal sees.
		fmt.Fprintf(w, "\nTROUBLE: %s (limiter.log has the handlers' errors)\n", strings.Join(r.Trouble, "; "))
	}
}

// metricNotes explains the metric rows and columns a reader would otherwise take for errors or for
// the table above under other names.
func (r *Report) metricNotes() []string {
	notes := []string{"Retried counts attempts that failed and ran again (a job retried twice counts 2); the retried column above counts jobs that ran more than once."}
	if _, ok := r.Metrics[metrics.NoType]; ok {
		notes = append(notes, metrics.NoType+": jobs refused before their type could be read (not JSON, no type).")
	}
	if _, ok := r.Metrics[metrics.Unlisted]; ok {
		notes = append(notes, metrics.Unlisted+": every type without a limit of its own, in one row (producers may invent any number of types, and each row is a billed metric); here the demo's job of type unknown, refused as unknown_type.")
	}
	var swept float64
	for _, m := range r.Metrics {
		swept += m[metrics.LeasesSwept]
	}
	if swept == 0 {
		notes = append(notes, "LeasesSwept: lanes the sweep had to release because their execution's own release was missed; 0 here, as on any healthy run.")
	} else {
		notes = append(notes, fmt.Sprintf("LeasesSwept: lanes the sweep had to release because their execution's own release was missed (%.0f here; a healthy run has none: limiter.log says which, \"sweep released\").", swept))
	}
	return notes
}

func (r *Report) write(dir string) error {
	var md strings.Builder
	md.WriteString("# sfnlimit demo report\n\n```\n")
	r.Print(&md)
	md.WriteString("```\n\n![running executions per type](concurrency.svg)\n")
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "concurrency.svg"), []byte(r.Chart()), 0o644)
}
