package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// A first-free type's jobs wait in one of its type's ceil(limit/10) waiting groups, chosen by a hash
// of the job (so a job routed twice lands in the same group, where SQS deduplicates it), and every
// group is used; the starter binds them to lanes.
func TestFirstFreeJobsGoToTheirWaitingGroups(t *testing.T) {
	for _, tt := range []struct {
		limit      int
		wantGroups int
	}{{3, 1}, {25, 3}} {
		t.Run(fmt.Sprint("limit ", tt.limit), func(t *testing.T) {
			ctx := context.Background()
			cfg := &fakeConfig{limits: map[string]int{"payments": tt.limit}, strategy: map[string]string{"payments": lane.FirstFree}}
			var records []events.SQSMessage
			for i := range 60 {
				records = append(records, events.SQSMessage{
					MessageId: fmt.Sprint("m-", i), Body: fmt.Sprintf(`{"type":"payments","id":"order-%d","input":{}}`, i),
					Attributes: map[string]string{"SentTimestamp": "1700000000000"},
				})
			}
			groups := map[string]int{}
			var first map[string]string // job id -> group on the first routing
			for round := range 2 {
				sender := &fakeSender{}
				r := newRouter(cfg, sender, &fakeDLQ{}, nil)
				resp, err := r.Handle(ctx, events.SQSEvent{Records: records})
				if err != nil || len(resp.BatchItemFailures) != 0 {
					t.Fatalf("Handle() = %+v, %v", resp, err)
				}
				got := map[string]string{}
				for _, e := range sender.entries() {
					var j job.Job
					if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &j); err != nil {
						t.Fatal(err)
					}
					g := aws.ToString(e.MessageGroupId)
					if want := job.WaitingGroupID("payments", lane.WaitingGroup(j, tt.limit)); g != want {
						t.Errorf("job %s sent to group %q, want its waiting group %q", j.ID, g, want)
					}
					if d := aws.ToString(e.MessageDeduplicationId); d != job.DedupID("payments", "", "", j.ID, 0) {
						t.Errorf("job %s deduplication id %q, want the job's", j.ID, d)
					}
					got[j.ID] = g
					groups[g]++
				}
				if round == 0 {
					first = got
					continue
				}
				for id, g := range got {
					if first[id] != g {
						t.Errorf("job %s routed to %s, then to %s", id, first[id], g)
					}
				}
			}
			if len(groups) != tt.wantGroups {
				t.Errorf("groups used = %v, want %d", groups, tt.wantGroups)
			}
		})
	}
}
