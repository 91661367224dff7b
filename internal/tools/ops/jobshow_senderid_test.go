package ops

import (
	"context"
	"slices"
	"testing"
	"time"

	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A job is its type, sender, key and id, and an execution's name hashes its sender in: job show
// finds, without --sender, the job without a sender (routed before senders), the caller's job and
// any sender's job holding a lane, every one of them; --sender finds only that sender's. submit's
// repeat check looks up only the caller's own job.
func TestJobShowTellsSendersApart(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f, l := fakes.NewSFN(nil), fakes.NewLeaseStore(nil)
	put := func(sender string, attempt int, status sfntypes.ExecutionStatus) {
		in := job.Job{Type: "llm", ID: "o-1", Key: "acme", Sender: sender, Input: []byte(`{}`), SubmittedAt: now}.ExecutionInput(2, attempt).MustJSON()
		f.Put(fakes.Execution{StateMachineArn: sampleArn, Name: job.RunName("llm", sender, "acme", "o-1", 0, attempt), Status: status, Input: string(in), StartDate: now})
	}
	put("", 1, sfntypes.ExecutionStatusSucceeded)              // routed before senders
	put("AROAACME", 1, sfntypes.ExecutionStatusSucceeded)      // the caller's
	put("AROAMALLORY", 1, sfntypes.ExecutionStatusRunning)     // holds a lane
	put("AROAELSEWHERE", 1, sfntypes.ExecutionStatusSucceeded) // found only with --sender
	l.Set(lease.Lease{Type: "llm", Lane: 2, JobID: "o-1", JobKey: "acme", JobSender: "AROAMALLORY", Attempt: 1, Status: lease.Starting, StartedAt: now,
		ExecutionArn: fakes.ExecutionArn(sampleArn, job.RunName("llm", "AROAMALLORY", "acme", "o-1", 0, 1))})
	r, err := config.NewResolver(defaults(), staticStore{{Type: "llm", Limit: 10}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name        string
		caller      string
		senders     []string
		wantSenders []string
	}{
		{"every match", "AROAACME", nil, []string{"", "AROAACME", "AROAMALLORY"}},
		{"caller unknown", "", nil, []string{"", "AROAMALLORY"}},
		{"--sender", "AROAACME", []string{"AROAELSEWHERE"}, []string{"AROAELSEWHERE"}},
		{"--sender of one holding a lane", "", []string{"AROAMALLORY"}, []string{"AROAMALLORY"}},
	} {
		finder := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults(), Caller: tt.caller, Senders: tt.senders}
		views, err := finder.Show(context.Background(), "llm", "acme", "o-1")
		if err != nil {
			t.Fatalf("%s: Show(llm, acme, o-1): %v", tt.name, err)
		}
		var senders []string
		for _, v := range views {
			senders = append(senders, v.Sender)
			if v.Sender == "AROAMALLORY" && (v.State != stateRunning || v.Lease == nil) {
				t.Errorf("%s: AROAMALLORY's job = state %s, lease %v; want running in its lane", tt.name, v.State, v.Lease)
			}
		}
		slices.Sort(senders)
		if !slices.Equal(senders, tt.wantSenders) {
			t.Errorf("%s: Show(llm, acme, o-1) = jobs of senders %q, want %q", tt.name, senders, tt.wantSenders)
		}
	}
	finder := JobFinder{Leases: l, SFN: f, Config: r, Defaults: defaults(), Caller: "AROANEWCOMER"}
	found, _, _, err := finder.FindEarlier(context.Background(), []Line{{No: 1, Type: "llm", Key: "acme", ID: "o-1"}})
	if err != nil || len(found) != 0 {
		t.Errorf("FindEarlier of AROANEWCOMER's llm/acme/o-1 = %+v, %v; want none: the others' jobs are other jobs", found, err)
	}
	finder.Caller = "AROAACME"
	if found, _, _, err := finder.FindEarlier(context.Background(), []Line{{No: 1, Type: "llm", Key: "acme", ID: "o-1"}}); err != nil || len(found) != 1 {
		t.Errorf("FindEarlier of AROAACME's llm/acme/o-1 = %+v, %v; want its own job", found, err)
	}
}
