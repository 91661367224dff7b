package ops

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// queueAttrsAPI is the SQS call the status makes.
type queueAttrsAPI interface {
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// leaseLister reads leases type by type (lease.Store): never a scan of the table, which holds
// other items too.
type leaseLister = lease.TypeLister

// overrideLister reads the live overrides (config.DynamoStore).
type overrideLister interface {
	ListOverrides(ctx context.Context) ([]config.Override, error)
}

// StatusReader reads what the limiter is doing.
type StatusReader struct {
	SQS    queueAttrsAPI
	Leases leaseLister
	// Defaults and Overrides are the configuration, resolved afresh for every reading as the
	// functions resolve it (config.Resolver): status shows the overrides as stored now.
	Defaults  config.Defaults
	Overrides overrideLister
	// Parked, if not nil, reads the parked waiting groups of first-free types (waitroom.Store) for
	// the keys view: which keys wait, and whether for a lane or for their cap.
	Parked    parkedLister
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
	// Pools are the shared pools of the types shown (none: the table is left out).
	Pools []PoolStatus `json:"pools,omitempty"`
}

// TypeStatus is one type's limit and the leases of its lanes.
type TypeStatus struct {
	Type string `json:"type"`
	// Limit is 0 for a type that has leases but no limit any more.
	Limit  int    `json:"limit"`
	Source string `json:"source"` // override, default, fallback, or none
	// Strategy is how the type's jobs get a lane (empty for a type with no limit).
	Strategy string `json:"strategy,omitempty"`
	// RetiredStrategy is the retired strategy the type is configured with (its live item's, or the
	// deployment's LaneStrategy), which it runs as Strategy; empty when it is configured with a
	// current one.
	RetiredStrategy string `json:"retiredStrategy,omitempty"`
	// Release is how the type's lanes are released (config.ReleaseModes; empty for a type with no
	// limit).
	Release string `json:"release,omitempty"`
	// Overflow is the type's overflow rule when it is not queue and acts
	// (config.TypeConfig.Cancels, Skips; config get says why a rule does not).
	Overflow string `json:"overflow,omitempty"`
	// Running counts the type's leases: every lane a job holds, whatever its state (a bound job's
	// execution has not started yet).
	Running int `json:"running"`
	// ByStatus counts the type's leases by their status as shown (shownStatus: started for a
	// starting or running lease).
	ByStatus map[string]int `json:"byStatus,omitempty"`
	// Free counts the lanes 1..Limit that no lease holds.
	Free int `json:"free"`
	// Over counts the leases beyond the limit (Running - Limit): the type runs over its cap, which
	// was lowered while they ran. 0 for a type at or under its limit, or with no limit.
	Over int `json:"over,omitempty"`
	// Leases are the type's leases, lane by lane (lane 1 first).
	Leases []LaneLease `json:"leases,omitempty"`
	Oldest *RunningJob `json:"oldest,omitempty"`
	// Keys is the type's concurrency keys, running and waiting; nil when the type has no keyed
	// work (no key caps, and no lease or parked group of a job with a key).
	Keys *KeysStatus `json:"keys,omitempty"`
	// Rate is the type's start rate (nil: none).
	Rate *RateView `json:"rate,omitempty"`
	// KeyRate is the start rate of every concurrency key of the type (nil: none), and OwnKeyRates
	// counts the keys with a rate of their own (config get lists them).
	KeyRate     *RateView `json:"keyRate,omitempty"`
	OwnKeyRates int       `json:"ownKeyRates,omitempty"`
	// Paused is the type's pause, with its waiting groups parked by it; nil when it is not paused.
	Paused *PauseView `json:"paused,omitempty"`
}

// LaneLease is the lease of one lane: the job that holds it and how far it got (Status as shown:
// shownStatus).
type LaneLease struct {
	Lane    int    `json:"lane"`
	Status  string `json:"status"`
	JobID   string `json:"jobId"`
	Attempt int    `json:"attempt"`
	// Key is the job's concurrency key ("" the default key).
	Key string `json:"key,omitempty"`
}

// Started is how status shows the lease of a started job. A confirmed start writes nothing after its
// claim, so a running job's lease is most often still starting (or running, once a redelivery has
// confirmed it, or when an earlier version wrote it). Status reads leases only, so it cannot tell a
// claim whose start is still being confirmed from a running job: "started" is true of both
// (StartExecution was called, or is being called, for the execution the lease names). `sfnlimit job
// show` looks at the execution and says running.
const Started = "started"

// shownStatus is a lease status as status shows it: Started for a claim.
func shownStatus(s lease.Status) string {
	if s == lease.Starting {
		return Started
	}
	return string(s)
}

// statusOrder is the order in which a type's lease statuses are listed: a lease's life.
var statusOrder = []string{string(lease.Bound), Started, string(lease.Retrying), string(lease.DeadLettering), string(lease.Moving)}

// rangesShown is how many runs of lanes a status lists before it only counts the rest.
const rangesShown = 8

// LanesText is the type's leases for people, status by status: how many lanes each holds and
// which ("running 3 (1-2, 5); bound 1 (3)"), and the lanes held above the limit, if any.
func (ts TypeStatus) LanesText() string {
	if len(ts.Leases) == 0 {
		return "-"
	}
	byStatus := map[string][]int{}
	var above []int
	for _, l := range ts.Leases {
		shown := shownStatus(lease.Status(l.Status))
		byStatus[shown] = append(byStatus[shown], l.Lane)
		if ts.Limit > 0 && l.Lane > ts.Limit {
			above = append(above, l.Lane)
		}
	}
	order := slices.Clone(statusOrder)
	var other []string
	for s := range byStatus {
		if !slices.Contains(order, s) {
			other = append(other, s)
		}
	}
	sort.Strings(other)
	var parts []string
	for _, s := range append(order, other...) {
		if lanes := byStatus[s]; len(lanes) > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (%s)", dash(s), len(lanes), laneRanges(lanes)))
		}
	}
	if len(above) > 0 {
		parts = append(parts, fmt.Sprintf("above the limit: %s", laneRanges(above)))
	}
	return strings.Join(parts, "; ")
}

// laneRanges writes sorted lane numbers as runs ("1-3, 5, 7-9"): the first rangesShown runs, and
// how many lanes more.
func laneRanges(lanes []int) string {
	var runs []string
	for i := 0; i < len(lanes); {
		j := i
		for j+1 < len(lanes) && lanes[j+1] == lanes[j]+1 {
			j++
		}
		if len(runs) == rangesShown {
			return fmt.Sprintf("%s and %d more", strings.Join(runs, ", "), len(lanes)-i)
		}
		if j > i {
			runs = append(runs, fmt.Sprintf("%d-%d", lanes[i], lanes[j]))
		} else {
			runs = append(runs, strconv.Itoa(lanes[i]))
		}
		i = j + 1
	}
	return strings.Join(runs, ", ")
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
	var ovs []config.Override
	if r.Overrides != nil {
		var err error
		if ovs, err = r.Overrides.ListOverrides(ctx); err != nil {
			return Status{}, err
		}
	}
	res, err := config.NewResolver(r.Defaults, staticStore(ovs), time.Second)
	if err != nil {
		return Status{}, err
	}
	cfgs, err := res.All(ctx)
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
	var parked map[string][]waitroom.Waiter
	if r.Parked != nil {
		if parked, err = readParked(ctx, r.Parked, parking(cfgs), 8); err != nil {
			return Status{}, err
		}
	}
	st := Status{At: now().UTC()}
	byType := map[string]*TypeStatus{}
	for _, c := range cfgs {
		byType[c.Type] = &TypeStatus{
			Type: c.Type, Limit: c.Limit, Source: c.Source, Strategy: c.Strategy, Release: c.Release, Free: c.Limit,
			RetiredStrategy: retiredStrategy(configuredStrategy(r.Defaults, ovs, c.Type)),
			Rate:            rateView(c.Rate), Paused: pauseView(c.Pause, st.At),
			KeyRate: rateView(c.KeyRate), OwnKeyRates: len(c.KeyRates),
		}
		switch {
		case c.Cancels():
			byType[c.Type].Overflow = config.OverflowCancel
		case c.Skips():
			byType[c.Type].Overflow = config.OverflowSkip
		}
		if p := byType[c.Type].Paused; p != nil {
			for _, w := range parked[c.Type] {
				if w.Paused {
					p.ParkedGroups++
				}
			}
		}
		st.Lanes += c.Limit
	}
	sort.Slice(leases, func(i, j int) bool { return leases[i].Lane < leases[j].Lane })
	for _, l := range leases {
		ts := byType[l.Type]
		if ts == nil {
			ts = &TypeStatus{Type: l.Type, Source: "none"}
			byType[l.Type] = ts
		}
		ts.Running++
		st.LanesInUse++
		if l.Lane >= 1 && l.Lane <= ts.Limit {
			ts.Free--
		}
		if ts.ByStatus == nil {
			ts.ByStatus = map[string]int{}
		}
		shown := shownStatus(l.Status)
		ts.ByStatus[shown]++
		ts.Leases = append(ts.Leases, LaneLease{Lane: l.Lane, Status: shown, JobID: l.JobID, Attempt: l.Attempt, Key: l.JobKey})
		// A lease without a start time (written by hand, say) has no age to compare.
		if !l.StartedAt.IsZero() && (ts.Oldest == nil || l.StartedAt.Before(ts.Oldest.StartedAt)) {
			ts.Oldest = &RunningJob{
				ID: l.JobID, Lane: l.Lane, Attempt: l.Attempt, Status: shown, StartedAt: l.StartedAt,
				AgeSeconds: roundSeconds(st.At.Sub(l.StartedAt)), ExecutionArn: l.ExecutionArn,
			}
		}
	}
	leasesOf := map[string][]lease.Lease{}
	for _, l := range leases {
		leasesOf[l.Type] = append(leasesOf[l.Type], l)
	}
	cfgOf := map[string]*config.TypeConfig{}
	for i := range cfgs {
		cfgOf[cfgs[i].Type] = &cfgs[i]
	}
	for typ, ts := range byType {
		if ts.Limit > 0 && ts.Running > ts.Limit {
			ts.Over = ts.Running - ts.Limit
		}
		ts.Keys = keysOf(cfgOf[typ], leasesOf[typ], parked[typ], st.At)
		st.Types = append(st.Types, *ts)
	}
	sort.Slice(st.Types, func(i, j int) bool { return st.Types[i].Type < st.Types[j].Type })
	running := map[string]int{}
	for _, t := range st.Types {
		running[t.Type] = t.Running
	}
	st.Pools = poolsOf(cfgs, running, parked)
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

// WriteTable prints a status for people, with the first KeysShown keys of each type.
func (s Status) WriteTable(w io.Writer) error { return s.WriteTableKeys(w, KeysShown) }

// WriteTableKeys prints a status for people. Once some type has keyed work, the main table gets a
// KEYS column and each such type a section with its first keys keys running and waiting (none:
// the column only); once some type has a start rate, a RATE column; once some type rates its keys,
// a KEY RATE column (every key's rate, and how many keys have their own); once some type is paused, a
// PAUSED column (how long) and a line per paused type below the table (since when, why, and its
// waiting groups parked). A deployment without any of these keeps its table as it was.
func (s Status) WriteTableKeys(w io.Writer, keys int) error {
	keyed, rated, keyRated, paused := false, false, false, false
	for _, t := range s.Types {
		keyed = keyed || t.Keys != nil
		rated = rated || t.Rate != nil
		keyRated = keyRated || t.ratesKeys()
		paused = paused || t.Paused != nil
	}
	col := func(shown bool, v string) string {
		if !shown {
			return ""
		}
		return v + "\t"
	}
	keysCol := func(v string) string { return col(keyed, v) }
	flowCols := func(rate, keyRate, pause string) string {
		return col(rated, rate) + col(keyRated, keyRate) + col(paused, pause)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TYPE\tLIMIT\tSOURCE\tSTRATEGY\tRELEASE\tHELD\tFREE\t%s%sOLDEST LEASE\n", flowCols("RATE", "KEY RATE", "PAUSED"), keysCol("KEYS"))
	var retired []string
	for _, t := range s.Types {
		limit, free := strconv.Itoa(t.Limit), strconv.Itoa(t.Free)
		if t.Limit == 0 {
			limit, free = "-", "-"
		}
		oldest := "-"
		if o := t.Oldest; o != nil {
			oldest = fmt.Sprintf("%s (lane %d, attempt %d, %s, %s)", o.ID, o.Lane, o.Attempt, o.Status, Age(time.Duration(o.AgeSeconds*float64(time.Second))))
		}
		strategy := dash(t.Strategy)
		if t.RetiredStrategy != "" {
			strategy += "*"
			retired = append(retired, fmt.Sprintf("%s (%s)", t.Type, t.RetiredStrategy))
		}
		rate, pausedFor := "-", "-"
		if t.Rate != nil {
			rate = t.Rate.String()
		}
		if t.Paused != nil {
			pausedFor = t.Paused.age()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s%s%s\n", t.Type, limit, t.Source, strategy, dash(t.Release), t.heldText(), free,
			flowCols(rate, keyRateColumn(t.KeyRate, t.OwnKeyRates), pausedFor), keysCol(t.keysColumn()), oldest)
	}
	if len(s.Types) == 0 {
		fmt.Fprintln(tw, "(no types: no limits are set and no lane is held)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(retired) > 0 {
		fmt.Fprintf(w, "* configured with a retired lane strategy, run as the one shown: %s. See sfnlimit config get.\n", strings.Join(retired, ", "))
	}
	writeOverflowStatus(w, s.Types)
	for _, t := range s.Types {
		if p := t.Paused; p != nil {
			fmt.Fprintf(w, "Paused: %s for %s, since %s: %s. Nothing of it starts; %s parked until the resume (sfnlimit resume %s).\n",
				t.Type, p.age(), p.Since.Format(time.RFC3339), p.reasonText(), plural(p.ParkedGroups, "waiting group", "waiting groups"), t.Type)
		}
	}
	fmt.Fprintln(w)
	if len(s.Types) > 0 {
		fmt.Fprintln(tw, "TYPE\tLEASES BY STATUS: HOW MANY (WHICH LANES)")
		for _, t := range s.Types {
			fmt.Fprintf(tw, "%s\t%s\n", t.Type, t.LanesText())
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if keys > 0 {
		for _, t := range s.Types {
			if t.Keys == nil || len(t.Keys.Running)+len(t.Keys.Waiting) == 0 {
				continue // a type that caps keys and has no work: its KEYS column says so
			}
			if err := t.writeKeys(w, keys); err != nil {
				return err
			}
			fmt.Fprintln(w)
		}
	}
	if err := writePools(w, s.Pools); err != nil {
		return err
	}
	fmt.Fprintln(tw, "QUEUE\tWAITING\tIN FLIGHT\t")
	fmt.Fprintf(tw, "general\t%d\t%d\tjobs not yet routed\n", s.Queues.General.Waiting+s.Queues.General.Delayed, s.Queues.General.InFlight)
	fmt.Fprintf(tw, "lanes (FIFO)\t%d\t%d\tin flight: holding a lane, or the first job of a parked waiting group\n", s.Queues.Lanes.Waiting+s.Queues.Lanes.Delayed, s.Queues.Lanes.InFlight)
	fmt.Fprintf(tw, "dead-letter\t%d\t%d\tsee: sfnlimit dlq list\n", s.Queues.DeadLetter.Waiting+s.Queues.DeadLetter.Delayed, s.Queues.DeadLetter.InFlight)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d of %d lanes in use; limits add up to %d of the FIFO in-flight quota of %d. %s\n",
		s.LanesInUse, s.Lanes, s.Lanes, config.MaxInFlight, s.At.Format(time.RFC3339))
	return err
}

// ratesKeys reports whether the type rates any key.
func (ts TypeStatus) ratesKeys() bool { return ts.KeyRate != nil || ts.OwnKeyRates > 0 }

// heldText is the HELD column: the lanes the type's jobs hold, and, over its limit, of how many.
func (ts TypeStatus) heldText() string {
	if ts.Over > 0 {
		return overCapText(ts.Running, ts.Limit)
	}
	return strconv.Itoa(ts.Running)
}

// overCapText says that n run against a cap that was lowered below n while they ran.
func overCapText(n, limit int) string { return fmt.Sprintf("%d/%d over cap (lowered)", n, limit) }

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
