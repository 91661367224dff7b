package ops

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/config"
	"github.com/sfnlimit/sfnlimit/internal/lane"
	"github.com/sfnlimit/sfnlimit/internal/lease"
)

// queueAttrsAPI is the SQS call the status makes.
type queueAttrsAPI interface {
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// leaseLister reads leases type by type (lease.Store): never a scan of the table, which also holds
// a lane-count marker per recent job.
type leaseLister = lease.TypeLister

// laneCounter reads a type's per-lane job counts (occupancy.Store).
type laneCounter interface {
	Counts(ctx context.Context, typ string, limit int) ([]int, error)
}

// StatusReader reads what the limiter is doing.
type StatusReader struct {
	SQS    queueAttrsAPI
	Leases leaseLister
	// Occupancy, if not nil, gives the lane counts of the types on lane.LeastLoaded or lane.FirstFree: one Counts
	// call (one query) per such type and reading.
	Occupancy laneCounter
	// Config gives every type's effective configuration (a config.Resolver's All).
	Config    func(ctx context.Context) ([]config.TypeConfig, error)
	General   string // queue URLs
	Lanes     string
	DeadQueue string
	Now       func() time.Time
}

// Status is one reading of the limiter.
type Status struct {
	At     time.Time    `json:"at"`
	Types  []TypeStatus `json:"types"`
	Queues QueueStatus  `json:"queues"`
	// Lanes is the sum of the limits of the types shown; LanesInUse the leases held.
	Lanes      int `json:"lanes"`
	LanesInUse int `json:"lanesInUse"`
}

// TypeStatus is one type's limit and what runs now.
type TypeStatus struct {
	Type string `json:"type"`
	// Limit is 0 for a type that has leases but no limit any more.
	Limit  int    `json:"limit"`
	Source string `json:"source"` // override, default, fallback, or none
	// Strategy is how the router picks the type's lanes (empty for a type with no limit).
	Strategy string `json:"strategy,omitempty"`
	// LaneCounts are the jobs queued or running in each lane, as the least-loaded strategy counts
	// them; nil for a type on another strategy (its jobs are not counted) or with no limit.
	LaneCounts *LaneCounts `json:"laneCounts,omitempty"`
	// Running counts the type's leases: every lane a job holds, whatever its state.
	Running  int            `json:"running"`
	ByStatus map[string]int `json:"byStatus,omitempty"`
	Oldest   *RunningJob    `json:"oldest,omitempty"`
}

// LaneCounts are one type's jobs queued or running, per lane (internal/occupancy).
type LaneCounts struct {
	// Counts[i] is lane i+1's jobs.
	Counts []int `json:"counts"`
	// Jobs is their sum: the type's jobs routed and not yet done.
	Jobs  int     `json:"jobs"`
	Min   int     `json:"min"`
	Max   int     `json:"max"`
	Mean  float64 `json:"mean"`
	Empty int     `json:"empty"` // lanes with no job
}

func newLaneCounts(counts []int) *LaneCounts {
	lc := &LaneCounts{Counts: counts}
	for i, n := range counts {
		lc.Jobs += n
		if i == 0 || n < lc.Min {
			lc.Min = n
		}
		if n > lc.Max {
			lc.Max = n
		}
		if n == 0 {
			lc.Empty++
		}
	}
	if len(counts) > 0 {
		lc.Mean = float64(lc.Jobs) / float64(len(counts))
	}
	return lc
}

// laneListMax is the most lanes the table lists one by one; more are summarised.
const laneListMax = 20

// busiestShown is how many of the busiest lanes a summary names.
const busiestShown = 5

// String is the counts for people: every lane's count (lane 1 first) up to laneListMax lanes, else
// min, mean and max and the busiest lanes.
func (lc *LaneCounts) String() string {
	if len(lc.Counts) <= laneListMax {
		parts := make([]string, len(lc.Counts))
		for i, n := range lc.Counts {
			parts[i] = strconv.Itoa(n)
		}
		return strings.Join(parts, " ")
	}
	s := fmt.Sprintf("%d lanes: min %d, mean %.1f, max %d, %d empty", len(lc.Counts), lc.Min, lc.Mean, lc.Max, lc.Empty)
	lanes := make([]int, 0, len(lc.Counts))
	for i, n := range lc.Counts {
		if n > 0 {
			lanes = append(lanes, i+1)
		}
	}
	if len(lanes) == 0 {
		return s
	}
	sort.SliceStable(lanes, func(i, j int) bool { return lc.Counts[lanes[i]-1] > lc.Counts[lanes[j]-1] })
	var busiest []string
	for _, l := range lanes[:min(len(lanes), busiestShown)] {
		busiest = append(busiest, fmt.Sprintf("%d:%d", l, lc.Counts[l-1]))
	}
	return s + "; busiest (lane:jobs) " + strings.Join(busiest, " ")
}

// RunningJob is a job holding a lane.
type RunningJob struct {
	ID           string    `json:"id"`
	Lane         int       `json:"lane"`
	Attempt      int       `json:"attempt"`
	Status       string    `json:"status"`
	StartedAt    time.Time `json:"startedAt"`
	AgeSeconds   float64   `json:"ageSeconds"`
	ExecutionArn string    `json:"executionArn,omitempty"`
}

// QueueStatus is the depth of the three queues (SQS's approximate counts).
type QueueStatus struct {
	General    QueueDepth `json:"general"`
	Lanes      QueueDepth `json:"lanes"`
	DeadLetter QueueDepth `json:"deadLetter"`
}

// QueueDepth counts a queue's messages: Waiting are visible, InFlight received and not yet deleted
// (on the lanes queue: the jobs that hold a lane), Delayed not yet visible.
type QueueDepth struct {
	Waiting  int `json:"waiting"`
	InFlight int `json:"inFlight"`
	Delayed  int `json:"delayed,omitempty"`
}

// Read takes one reading.
func (r StatusReader) Read(ctx context.Context) (Status, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	cfgs, err := r.Config(ctx)
	if err != nil {
		return Status{}, err
	}
	types := make([]string, 0, len(cfgs))
	for _, c := range cfgs {
		types = append(types, c.Type)
	}
	leases, err := lease.ListTypes(ctx, r.Leases, types, 8)
	if err != nil {
		return Status{}, err
	}
	st := Status{At: now().UTC()}
	byType := map[string]*TypeStatus{}
	for _, c := range cfgs {
		ts := &TypeStatus{Type: c.Type, Limit: c.Limit, Source: c.Source, Strategy: c.Strategy}
		if counted(c.Strategy) && c.Limit > 0 && r.Occupancy != nil {
			counts, err := r.Occupancy.Counts(ctx, c.Type, c.Limit)
			if err != nil {
				return Status{}, err
			}
			ts.LaneCounts = newLaneCounts(counts)
		}
		byType[c.Type] = ts
		st.Lanes += c.Limit
	}
	for _, l := range leases {
		ts := byType[l.Type]
		if ts == nil {
			ts = &TypeStatus{Type: l.Type, Source: "none"}
			byType[l.Type] = ts
		}
		ts.Running++
		st.LanesInUse++
		if ts.ByStatus == nil {
			ts.ByStatus = map[string]int{}
		}
		ts.ByStatus[string(l.Status)]++
		if ts.Oldest == nil || l.StartedAt.Before(ts.Oldest.StartedAt) {
			ts.Oldest = &RunningJob{
				ID: l.JobID, Lane: l.Lane, Attempt: l.Attempt, Status: string(l.Status), StartedAt: l.StartedAt,
				AgeSeconds: roundSeconds(st.At.Sub(l.StartedAt)), ExecutionArn: l.ExecutionArn,
			}
		}
	}
	for _, ts := range byType {
		st.Types = append(st.Types, *ts)
	}
	sort.Slice(st.Types, func(i, j int) bool { return st.Types[i].Type < st.Types[j].Type })
	for _, q := range []struct {
		url string
		dst *QueueDepth
	}{{r.General, &st.Queues.General}, {r.Lanes, &st.Queues.Lanes}, {r.DeadQueue, &st.Queues.DeadLetter}} {
		if *q.dst, err = depth(ctx, r.SQS, q.url); err != nil {
			return Status{}, err
		}
	}
	return st, nil
}

func depth(ctx context.Context, api queueAttrsAPI, url string) (QueueDepth, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return QueueDepth{}, fmt.Errorf("read the depth of queue %s: %w", url, err)
	}
	n := func(a types.QueueAttributeName) int {
		v, _ := strconv.Atoi(out.Attributes[string(a)])
		return v
	}
	return QueueDepth{
		Waiting:  n(types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: n(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  n(types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
	}, nil
}

// WriteTable prints a status for people.
func (s Status) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tLIMIT\tSOURCE\tSTRATEGY\tRUNNING\tOLDEST RUNNING JOB")
	for _, t := range s.Types {
		limit := strconv.Itoa(t.Limit)
		if t.Limit == 0 {
			limit = "-"
		}
		oldest := "-"
		if o := t.Oldest; o != nil {
			oldest = fmt.Sprintf("%s (lane %d, attempt %d, %s, %s)", o.ID, o.Lane, o.Attempt, o.Status, Age(time.Duration(o.AgeSeconds*float64(time.Second))))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", t.Type, limit, t.Source, dash(t.Strategy), t.Running, oldest)
	}
	if len(s.Types) == 0 {
		fmt.Fprintln(tw, "(no types: no limits are set and no job is running)")
	}
	fmt.Fprintln(tw)
	if len(s.Types) > 0 {
		fmt.Fprintln(tw, "TYPE\tJOBS\tJOBS PER LANE (queued or running; lane 1 first)")
		for _, t := range s.Types {
			switch {
			case t.LaneCounts != nil:
				fmt.Fprintf(tw, "%s\t%d\t%s\n", t.Type, t.LaneCounts.Jobs, t.LaneCounts)
			case t.Limit == 0:
				fmt.Fprintf(tw, "%s\t-\tno limit: no lanes\n", t.Type)
			case counted(t.Strategy):
				fmt.Fprintf(tw, "%s\t-\tnot read\n", t.Type)
			default:
				fmt.Fprintf(tw, "%s\t-\tnot counted: the %s strategy keeps no lane counts\n", t.Type, t.Strategy)
			}
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "QUEUE\tWAITING\tIN FLIGHT\t")
	fmt.Fprintf(tw, "general\t%d\t%d\tjobs not yet routed to a lane\n", s.Queues.General.Waiting+s.Queues.General.Delayed, s.Queues.General.InFlight)
	fmt.Fprintf(tw, "lanes (FIFO)\t%d\t%d\tin flight: started and holding their lane\n", s.Queues.Lanes.Waiting+s.Queues.Lanes.Delayed, s.Queues.Lanes.InFlight)
	fmt.Fprintf(tw, "dead-letter\t%d\t%d\tsee: sfnlimit dlq list\n", s.Queues.DeadLetter.Waiting+s.Queues.DeadLetter.Delayed, s.Queues.DeadLetter.InFlight)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d of %d lanes in use; limits add up to %d of the FIFO in-flight quota of %d. %s\n",
		s.LanesInUse, s.Lanes, s.Lanes, config.MaxInFlight, s.At.Format(time.RFC3339))
	return err
}

// Age prints a duration the way people read an age: 45s, 3m12s, 2h05m, 3d04h.
func Age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

func roundSeconds(d time.Duration) float64 {
	return float64(d.Round(100*time.Millisecond)) / float64(time.Second)
}

// shortArn is the name at the end of an ARN.
func shortArn(arn string) string {
	if i := strings.LastIndexByte(arn, ':'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// counted reports whether a strategy keeps lane counts (internal/occupancy).
func counted(strategy string) bool { return strategy == lane.LeastLoaded || strategy == lane.FirstFree }
