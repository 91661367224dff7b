package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

func TestJobShow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	submitted := now.Add(-10 * time.Minute)
	mine := strings.Replace(sampleArn, "sfnlimit-sample", "mine", 1)
	put := func(f *fakes.SFN, sm, typ, id string, redrive, attempt, lane int, status sfntypes.ExecutionStatus) {
		in := job.Job{Type: typ, ID: id, Input: []byte(`{}`), SubmittedAt: submitted, Redrive: redrive}.ExecutionInput(lane, attempt).MustJSON()
		f.Put(fakes.Execution{StateMachineArn: sm, Name: job.RunName(typ, "", "", id, redrive, attempt), Status: status, Input: string(in), StartDate: now})
	}
	tests := []struct {
		name  string
		typ   string
		setup func(f *fakes.SFN, l *fakes.LeaseStore)
		// fates are the job's admission records (sender "", key "", id o-1), written in order
		fates     []admission.Fate
		wantState string
		wantExecs int
		wantLane  int
		wantErr   error
		// wantDetail, if set, is the detail shown
		wantDetail string
	}{
		{
			name: "succeeded after a retry",
			typ:  "payments",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				put(f, sampleArn, "payments", "o-1", 0, 1, 2, sfntypes.ExecutionStatusFailed)
				put(f, sampleArn, "payments", "o-1", 0, 2, 2, sfntypes.ExecutionStatusSucceeded)
			},
			wantState: "succeeded", wantExecs: 2, wantLane: 2,
		},
		{
			name: "running, from its lease",
			typ:  "payments",
			setup: func(f *fakes.SFN, l *fakes.LeaseStore) {
				put(f, sampleArn, "payments", "o-1", 0, 1, 1, sfntypes.ExecutionStatusRunning)
				l.Set(lease.Lease{Type: "payments", Lane: 1, JobID: "o-1", Attempt: 1, Status: lease.Starting, StartedAt: now, SubmittedAt: submitted})
			},
			wantState: "running", wantExecs: 1, wantLane: 1,
		},
		{
			// A start writes nothing after its claim: the claim of a running execution is a running job.
			name: "running, from its claim and its execution",
			typ:  "payments",
			setup: func(f *fakes.SFN, l *fakes.LeaseStore) {
				put(f, sampleArn, "payments", "o-1", 0, 1, 1, sfntypes.ExecutionStatusFailed)
				put(f, sampleArn, "payments", "o-1", 0, 2, 1, sfntypes.ExecutionStatusRunning)
				l.Set(lease.Lease{Type: "payments", Lane: 1, JobID: "o-1", Attempt: 2, Status: lease.Starting, StartedAt: now,
					ExecutionArn: job.ExecutionArn(sampleArn, job.RunName("payments", "", "", "o-1", 0, 2))})
			},
			wantState: "running", wantExecs: 2, wantLane: 1,
			wantDetail: "running attempt 2 of 3 on lane 1",
		},
		{
			name: "claim of an execution that ended, not yet released",
			typ:  "payments",
			setup: func(f *fakes.SFN, l *fakes.LeaseStore) {
				put(f, sampleArn, "payments", "o-1", 0, 1, 1, sfntypes.ExecutionStatusSucceeded)
				l.Set(lease.Lease{Type: "payments", Lane: 1, JobID: "o-1", Attempt: 1, Status: lease.Starting, StartedAt: now})
			},
			wantState: "running", wantExecs: 1, wantLane: 1,
			wantDetail: "attempt 1 of 3 ended succeeded on lane 1; its lane is about to be released",
		},
		{
			name: "starting: a lease and no execution yet",
			typ:  "payments",
			setup: func(_ *fakes.SFN, l *fakes.LeaseStore) {
				l.Set(lease.Lease{Type: "payments", Lane: 2, JobID: "o-1", Attempt: 1, Status: lease.Starting, StartedAt: now})
			},
			wantState: "starting", wantExecs: 0, wantLane: 2,
			wantDetail: "starting attempt 1 of 3 on lane 2 (its execution is not found yet)",
		},
		{
			name: "bound: a first-free job on its way to a free lane",
			typ:  "payments",
			setup: func(_ *fakes.SFN, l *fakes.LeaseStore) {
				l.Set(lease.Lease{Type: "payments", Lane: 2, JobID: "o-1", Status: lease.Bound, StartedAt: now})
			},
			wantState: "bound", wantExecs: 0, wantLane: 2,
			wantDetail: "bound to lane 2 from its waiting group; attempt 1 of 3 starts when its copy reaches the lane",
		},
		{
			name: "bound again after a failed attempt",
			typ:  "payments",
			setup: func(f *fakes.SFN, l *fakes.LeaseStore) {
				put(f, sampleArn, "payments", "o-1", 0, 1, 1, sfntypes.ExecutionStatusFailed)
				l.Set(lease.Lease{Type: "payments", Lane: 2, JobID: "o-1", Attempt: 1, Status: lease.Bound, StartedAt: now})
			},
			wantState: "bound", wantExecs: 1, wantLane: 2,
			wantDetail: "bound to lane 2 from its waiting group; attempt 2 of 3 starts when its copy reaches the lane",
		},
		{
			name: "attempts exhausted, redriven, and its redrive running on the type's own state machine",
			typ:  "reports", // 4 attempts; its override names another state machine
			setup: func(f *fakes.SFN, l *fakes.LeaseStore) {
				for a := 1; a <= 4; a++ {
					put(f, sampleArn, "reports", "o-1", 0, a, 3, sfntypes.ExecutionStatusFailed)
				}
				put(f, mine, "reports", "o-1", 1, 1, 1, sfntypes.ExecutionStatusRunning)
				l.Set(lease.Lease{Type: "reports", Lane: 1, JobID: "o-1", Attempt: 1, Redrive: 1, Status: lease.Starting, StartedAt: now})
			},
			wantState: "running", wantExecs: 5, wantLane: 1,
		},
		{
			name: "dead-lettered",
			typ:  "payments",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				for a := 1; a <= 3; a++ {
					put(f, sampleArn, "payments", "o-1", 0, a, 1, sfntypes.ExecutionStatusTimedOut)
				}
			},
			wantState: "dead-lettered", wantExecs: 3, wantLane: 1,
		},
		{
			name: "aborted",
			typ:  "payments",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				put(f, sampleArn, "payments", "o-1", 0, 1, 1, sfntypes.ExecutionStatusAborted)
			},
			wantState: "dead-lettered", wantExecs: 1, wantLane: 1,
		},
		{
			name: "cancelled by a newer job of its key",
			typ:  "payments",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				in := job.Job{Type: "payments", ID: "o-1", Input: []byte(`{}`), SubmittedAt: submitted}.ExecutionInput(1, 1).MustJSON()
				f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("payments", "", "", "o-1", 0, 1), Status: sfntypes.ExecutionStatusAborted,
					Input: string(in), StartDate: now, Error: job.ErrorCancelled, Cause: job.CancelCause("o-2")})
			},
			wantState: "cancelled", wantExecs: 1, wantLane: 1,
			wantDetail: "attempt 1 was stopped: superseded by job o-2 of the same key (overflow rule cancel); cancelled, not retried, not dead-lettered",
		},
		{
			name: "cancelled, its lane not released yet",
			typ:  "payments",
			setup: func(f *fakes.SFN, l *fakes.LeaseStore) {
				in := job.Job{Type: "payments", ID: "o-1", Input: []byte(`{}`), SubmittedAt: submitted}.ExecutionInput(1, 1).MustJSON()
				f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("payments", "", "", "o-1", 0, 1), Status: sfntypes.ExecutionStatusAborted,
					Input: string(in), StartDate: now, Error: job.ErrorCancelled, Cause: job.CancelCause("o-2")})
				l.Set(lease.Lease{Type: "payments", Lane: 1, JobID: "o-1", Attempt: 1, Status: lease.Starting, StartedAt: now})
			},
			wantState: "running", wantExecs: 1, wantLane: 1,
			wantDetail: "attempt 1 was stopped: superseded by job o-2 of the same key (overflow rule cancel); cancelled, not retried, not dead-lettered; its lane 1 is about to be released",
		},
		{
			// Another stop (an operator's) dead-letters the job, as before.
			name: "aborted with another error",
			typ:  "payments",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				in := job.Job{Type: "payments", ID: "o-1", Input: []byte(`{}`), SubmittedAt: submitted}.ExecutionInput(1, 1).MustJSON()
				f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("payments", "", "", "o-1", 0, 1), Status: sfntypes.ExecutionStatusAborted,
					Input: string(in), StartDate: now, Error: "Operator", Cause: "stopped by hand"})
			},
			wantState: "dead-lettered", wantExecs: 1, wantLane: 1,
		},
		{
			// Type sync's overflow rule is skip: a job it skipped has no lease and no execution.
			name: "skipped behind an older job of its key and sender",
			typ:  "sync", setup: func(*fakes.SFN, *fakes.LeaseStore) {},
			fates:     []admission.Fate{skippedFate(0, submitted, "o-0")},
			wantState: "skipped", wantExecs: 0, wantLane: 0,
			wantDetail: "skipped at 2026-03-01T11:50:01Z: its key was at its cap with job o-0 of the same sender holding a lane (overflow rule skip); not run, no attempt used, not dead-lettered",
		},
		{
			// A redrive of a dead-lettered job is a generation of its own, skipped without running.
			name: "its redrive skipped after its first generation was dead-lettered",
			typ:  "sync",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				for a := 1; a <= 3; a++ {
					put(f, sampleArn, "sync", "o-1", 0, a, 1, sfntypes.ExecutionStatusFailed)
				}
			},
			fates:     []admission.Fate{admittedFate(0, submitted), skippedFate(1, submitted.Add(time.Minute), "o-0")},
			wantState: "skipped", wantExecs: 3, wantLane: 0,
			wantDetail: "skipped at 2026-03-01T11:51:01Z: its key was at its cap with job o-0 of the same sender holding a lane (overflow rule skip); not run, no attempt used, not dead-lettered",
		},
		{
			// A producer may send the id of a skipped job again: that submission has its own fate.
			name: "skipped, sent again, admitted and run",
			typ:  "sync",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				put(f, sampleArn, "sync", "o-1", 0, 1, 1, sfntypes.ExecutionStatusSucceeded)
			},
			fates:     []admission.Fate{skippedFate(0, submitted.Add(-time.Hour), "o-0"), admittedFate(0, submitted)},
			wantState: "succeeded", wantExecs: 1, wantLane: 1,
		},
		{
			name: "admitted, not started yet", typ: "sync", setup: func(*fakes.SFN, *fakes.LeaseStore) {},
			fates:     []admission.Fate{admittedFate(0, submitted)},
			wantState: "not-started", wantErr: ErrJobNotFound,
		},
		{
			// Only a type whose rule is skip is asked: payments' record is not read.
			name: "a type without the rule skip: no fate read", typ: "payments", setup: func(*fakes.SFN, *fakes.LeaseStore) {},
			fates:     []admission.Fate{{Job: admission.Job{Type: "payments", ID: "o-1", SubmittedAt: submitted}, Outcome: admission.Skipped, Behind: "o-0", At: submitted}},
			wantState: "not-started", wantErr: ErrJobNotFound,
		},
		{name: "not found", typ: "payments", setup: func(*fakes.SFN, *fakes.LeaseStore) {}, wantState: "not-started", wantErr: ErrJobNotFound},
		{
			name: "any type",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				put(f, sampleArn, "payments", "o-1", 0, 1, 2, sfntypes.ExecutionStatusSucceeded)
			},
			wantState: "succeeded", wantExecs: 1, wantLane: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
			tt.setup(f, l)
			db := fakes.NewDynamoDB("t")
			fates := admission.NewStore(db, "t")
			for _, fate := range tt.fates {
				if fate.Outcome == admission.Skipped {
					if ok, _, err := fates.Skip(context.Background(), fate.Job, fate.Behind, fate.At); err != nil || !ok {
						t.Fatalf("Skip = %v, %v", ok, err)
					}
				} else if err := fates.Admit(context.Background(), fate.Job, fate.At); err != nil {
					t.Fatal(err)
				}
			}
			reads := map[bool]int{} // queries, by whether the type read was sync
			db.OnCall = func(op string) error {
				if op == "Query" {
					reads[tt.typ == "sync"]++
				}
				return nil
			}
			r, err := config.NewResolver(defaults(), staticStore{{Type: "reports", StateMachineArn: mine}, {Type: "sync", Limit: 4, KeyLimit: 1, Overflow: config.OverflowSkip}}, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			views, err := JobFinder{Leases: l, SFN: f, Admission: fates, Config: r, Defaults: defaults()}.Show(context.Background(), tt.typ, "", "o-1")
			if tt.typ != "" && reads[false] > 0 {
				t.Errorf("Show() read the admission records of type %s, whose rule is not skip", tt.typ)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Show() error = %v, want %v", err, tt.wantErr)
			}
			if len(views) != 1 {
				t.Fatalf("Show() = %d views, want 1", len(views))
			}
			v := views[0]
			if v.State != tt.wantState || len(v.Executions) != tt.wantExecs || v.Lane != tt.wantLane || v.Detail == "" {
				t.Errorf("Show() = %s (%s), %d executions, lane %d; want %s, %d, lane %d", v.State, v.Detail, len(v.Executions), v.Lane, tt.wantState, tt.wantExecs, tt.wantLane)
			}
			if tt.wantDetail != "" && v.Detail != tt.wantDetail {
				t.Errorf("Show() detail = %q, want %q", v.Detail, tt.wantDetail)
			}
			if tt.wantExecs > 0 && (v.SubmittedAt == nil || !v.SubmittedAt.Equal(submitted)) {
				t.Errorf("Show() submitted = %v, want %v", v.SubmittedAt, submitted)
			}
			var b strings.Builder
			if err := WriteJobs(&b, views); err != nil || !strings.Contains(b.String(), "job o-1 of type") {
				t.Errorf("WriteJobs() = %v:\n%s", err, b.String())
			}
		})
	}
}

// skippedFate is job o-1 of type sync (sender "", key "") skipped behind job behind, a second after
// its submission.
func skippedFate(redrive int, submitted time.Time, behind string) admission.Fate {
	return admission.Fate{Job: admission.Job{Type: "sync", ID: "o-1", Redrive: redrive, SubmittedAt: submitted},
		Outcome: admission.Skipped, Behind: behind, At: submitted.Add(time.Second)}
}

// admittedFate is job o-1 of type sync admitted a second after its submission.
func admittedFate(redrive int, submitted time.Time) admission.Fate {
	return admission.Fate{Job: admission.Job{Type: "sync", ID: "o-1", Redrive: redrive, SubmittedAt: submitted},
		Outcome: admission.Admitted, At: submitted.Add(time.Second)}
}

func TestExecutionArn(t *testing.T) {
	arn := job.ExecutionArn(sampleArn, "payments-o-1-2")
	if want := "arn:aws:states:us-east-1:123456789012:execution:sfnlimit-sample:payments-o-1-2"; arn != want {
		t.Errorf("job.ExecutionArn() = %s, want %s", arn, want)
	}
	if got := stateMachineOf(arn); got != sampleArn {
		t.Errorf("stateMachineOf() = %s, want %s", got, sampleArn)
	}
}

// Without a type, job show reads leases type by type, never by scanning the table.
func TestJobShowAnyTypeDoesNotScan(t *testing.T) {
	f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
	l.BeforeAll = func() error { return errors.New("job show scanned the table") }
	l.Set(lease.Lease{Type: "gone", Lane: 3, JobID: "o-1", Attempt: 1, Status: lease.Starting, StartedAt: time.Now()})
	r, err := config.NewResolver(defaults(), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	views, err := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults()}.Show(context.Background(), "", "", "o-1")
	if err != nil {
		t.Fatalf("Show() = %v", err)
	}
	if len(views) != 1 || views[0].Type != "gone" {
		t.Errorf("Show() = %+v, want the job's lease of type gone", views)
	}
}

// job show names the job's key: from its lease while it holds a lane, else from its last
// execution's input (job.key); with the cap its key has now when the type caps keys.
func TestJobShowKey(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	put := func(f *fakes.SFN, typ, key string, attempt int, status sfntypes.ExecutionStatus) {
		in := job.Job{Type: typ, ID: "o-1", Key: key, Input: []byte(`{}`), SubmittedAt: now}.ExecutionInput(1, attempt).MustJSON()
		f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName(typ, "", key, "o-1", 0, attempt), Status: status, Input: string(in), StartDate: now})
	}
	ovs := staticStore{{Type: "llm", Limit: 10, KeyLimit: 2, KeyLimits: map[string]int{"acme": 5}}}
	tests := []struct {
		name     string
		typ      string
		key      string // --key: a keyed job that holds no lane is found by its key
		setup    func(f *fakes.SFN, l *fakes.LeaseStore)
		wantKey  string
		wantCap  int
		wantLine string // the key's line in the table; "" when there is none
	}{
		{
			name: "from the lease, with its own cap", typ: "llm",
			setup: func(f *fakes.SFN, l *fakes.LeaseStore) {
				put(f, "llm", "acme", 1, sfntypes.ExecutionStatusRunning)
				l.Set(lease.Lease{Type: "llm", Lane: 1, JobID: "o-1", JobKey: "acme", Attempt: 1, Status: lease.Starting, StartedAt: now})
			},
			wantKey: "acme", wantCap: 5, wantLine: "  key        acme (its type runs at most 5 jobs of it at once)\n",
		},
		{
			name: "from a bound lease, before any execution", typ: "llm",
			setup: func(_ *fakes.SFN, l *fakes.LeaseStore) {
				l.Set(lease.Lease{Type: "llm", Lane: 3, JobID: "o-1", JobKey: "tenant-7.eu", Status: lease.Bound, StartedAt: now})
			},
			wantKey: "tenant-7.eu", wantCap: 2, wantLine: "  key        tenant-7.eu (its type runs at most 2 jobs of it at once)\n",
		},
		{
			name: "from the execution input once released", typ: "llm", key: "globex",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				put(f, "llm", "globex", 1, sfntypes.ExecutionStatusFailed)
				put(f, "llm", "globex", 2, sfntypes.ExecutionStatusSucceeded)
			},
			wantKey: "globex", wantCap: 2, wantLine: "  key        globex (its type runs at most 2 jobs of it at once)\n",
		},
		{
			name: "the default key of a type that caps keys", typ: "llm",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				put(f, "llm", "", 1, sfntypes.ExecutionStatusSucceeded)
			},
			wantCap: 2, wantLine: "  key        none: the default key (its type runs at most 2 jobs of it at once)\n",
		},
		{
			name: "a key of a type that caps none", typ: "payments", key: "acme",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				put(f, "payments", "acme", 1, sfntypes.ExecutionStatusSucceeded)
			},
			wantKey: "acme", wantLine: "  key        acme\n",
		},
		{
			name: "no key, no caps: no line", typ: "payments",
			setup: func(f *fakes.SFN, _ *fakes.LeaseStore) {
				put(f, "payments", "", 1, sfntypes.ExecutionStatusSucceeded)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
			tt.setup(f, l)
			r, err := config.NewResolver(defaults(), ovs, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			views, err := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults()}.Show(context.Background(), tt.typ, tt.key, "o-1")
			if err != nil || len(views) != 1 {
				t.Fatalf("Show() = %+v, %v; want one job", views, err)
			}
			v := views[0]
			if v.Key != tt.wantKey || v.KeyCap != tt.wantCap {
				t.Errorf("Show() key %q cap %d, want %q cap %d", v.Key, v.KeyCap, tt.wantKey, tt.wantCap)
			}
			var b strings.Builder
			if err := WriteJobs(&b, views); err != nil {
				t.Fatal(err)
			}
			if tt.wantLine != "" && !strings.Contains(b.String(), tt.wantLine) {
				t.Errorf("WriteJobs() lacks %q:\n%s", tt.wantLine, b.String())
			}
			if tt.wantLine == "" && strings.Contains(b.String(), "  key ") {
				t.Errorf("WriteJobs() names a key:\n%s", b.String())
			}
		})
	}
}

// job show gives the job's priority from its last execution's input (job.priority): by name when
// it has one, normal when the input has none; nothing when the job has no execution to read it from.
func TestJobShowPriority(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		prios    []int // the priority in each attempt's input; none: no execution
		wantPrio string
		wantLine string // "" : no priority line
	}{
		{name: "high", prios: []int{9}, wantPrio: "high", wantLine: "  priority   high\n"},
		{name: "low", prios: []int{1}, wantPrio: "low", wantLine: "  priority   low\n"},
		{name: "a number", prios: []int{7}, wantPrio: "7", wantLine: "  priority   7\n"},
		{name: "none in the input: normal", prios: []int{0}, wantPrio: "normal", wantLine: "  priority   normal\n"},
		{name: "the last attempt's", prios: []int{0, 3}, wantPrio: "3", wantLine: "  priority   3\n"},
		{name: "no execution yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
			for i, p := range tt.prios {
				in := job.Job{Type: "payments", ID: "o-1", Priority: p, Input: []byte(`{}`), SubmittedAt: now}.ExecutionInput(1, i+1).MustJSON()
				f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("payments", "", "", "o-1", 0, i+1), Status: sfntypes.ExecutionStatusFailed, Input: string(in), StartDate: now})
			}
			if len(tt.prios) == 0 {
				l.Set(lease.Lease{Type: "payments", Lane: 1, JobID: "o-1", Status: lease.Bound, StartedAt: now})
			}
			r, err := config.NewResolver(defaults(), nil, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			views, err := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults()}.Show(context.Background(), "payments", "", "o-1")
			if err != nil || len(views) != 1 {
				t.Fatalf("Show() = %+v, %v; want one job", views, err)
			}
			if views[0].Priority != tt.wantPrio {
				t.Errorf("Show() priority %q, want %q", views[0].Priority, tt.wantPrio)
			}
			var b strings.Builder
			if err := WriteJobs(&b, views); err != nil {
				t.Fatal(err)
			}
			if tt.wantLine != "" && !strings.Contains(b.String(), tt.wantLine) || tt.wantLine == "" && strings.Contains(b.String(), "priority") {
				t.Errorf("WriteJobs() = \n%s\nwant the line %q", b.String(), tt.wantLine)
			}
		})
	}
}

// submit looks up whether the jobs it is about to send were submitted before (a lease or an
// execution of the same type and id: execution names are unique for 90 days, so such a job never
// runs again), for the first MaxEarlierChecks jobs with an id; the others are not looked up.
func TestFindEarlier(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
	in := job.Job{Type: "payments", ID: "done", Input: []byte(`{}`), SubmittedAt: now}.ExecutionInput(1, 1).MustJSON()
	f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("payments", "", "", "done", 0, 1), Status: sfntypes.ExecutionStatusSucceeded, Input: string(in), StartDate: now})
	l.Set(lease.Lease{Type: "payments", Lane: 2, JobID: "busy", Attempt: 1, Status: lease.Starting, StartedAt: now})
	r, err := config.NewResolver(defaults(), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	finder := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults()}
	jobs := []Line{
		{No: 1, Type: "payments", ID: "new"},
		{No: 2, Type: "payments", ID: "done"},
		{No: 3, Type: "payments"}, // no id: a new job whatever it holds
		{No: 4, Type: "payments", ID: "busy"},
	}
	for i := range MaxEarlierChecks {
		jobs = append(jobs, Line{No: 5 + i, Type: "payments", ID: fmt.Sprint("more-", i)})
	}
	jobs = append(jobs, Line{No: 99, Type: "payments", ID: "done"}) // past the checks
	found, checked, unchecked, err := finder.FindEarlier(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	if checked != MaxEarlierChecks || unchecked != 4 {
		t.Errorf("checked %d, %d unchecked; want the first %d jobs with an id, and 4 left", checked, unchecked, MaxEarlierChecks)
	}
	if rest := WithoutEarlier(jobs, found); len(rest) != len(jobs)-2 || slices.ContainsFunc(rest, func(l Line) bool { return l.No == 2 || l.No == 4 }) {
		t.Errorf("WithoutEarlier() = %+v, want every line but 2 and 4", rest)
	}
	if len(found) != 2 || found[0].No != 2 || found[0].State != "succeeded" || found[0].Execution != "payments-done-1" || found[0].Status != "SUCCEEDED" ||
		found[1].No != 4 || found[1].State != "starting" || found[1].Lane != 2 {
		t.Fatalf("FindEarlier() = %+v, want line 2 (succeeded) and line 4 (holding lane 2)", found)
	}
	for _, tt := range []struct {
		give Earlier
		want string
	}{
		{give: found[0], want: "payments/done was already submitted (execution payments-done-1 SUCCEEDED): it will not run again; use a new id"},
		{give: found[1], want: "payments/busy was already submitted (it holds lane 2: starting): it will not run again; use a new id"},
		{give: Earlier{Type: "payments", ID: "x", State: "dead-lettered", Execution: "payments-x-3", Status: "FAILED"},
			want: "payments/x was already submitted (execution payments-x-3 FAILED): it will not run again; use a new id, or redrive its dead letter (sfnlimit dlq redrive --type payments --id x)"},
	} {
		if got := tt.give.Text(); got != tt.want {
			t.Errorf("Text() = %q, want %q", got, tt.want)
		}
	}
	// A lookup that fails is an error: the caller sends without it, and says so.
	finder.SFN = failingDescribe{}
	if _, _, _, err := finder.FindEarlier(context.Background(), jobs[:1]); err == nil {
		t.Error("FindEarlier() with Step Functions failing = nil error")
	}
}

type failingDescribe struct{}

func (failingDescribe) DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error) {
	return nil, errors.New("AccessDeniedException")
}

// A job the starter dead-lettered before any execution of it started (unknown_type after its limit
// was removed, start_refused) carries the next redrive generation (starter.refuse), so once
// redriven it runs only under generation 1's names: payments-o-1__g1-1. Its lease is gone when it
// has ended. It was submitted before (an execution exists for its type and id), and a new
// submission would run it a second time under generation 0's free names: FindEarlier must find it,
// as job show must.
func TestFindEarlierRedrivenAfterStarterRefusal(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
	in := job.Job{Type: "payments", ID: "o-1", Input: []byte(`{}`), SubmittedAt: now, Redrive: 1}.ExecutionInput(1, 1).MustJSON()
	f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("payments", "", "", "o-1", 1, 1), Status: sfntypes.ExecutionStatusSucceeded, Input: string(in), StartDate: now})
	r, err := config.NewResolver(defaults(), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	finder := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults()}
	found, _, _, err := finder.FindEarlier(context.Background(), []Line{{No: 1, Type: "payments", ID: "o-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Execution != job.RunName("payments", "", "", "o-1", 1, 1) {
		t.Errorf("FindEarlier() = %+v, want payments/o-1 found by its redriven execution %s", found, job.RunName("payments", "", "", "o-1", 1, 1))
	}
}

// A job that ran in generation 0, was dead-lettered (generation 1), redriven and refused by the
// starter (generation 2), then redriven again runs as payments-o-2__g2-1: job show lists its
// executions of both generations, past the empty one between them, and says how the last ended.
func TestShowLooksPastARefusedGeneration(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
	for _, e := range []struct {
		redrive int
		status  sfntypes.ExecutionStatus
	}{{0, sfntypes.ExecutionStatusFailed}, {2, sfntypes.ExecutionStatusSucceeded}} {
		in := job.Job{Type: "payments", ID: "o-2", Input: []byte(`{}`), SubmittedAt: now, Redrive: e.redrive}.ExecutionInput(1, 1).MustJSON()
		f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("payments", "", "", "o-2", e.redrive, 1), Status: e.status, Input: string(in), StartDate: now})
	}
	r, err := config.NewResolver(defaults(), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	views, err := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults()}.Show(context.Background(), "payments", "", "o-2")
	if err != nil {
		t.Fatal(err)
	}
	if v := views[0]; len(v.Executions) != 2 || v.Redrive != 2 || v.State != "succeeded" {
		t.Errorf("Show() = %+v, want 2 executions (redrives 0 and 2), succeeded at redrive 2", v)
	}
}

// A job found submitted before carries the batch it was submitted as, from its execution's input,
// so that a resend of a batch's input counts it in the batch.
func TestFindEarlierSaysTheBatch(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
	in := job.Job{Type: "payments", ID: "o-1", Input: []byte(`{}`), SubmittedAt: now, Batch: "nightly"}.ExecutionInput(1, 1).MustJSON()
	f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("payments", "", "", "o-1", 0, 1), Status: sfntypes.ExecutionStatusSucceeded, Input: string(in), StartDate: now})
	r, err := config.NewResolver(defaults(), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	found, _, _, err := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults()}.FindEarlier(context.Background(), []Line{{No: 1, Type: "payments", ID: "o-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Batch != "nightly" {
		t.Errorf("FindEarlier() = %+v, want payments/o-1 of batch nightly", found)
	}
}

// A job skipped while its type's rule was skip stays skipped when an operator switches the rule
// afterwards (config set sync --overflow queue): the starter still honours its fate (a key-capped
// type reads a redelivered job's fate), so job show must still find it and say it was skipped,
// not "job not found".
func TestJobShowSkippedAfterTheRuleChanged(t *testing.T) {
	ctx := context.Background()
	submitted := time.Date(2026, 3, 1, 11, 50, 0, 0, time.UTC)
	fates := admission.NewStore(fakes.NewDynamoDB("t"), "t")
	f := skippedFate(0, submitted, "o-0")
	if ok, _, err := fates.Skip(ctx, f.Job, f.Behind, f.At); err != nil || !ok {
		t.Fatalf("Skip = %v, %v", ok, err)
	}
	r, err := config.NewResolver(defaults(), staticStore{{Type: "sync", Limit: 4, KeyLimit: 1, Overflow: config.OverflowQueue}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	views, err := JobFinder{Leases: fakes.NewLeaseStore(nil), SFN: fakes.NewSFN(nil), Admission: fates, Config: r, Defaults: defaults()}.Show(ctx, "sync", "", "o-1")
	if err != nil {
		t.Fatalf("Show() error = %v, want the skipped job found", err)
	}
	if len(views) != 1 || views[0].State != "skipped" {
		t.Fatalf("Show() = %+v, want one view, skipped", views)
	}
}
