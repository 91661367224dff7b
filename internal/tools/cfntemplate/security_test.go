package cfntemplate

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// Security checks of template.yaml that fail on regression (issue: operate it with confidence).

// ownAttr answers every attribute of a resource of the template with a marked ARN, so a resolved
// policy shows which of its resources are the stack's own.
func ownAttr(tpl *Template) AttrFunc {
	return func(id, attr string) (string, bool) {
		if _, ok := tpl.byID[id]; !ok {
			return "", false
		}
		return fmt.Sprintf("arn:aws:own:us-east-1:123456789012:OWN-%s-%s", id, attr), true
	}
}

// Every Allow statement names only the stack's own resources: resources of the template, the
// sample state machines' executions (named from the stack), and the state machines the deployer
// listed in ExtraStateMachineArns. Two exceptions: X-Ray, whose trace-writing actions have no
// resource-level permissions (AWS forces "*"), and the account's default event bus, which no stack
// owns and where the batch completion event goes: a statement on it may only put events, and only
// with the source sfnlimit (condition events:source), so a function cannot pose as another sender.
func TestEveryAllowIsScopedToTheStack(t *testing.T) {
	const extra = "arn:aws:states:us-east-1:123456789012:stateMachine:USERS-own"
	tpl := loadApp(t)
	r, err := tpl.Resolver(Env{StackName: stack, Parameters: map[string]string{"ExtraStateMachineArns": extra}, Attr: ownAttr(tpl)})
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(res string) bool {
		switch {
		case strings.Contains(res, ":OWN-"):
			return true
		case strings.HasPrefix(res, "arn:aws:states:us-east-1:123456789012:execution:"+stack+"-sample:"),
			strings.HasPrefix(res, "arn:aws:states:us-east-1:123456789012:stateMachine:"+stack+"-sample"),
			strings.HasPrefix(res, "arn:aws:states:us-east-1:123456789012:execution:"+stack+"-bare:"),
			strings.HasPrefix(res, "arn:aws:states:us-east-1:123456789012:stateMachine:"+stack+"-bare"):
			return true
		case res == extra || strings.HasPrefix(res, strings.Replace(extra, ":stateMachine:", ":execution:", 1)+":"):
			return true
		}
		return false
	}
	statements := 0
	for _, res := range tpl.resources {
		var docs []any
		switch res.Type {
		case "AWS::IAM::Role":
			for _, p := range asList(res.Properties["Policies"]) {
				docs = append(docs, asMap(p)["PolicyDocument"])
			}
		case "AWS::IAM::ManagedPolicy":
			docs = append(docs, res.Properties["PolicyDocument"])
		}
		for _, doc := range docs {
			ev, err := r.Eval(doc)
			if err != nil {
				t.Fatalf("%s: resolve policy: %v", res.ID, err)
			}
			for _, st := range asList(asMap(ev)["Statement"]) {
				m := asMap(st)
				if m["Effect"] != "Allow" {
					continue
				}
				statements++
				actions := strings.Fields(fmt.Sprint(m["Action"]))
				resources := asList(m["Resource"])
				if s, ok := m["Resource"].(string); ok {
					resources = []any{s}
				}
				for _, rr := range resources {
					s := fmt.Sprint(rr)
					if s == "*" && allXRay(actions) {
						continue // X-Ray PutTraceSegments/PutTelemetryRecords take no resource ARN
					}
					if s == "arn:aws:events:us-east-1:123456789012:event-bus/default" && fmt.Sprint(m["Action"]) == "events:PutEvents" &&
						fmt.Sprint(asMap(asMap(m["Condition"])["StringEquals"])["events:source"]) == "sfnlimit" {
						continue // the default bus, for the completion event, with its source pinned
					}
					if !allowed(s) {
						t.Errorf("%s statement %v allows %v on %q, which is not the stack's own", res.ID, m["Sid"], m["Action"], s)
					}
				}
			}
		}
	}
	if statements < 10 {
		t.Errorf("checked %d Allow statements, want the roles' and policies' (at least 10)", statements)
	}
}

func allXRay(actions []string) bool {
	for _, a := range actions {
		if !strings.HasPrefix(strings.Trim(a, "[]"), "xray:") {
			return false
		}
	}
	return len(actions) > 0
}

// Every queue is encrypted and refuses access without TLS.
func TestQueuesEncryptedAndTLSOnly(t *testing.T) {
	tpl := loadApp(t)
	queues := tpl.ResourceIDs(TypeQueue)
	if len(queues) != 3 {
		t.Fatalf("queues = %v, want 3", queues)
	}
	tlsOnly := map[string]bool{}
	for _, res := range tpl.resources {
		if res.Type != "AWS::SQS::QueuePolicy" {
			continue
		}
		denies := false
		for _, st := range asList(asMap(res.Properties["PolicyDocument"])["Statement"]) {
			m := asMap(st)
			cond := fmt.Sprint(asMap(asMap(m["Condition"])["Bool"])["aws:SecureTransport"])
			if m["Effect"] == "Deny" && fmt.Sprint(m["Principal"]) == "*" && fmt.Sprint(m["Action"]) == "sqs:*" && cond == "false" {
				denies = true
			}
		}
		if !denies {
			continue
		}
		for _, q := range asList(res.Properties["Queues"]) {
			tlsOnly[fmt.Sprint(asMap(q)["Ref"])] = true
		}
	}
	for _, id := range queues {
		p := tpl.byID[id].Properties
		if p["SqsManagedSseEnabled"] != true && p["KmsMasterKeyId"] == nil {
			t.Errorf("queue %s is not encrypted (SqsManagedSseEnabled or KmsMasterKeyId)", id)
		}
		if !tlsOnly[id] {
			t.Errorf("queue %s has no queue policy denying sqs:* without aws:SecureTransport", id)
		}
	}
}

// The table is encrypted and has point-in-time recovery, so a bad write can be undone.
func TestTableEncryptedRecoverableAndProtected(t *testing.T) {
	tpl := loadApp(t)
	for _, id := range tpl.ResourceIDs(TypeTable) {
		p := tpl.byID[id].Properties
		if asMap(p["SSESpecification"])["SSEEnabled"] != true {
			t.Errorf("table %s: SSESpecification.SSEEnabled is not true", id)
		}
		if asMap(p["PointInTimeRecoverySpecification"])["PointInTimeRecoveryEnabled"] != true {
			t.Errorf("table %s: point-in-time recovery is not enabled", id)
		}
		// The table holds every lane's lease and every open batch: DeletionPolicy Retain keeps it
		// when the stack goes, and deletion protection keeps a console or CLI delete from taking it.
		if p["DeletionProtectionEnabled"] != true {
			t.Errorf("table %s: DeletionProtectionEnabled is not true", id)
		}
	}
}

// Every alarm tells the reader what to do, and notifies the topic when one is given.
func TestAlarmsSayWhatToDo(t *testing.T) {
	tpl := loadApp(t)
	alarms := tpl.ResourceIDs("AWS::CloudWatch::Alarm")
	if len(alarms) < 6 {
		t.Fatalf("alarms = %v, want at least dead letters, queue ages, stalled, lease drift, executions failed", alarms)
	}
	for _, id := range alarms {
		p := tpl.byID[id].Properties
		desc, _ := p["AlarmDescription"].(string)
		if len(desc) < 80 {
			t.Errorf("alarm %s: description %q is too short to say what to do", id, desc)
		}
		if p["AlarmActions"] == nil || p["OKActions"] == nil {
			t.Errorf("alarm %s has no AlarmActions/OKActions (AlarmTopicArn)", id)
		}
	}
}

// The queues and the table hold jobs in flight and the lanes' leases: a replacement (a property
// that needs one) or `sam delete` must not drop them. CloudFormation keeps a resource whose
// DeletionPolicy (delete) and UpdateReplacePolicy (replacement) are Retain.
func TestJobStoresAreRetained(t *testing.T) {
	raw, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	doc, err := decodeNode(&root)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for id, v := range asMap(asMap(doc)["Resources"]) {
		m := asMap(v)
		if typ := m["Type"]; typ != TypeQueue && typ != TypeTable {
			continue
		}
		checked++
		for _, policy := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
			if m[policy] != "Retain" {
				t.Errorf("%s (%s) %s = %v, want Retain", id, m["Type"], policy, m[policy])
			}
		}
	}
	if checked != 4 {
		t.Errorf("checked %d queues and tables, want 4 (three queues, one table)", checked)
	}
}

// alarmMetrics returns an alarm's metric queries (Metrics), or one built from its single metric.
func alarmMetrics(p map[string]any) []map[string]any {
	if ms, ok := p["Metrics"].([]any); ok {
		var out []map[string]any
		for _, m := range ms {
			out = append(out, asMap(m))
		}
		return out
	}
	return []map[string]any{{"Id": "m", "ReturnData": true, "MetricStat": map[string]any{
		"Metric": map[string]any{"Namespace": p["Namespace"], "MetricName": p["MetricName"], "Dimensions": p["Dimensions"]}}}}
}

// A pause holds a type's jobs on purpose: the stalled alarm ("jobs wait, none start or end") must
// not fire for it (the paused alarm watches pauses). Its expression reads the limiter's
// PausedSeconds and is 0 while any type is paused.
func TestStalledAlarmIsQuietDuringAPause(t *testing.T) {
	p := loadApp(t).byID["StalledAlarm"].Properties
	pausedID := ""
	for _, m := range alarmMetrics(p) {
		metric := asMap(asMap(m["MetricStat"])["Metric"])
		if metric["MetricName"] == "PausedSeconds" && reflect.DeepEqual(metric["Namespace"], map[string]any{"Ref": "AWS::StackName"}) {
			pausedID, _ = m["Id"].(string)
		}
	}
	if pausedID == "" {
		t.Fatal("StalledAlarm does not read the limiter's PausedSeconds: it fires during a pause")
	}
	for _, m := range alarmMetrics(p) {
		if m["ReturnData"] == true {
			expr, _ := m["Expression"].(string)
			if !regexp.MustCompile(`FILL\(` + pausedID + `, 0\) == 0`).MatchString(expr) {
				t.Errorf("StalledAlarm's expression %q does not hold it at 0 while %s (PausedSeconds) is reported", expr, pausedID)
			}
		}
	}
}

// Attempts of every workflow the limiter starts can fail: the sample's, the bare one's and those
// attached with ExtraStateMachineArns. The failed-executions alarm counts them all (the releaser's
// JobsRetried and JobsDeadLettered), not the sample workflow's ExecutionsFailed alone.
func TestFailedExecutionsAlarmWatchesEveryWorkflow(t *testing.T) {
	p := loadApp(t).byID["ExecutionsFailedAlarm"].Properties
	names := map[string]bool{}
	for _, m := range alarmMetrics(p) {
		metric := asMap(asMap(m["MetricStat"])["Metric"])
		if metric == nil {
			continue
		}
		dims, _ := metric["Dimensions"].([]any)
		for _, d := range dims {
			if asMap(d)["Name"] == "StateMachineArn" {
				t.Errorf("ExecutionsFailedAlarm reads metric %v of one state machine (%v)", metric["MetricName"], asMap(d)["Value"])
			}
		}
		if reflect.DeepEqual(metric["Namespace"], map[string]any{"Ref": "AWS::StackName"}) {
			names[fmt.Sprint(metric["MetricName"])] = true
		}
	}
	for _, want := range []string{"JobsRetried", "JobsDeadLettered"} {
		if !names[want] {
			t.Errorf("ExecutionsFailedAlarm does not count the limiter's %s (failed attempts of every type's workflow)", want)
		}
	}
}

// The dashboard's alarm widget shows every alarm of the stack.
func TestDashboardShowsEveryAlarm(t *testing.T) {
	tpl := loadApp(t)
	r, err := tpl.Resolver(Env{Attr: ownAttr(tpl)})
	if err != nil {
		t.Fatal(err)
	}
	body, err := r.Eval(tpl.byID["Dashboard"].Properties["DashboardBody"])
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Widgets []struct {
			Type       string `json:"type"`
			Properties struct {
				Alarms []string `json:"alarms"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(fmt.Sprint(body)), &dash); err != nil {
		t.Fatalf("DashboardBody: %v", err)
	}
	shown := map[string]bool{}
	for _, w := range dash.Widgets {
		for _, a := range w.Properties.Alarms {
			shown[a] = true
		}
	}
	for _, id := range tpl.ResourceIDs("AWS::CloudWatch::Alarm") {
		if arn, _ := ownAttr(tpl)(id, "Arn"); !shown[arn] {
			t.Errorf("the dashboard does not show alarm %s", id)
		}
	}
}
