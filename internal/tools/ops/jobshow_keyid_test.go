package ops

import (
	"context"
	"testing"
	"time"

	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A job is its type, key and id: job show --key finds one key's job and none of another key's job
// with the same id; without --key it finds the default key's job and any key's job holding a lane.
func TestJobShowTellsKeysApart(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
	put := func(key string, attempt int, status sfntypes.ExecutionStatus) {
		in := job.Job{Type: "llm", ID: "o-1", Key: key, Input: []byte(`{}`), SubmittedAt: now}.ExecutionInput(2, attempt).MustJSON()
		f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("llm", "", key, "o-1", 0, attempt), Status: status, Input: string(in), StartDate: now})
	}
	put("acme", 1, sfntypes.ExecutionStatusSucceeded)
	put("beta", 1, sfntypes.ExecutionStatusFailed)
	put("beta", 2, sfntypes.ExecutionStatusRunning)
	l.Set(lease.Lease{Type: "llm", Lane: 2, JobID: "o-1", JobKey: "beta", Attempt: 2, Status: lease.Starting, StartedAt: now,
		ExecutionArn: fakes.ExecutionArn(sampleArn, job.RunName("llm", "", "beta", "o-1", 0, 2))})
	r, err := config.NewResolver(defaults(), staticStore{{Type: "llm", Limit: 10, KeyLimit: 2}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	finder := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults()}
	for _, tt := range []struct {
		key       string
		wantKeys  []string
		wantState string
		wantExecs int
	}{
		{key: "acme", wantKeys: []string{"acme"}, wantState: "succeeded", wantExecs: 1},
		{key: "beta", wantKeys: []string{"beta"}, wantState: stateRunning, wantExecs: 2},
		{key: "", wantKeys: []string{"beta"}, wantState: stateRunning, wantExecs: 2}, // the one holding a lane
	} {
		views, err := finder.Show(context.Background(), "llm", tt.key, "o-1")
		if err != nil {
			t.Fatalf("Show(llm, key %q, o-1): %v", tt.key, err)
		}
		var keys []string
		for _, v := range views {
			keys = append(keys, v.Key)
		}
		if len(views) != len(tt.wantKeys) || keys[0] != tt.wantKeys[0] {
			t.Fatalf("Show(llm, key %q, o-1) = jobs of keys %q, want %q", tt.key, keys, tt.wantKeys)
		}
		if v := views[0]; v.State != tt.wantState || len(v.Executions) != tt.wantExecs {
			t.Errorf("Show(llm, key %q, o-1) = state %s with %d executions, want %s with %d", tt.key, v.State, len(v.Executions), tt.wantState, tt.wantExecs)
		}
	}
	if _, err := finder.Show(context.Background(), "llm", "globex", "o-1"); err == nil {
		t.Errorf("Show(llm, key globex, o-1) found a job, want none: o-1 of acme and of beta are other jobs")
	}
}
