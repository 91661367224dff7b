package iampolicy_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/iampolicy"
)

const defaultBus = "arn:aws:events:us-east-1:123456789012:event-bus/default"

// PutEvents is one authorization per entry, on the bus the entry goes to, with its source and detail
// type as condition keys.
func TestPutEventsRequests(t *testing.T) {
	entry := func(bus string) ebtypes.PutEventsRequestEntry {
		e := ebtypes.PutEventsRequestEntry{Source: aws.String("sfnlimit"), DetailType: aws.String("d"), Detail: aws.String("{}")}
		if bus != "" {
			e.EventBusName = aws.String(bus)
		}
		return e
	}
	reqs, err := iampolicy.Requests(acct, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
		entry(""), entry("default"), entry("orders"), entry("arn:aws:events:eu-west-1:210987654321:event-bus/x"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"events:PutEvents on " + defaultBus + " events:detail-type=[d] events:source=[sfnlimit]",
		"events:PutEvents on " + defaultBus + " events:detail-type=[d] events:source=[sfnlimit]",
		"events:PutEvents on arn:aws:events:us-east-1:123456789012:event-bus/orders events:detail-type=[d] events:source=[sfnlimit]",
		"events:PutEvents on arn:aws:events:eu-west-1:210987654321:event-bus/x events:detail-type=[d] events:source=[sfnlimit]",
	}
	if fmt.Sprint(reqs) != fmt.Sprint(want) {
		t.Errorf("Requests() =\n%v\nwant\n%v", reqs, want)
	}
	if _, err := iampolicy.Requests(acct, &eventbridge.PutEventsInput{}); err == nil {
		t.Error("Requests(PutEvents without entries) = no error, want one (EventBridge refuses it)")
	}
}

// Each function's role in template.yaml lets it send the batch completion event (source sfnlimit,
// on the default bus) and nothing else: another source, another bus, or one bad entry among good
// ones is refused.
func TestTemplateRolesSendOnlyBatchEvents(t *testing.T) {
	tpl, err := cfntemplate.Load(filepath.Join("..", "..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tpl.Resolver(cfntemplate.Env{Attr: func(id, attribute string) (string, bool) {
		return fmt.Sprintf("arn:aws:placeholder:us-east-1:123456789012:%s/%s", id, attribute), true
	}})
	if err != nil {
		t.Fatal(err)
	}
	completion := ebtypes.PutEventsRequestEntry{Source: aws.String(batchend.Source), DetailType: aws.String(batchend.DetailType), Detail: aws.String("{}")}
	other := completion
	other.Source = aws.String("com.example.other")
	otherBus := completion
	otherBus.EventBusName = aws.String("orders")
	cases := []struct {
		name    string
		entries []ebtypes.PutEventsRequestEntry
		want    []bool // per entry
	}{
		{"the completion event", []ebtypes.PutEventsRequestEntry{completion}, []bool{true}},
		{"another source is denied", []ebtypes.PutEventsRequestEntry{other}, []bool{false}},
		{"another bus is denied", []ebtypes.PutEventsRequestEntry{otherBus}, []bool{false}},
		{"entries are judged one by one", []ebtypes.PutEventsRequestEntry{completion, other}, []bool{true, false}},
	}
	for _, fn := range []string{"RouterFunction", "StarterFunction", "ReleaserFunction"} {
		docs, err := res.Policies(fn)
		if err != nil {
			t.Fatal(err)
		}
		var ps []iampolicy.Policy
		for _, d := range docs {
			p, err := iampolicy.Parse(d.Name, d.Document)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for _, c := range cases {
			t.Run(fn+"/"+c.name, func(t *testing.T) {
				reqs, err := iampolicy.Requests(acct, &eventbridge.PutEventsInput{Entries: c.entries})
				if err != nil {
					t.Fatal(err)
				}
				if len(reqs) != len(c.want) {
					t.Fatalf("Requests() = %v, want %d", reqs, len(c.want))
				}
				for i, r := range reqs {
					d, err := iampolicy.Decide(ps, r)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed != c.want[i] {
						t.Errorf("%s: allowed %v (by %q), want %v", r, d.Allowed, d.By, c.want[i])
					}
				}
				e := &iampolicy.Enforcer{Principal: fn, Policies: ps, Account: acct}
				err = e.Authorize(&eventbridge.PutEventsInput{Entries: c.entries})
				if all := !contains(c.want, false); (err == nil) != all {
					t.Errorf("Authorize() = %v, want allowed %v", err, all)
				}
			})
		}
	}
}

func contains(bs []bool, v bool) bool {
	for _, b := range bs {
		if b == v {
			return true
		}
	}
	return false
}
