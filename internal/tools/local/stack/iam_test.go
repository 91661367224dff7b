package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
	"github.com/sfnlimit/sfnlimit/internal/tools/iampolicy"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// The IAM check: every AWS call each function makes, recorded through SDK middleware while a
// scenario runs on the local stack, is allowed by the identity policies of that function's role in
// template.yaml, with the resource and condition keys IAM would see (a DeleteItem inside a
// transaction needs dynamodb:DeleteItem on the table, for the item's partition key). moto and
// fauxqs do not enforce this (docs/emulators.md, "IAM"), so without this test a missing action
// shows up only as AccessDenied after a deployment.
//
// The scenario must reach every operation a function can call: the operations reachable from each
// function's wiring (its fields' narrow SDK interfaces, found by reflection over what app builds)
// must all have been recorded, or be listed in notExercised with the reason they cannot occur.

// notExercised are operations reachable through a function's wiring that the function never calls,
// with why. Each entry must still be reachable and unrecorded, or the test fails (stale entry).
var notExercised = map[string]string{
	// lease.Store's Scan serves only All, the sweep's listing; the starter's leaseStore interface
	// (Get, Put, Delete) has no All.
	"starter DynamoDB.Scan": "lease.Store.All is not in the starter's leaseStore interface",
	// config.DynamoStore writes live overrides for the CLI (config set, config reset); a handler's
	// config.Resolver only lists them.
}

// grantedForAWS are grants of a function's role that its code never calls because AWS uses them
// on the function's behalf, keyed "function Sid action", with who uses them.
var grantedForAWS = map[string]string{}

func init() {
	for _, fn := range []string{"router", "starter", "releaser"} {
		grantedForAWS[fn+" Logs logs:CreateLogStream"] = "Lambda writes the function's logs with its role"
		grantedForAWS[fn+" Logs logs:PutLogEvents"] = "Lambda writes the function's logs with its role"
		grantedForAWS[fn+" Tracing xray:PutTraceSegments"] = "Lambda sends the function's X-Ray traces with its role"
		grantedForAWS[fn+" Tracing xray:PutTelemetryRecords"] = "Lambda sends the function's X-Ray traces with its role"
	}
	// The event source mappings poll with the function's role (the local stack's pollers use
	// clients of their own, which the recorders do not see).
	for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"} {
		grantedForAWS["router PollGeneralQueue "+a] = "the general queue's event source mapping polls with the router's role"
	}
	for _, a := range []string{"sqs:ReceiveMessage", "sqs:GetQueueAttributes"} {
		grantedForAWS["starter Lanes "+a] = "the lanes queue's event source mapping polls with the starter's role"
	}
}

const module = "github.com/sfnlimit/sfnlimit/"

func TestEveryCallIsAllowedByItsRole(t *testing.T) {
	ctx := t.Context()
	root, err := emulator.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	recorders := map[string]*iampolicy.Recorder{"router": {}, "starter": {}, "releaser": {}}
	s, err := stack.Start(ctx, stack.Options{
		Root: root,
		// One unlisted type may run on DefaultLimit: the router takes its slot (UNLISTED).
		Parameters:  map[string]string{"TypeLimits": "rr=2,ff=2", "DefaultMaxAttempts": "2", "DefaultLimit": "1", "UnlistedTypesLimit": "1"},
		FunctionEnv: map[string]string{"START_RETRY_SECONDS": "1", "SWEEP_MIN_AGE_SECONDS": "1", "CONFIG_CACHE_SECONDS": "0"},
		SweepEvery:  time.Second,
		// Every call must be recorded and the scenario must take its normal course: this test
		// judges the calls itself, after the fact.
		SkipIAM: true,
		FunctionAWSConfig: func(fn string, cfg *aws.Config) {
			rec, ok := recorders[fn]
			if !ok {
				t.Errorf("function %q has no recorder", fn)
				return
			}
			cfg.APIOptions = append(cfg.APIOptions, rec.Option)
		},
	})
	if err != nil {
		t.Fatalf("stack.Start() = %v", err)
	}
	t.Cleanup(s.Close)
	info := s.Info()
	c := s.Clients()
	general, lanes, dlq, table, sm := info.Output("GeneralQueueUrl"), info.Output("LanesQueueUrl"),
		info.Output("DeadLetterQueueUrl"), info.Output("TableName"), info.Output("SampleStateMachineArn")

	// Type rr runs random (a live override: the config item path too), ff the default first-free.
	if err := config.NewDynamoStore(c.DDB, table).SetOverride(ctx, config.Override{Type: "rr", Limit: 2, Strategy: "random"}); err != nil {
		t.Fatal(err)
	}
	// Type cc caps each key at 1 with the overflow rule cancel: a newer job of a key stops the
	// key's running one (the starter's StopExecution).
	if err := config.NewDynamoStore(c.DDB, table).SetOverride(ctx, config.Override{Type: "cc", Limit: 2, KeyLimit: 1, Overflow: config.OverflowCancel}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartRuntime(ctx); err != nil {
		t.Fatal(err)
	}
	send := func(body string) {
		t.Helper()
		if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &general, MessageBody: &body}); err != nil {
			t.Fatalf("SendMessage(general) = %v", err)
		}
	}
	submit := func(typ, id string, input map[string]any) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"type": typ, "id": id, "input": input})
		send(string(b))
	}

	for i := range 3 {
		submit("rr", fmt.Sprintf("ok-%d", i), map[string]any{"seconds": 5})
		submit("ff", fmt.Sprintf("ok-%d", i), map[string]any{"seconds": 2})
	}
	submit("rr", "fails-once", map[string]any{"seconds": 0, "failAttempts": 1})
	submit("ff", "always-fails", map[string]any{"seconds": 0, "fail": true})
	// Two unlisted types for one slot: one runs, the other is refused (too_many_unlisted_types).
	submit("unlisted1", "x", map[string]any{"seconds": 0})
	submit("unlisted2", "x", map[string]any{"seconds": 0})
	send("not json")
	// Batches (each of one job, so that each function closes one and sends its completion event):
	// the router opens iam-router and closes it with a refusal; ff/batched opens iam-releaser and
	// the releaser closes it with its success; the starter closes iam-starter, opened beforehand as
	// the CLI would, by dead-lettering a lanes-queue message that is not a job of its group.
	send(`{"type":"ff","id":"bad-key","key":"bad key!","batch":"iam-router","batchSize":1}`)
	send(`{"type":"ff","id":"batched","input":{"seconds":0},"batch":"iam-releaser","batchSize":1}`)
	if err := batch.New(c.DDB, table).Open(ctx, "iam-starter", 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &lanes, MessageBody: aws.String(`{"type":"rr","id":"not-ff","batch":"iam-starter"}`), MessageGroupId: aws.String("ff-1"),
		MessageDeduplicationId: aws.String("iam-starter-batch"),
	}); err != nil {
		t.Fatal(err)
	}
	// cc/old runs; cc/new of the same key, from the same sender, stops it.
	b, _ := json.Marshal(map[string]any{"type": "cc", "id": "old", "key": "k", "input": map[string]any{"seconds": 120}})
	send(string(b))
	waitFor(t, 2*time.Minute, "a running execution of cc/old", func() bool { return len(executions(t, c.SFN, sm, "cc", sfntypes.ExecutionStatusRunning)) > 0 })
	b, _ = json.Marshal(map[string]any{"type": "cc", "id": "new", "key": "k", "input": map[string]any{"seconds": 0}})
	send(string(b))
	waitFor(t, 2*time.Minute, "cc/old stopped by cc/new", func() bool { return len(executions(t, c.SFN, sm, "cc", sfntypes.ExecutionStatusAborted)) > 0 })
	// A copy of a running job written straight into the lanes queue: the starter finds its execution.
	waitFor(t, 2*time.Minute, "a running execution of rr/ok-0", func() bool { return len(executions(t, c.SFN, sm, "rr", sfntypes.ExecutionStatusRunning)) > 0 })
	// rr's limit drops to 1 while a job waits in lane 2: the starter moves it (send, then delete).
	if err := config.NewDynamoStore(c.DDB, table).SetOverride(ctx, config.Override{Type: "rr", Limit: 1, Strategy: "random"}); err != nil {
		t.Fatal(err)
	}
	copyBody, _ := json.Marshal(map[string]any{"type": "rr", "id": "ok-0", "input": map[string]any{"seconds": 5}, "submittedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	for l := 1; l <= 2; l++ {
		if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl: &lanes, MessageBody: aws.String(string(copyBody)), MessageGroupId: aws.String(fmt.Sprintf("rr-%d", l)),
			MessageDeduplicationId: aws.String(fmt.Sprintf("iam-copy-%d", l)),
		}); err != nil {
			t.Fatal(err)
		}
	}

	// A bind whose copy never went, written an hour ago (above ff's limit: its jobs use its lanes):
	// the sweep sends a probe to its lane's group (the releaser's send to the lanes queue), and the
	// starter takes the lane back when the probe arrives.
	stale := lease.NewStore(c.DDB, table)
	stale.SetClock(func() time.Time { return time.Now().Add(-time.Hour) })
	staleBind := lease.Lease{Type: "ff", Lane: 3, JobID: "stale-bind", MessageID: "gone", Status: lease.Bound, StartedAt: time.Now().Add(-time.Hour)}
	if _, err := stale.Put(ctx, staleBind, nil); err != nil {
		t.Fatal(err)
	}

	// 3 + 1 of rr, 3 + 1 of ff and one unlisted type's job succeed; ff/always-fails (2 attempts),
	// the other unlisted type's job, "not json", ff/bad-key and the starter's bad message are
	// dead-lettered; each batch sends its event.
	waitFor(t, 4*time.Minute, "the jobs to end", func() bool {
		ok := len(executions(t, c.SFN, sm, "", sfntypes.ExecutionStatusSucceeded))
		return ok >= 9 && queueDepth(t, c.SQS, dlq) >= 5 && len(s.Events()) >= 3
	})
	waitFor(t, time.Minute, "the stale bind's lane taken back", func() bool {
		l, err := stale.Get(ctx, staleBind.Key())
		return err == nil && (l == nil || l.JobID != staleBind.JobID)
	})
	time.Sleep(3 * time.Second) // releases in progress and one more sweep
	s.StopRuntime()

	tpl, _ := s.Template()
	tb, err := tpl.Table()
	if err != nil {
		t.Fatal(err)
	}
	acct := iampolicy.Account{Partition: "aws", Region: stack.Region, ID: stack.Account, PartitionKey: hashKey(tb)}
	functions := map[string]string{} // kind -> logical id
	for _, f := range tpl.Functions() {
		functions[filepath.Base(filepath.Clean(f.CodeDir))] = f.LogicalID
	}
	calls := map[string][]iampolicy.Call{}
	for kind, rec := range recorders {
		calls[kind] = rec.Calls()
		t.Logf("%s: %d calls, operations %v", kind, len(calls[kind]), rec.Operations())
	}
	templateText, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	used, denied, unused := check(t, s, templateText, root, acct, functions, calls)
	for _, d := range denied {
		t.Error(d)
	}
	// A role grants what its function calls, and what AWS does on the function's behalf with
	// its role: nothing more.
	exempted := map[string]bool{}
	for kind, grants := range unused {
		for _, g := range grants {
			key := kind + " " + g.Sid + " " + g.Action
			if _, ok := grantedForAWS[key]; ok {
				exempted[key] = true
				continue
			}
			t.Errorf("%s's role grants %s, which none of its calls needed: remove it, or list it in grantedForAWS with the reason", kind, g)
		}
	}
	for key := range grantedForAWS {
		if !exempted[key] {
			t.Errorf("grantedForAWS lists %q, which is not an unused grant: remove the entry", key)
		}
	}

	reachable := reachableOps(t, s, functions)
	for kind, rec := range recorders {
		done := map[string]bool{}
		for _, op := range rec.Operations() {
			done[op] = true
		}
		for op, via := range reachable[kind] {
			reason, exempt := notExercised[kind+" "+op]
			switch {
			case done[op] && exempt:
				t.Errorf("%s called %s, listed in notExercised (%s): remove the entry", kind, op, reason)
			case !done[op] && !exempt:
				t.Errorf("%s can call %s (through %v) but the scenario never did: exercise it, or list it in notExercised with the reason", kind, op, via)
			}
		}
	}
	for k := range notExercised {
		kind, op, _ := strings.Cut(k, " ")
		if _, ok := reachable[kind][op]; !ok {
			t.Errorf("notExercised lists %s, which %s cannot reach: remove the entry", op, kind)
		}
	}
	if t.Failed() {
		return
	}

	// The check can fail: take each action a function used out of the policy that granted it, in a
	// copy of the template, and the same calls must be refused.
	mutations := 0
	for kind, grants := range used {
		for action, policy := range grants {
			resource, _, _ := strings.Cut(policy, "/")
			mutated, n := removeAction(string(templateText), resource, action)
			if n == 0 {
				t.Errorf("%s's %s comes from %s, but the action is not written there", kind, action, policy)
				continue
			}
			_, denied, _ := check(t, s, []byte(mutated), root, acct, functions, map[string][]iampolicy.Call{kind: calls[kind]})
			found := false
			for _, d := range denied {
				if strings.Contains(d, " "+action+" on ") {
					found = true
				}
			}
			if !found {
				t.Errorf("without %s in %s, %s's calls are still all allowed: the check cannot fail", action, resource, kind)
			}
			mutations++
		}
	}
	t.Logf("%d mutations of the template (one action taken out of one role each) were each caught", mutations)
	if mutations < 15 {
		t.Errorf("only %d mutations checked, want one per action each function used (at least 15)", mutations)
	}
}

// check resolves the template text as the stack did and evaluates every recorded call of each
// function against its role's policies. It returns, per function, each action it used with the
// policy statement that allowed it, and a line per authorization refused.
func check(t *testing.T, s *stack.Stack, text []byte, root string, acct iampolicy.Account, functions map[string]string,
	calls map[string][]iampolicy.Call) (used map[string]map[string]string, denied []string, unused map[string][]iampolicy.Grant) {
	t.Helper()
	tpl, err := cfntemplate.Parse(text, root)
	if err != nil {
		t.Fatalf("parse template: %v", err)
	}
	_, local := s.Template()
	// Placeholder ARNs for resources the local stack does not create (log groups): the functions'
	// code never calls those.
	attr := func(id, attribute string) (string, bool) {
		v, err := local.Eval(map[string]any{"Fn::GetAtt": []any{id, attribute}})
		if err == nil {
			return fmt.Sprint(v), true
		}
		return fmt.Sprintf("arn:aws:notlocal:%s:%s:%s/%s", stack.Region, stack.Account, id, attribute), true
	}
	res, err := tpl.Resolver(cfntemplate.Env{Parameters: s.Info().Parameters, Attr: attr})
	if err != nil {
		t.Fatal(err)
	}
	used, unused = map[string]map[string]string{}, map[string][]iampolicy.Grant{}
	for kind, cs := range calls {
		id := functions[kind]
		policies := rolePolicies(t, res, id)
		used[kind] = map[string]string{}
		checked := map[string]bool{}
		var all []iampolicy.Request
		for _, call := range cs {
			reqs, err := iampolicy.Requests(acct, call.Input)
			if err != nil {
				t.Errorf("%s %s.%s: %v", kind, call.Service, call.Operation, err)
				continue
			}
			for _, rq := range reqs {
				key := rq.String()
				if checked[key] {
					continue
				}
				checked[key] = true
				all = append(all, rq)
				d, err := iampolicy.Decide(policies, rq)
				switch {
				case err != nil:
					t.Errorf("%s: %v", kind, err)
				case !d.Allowed:
					denied = append(denied, fmt.Sprintf("%s (%s) calls %s.%s: %s is not allowed by its role", kind, id, call.Service, call.Operation, rq))
				default:
					used[kind][rq.Action] = d.By
				}
			}
		}
		var err error
		if unused[kind], err = iampolicy.Unused(policies, all); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
	return used, denied, unused
}

// removeAction takes action out of the resource's block of the template text (a list item
// "- action" or a scalar "Action: action"), and says how many places it changed.
func removeAction(text, resource, action string) (string, int) {
	start := strings.Index(text, "\n  "+resource+":\n")
	if start < 0 {
		return text, 0
	}
	end := len(text)
	if next := regexp.MustCompile(`\n  [A-Za-z0-9]+:\n`).FindStringIndex(text[start+1:]); next != nil {
		end = start + 1 + next[0]
	}
	re := regexp.MustCompile(`(?m)^(\s*(?:- |Action: ))` + regexp.QuoteMeta(action) + `\s*$`)
	n := len(re.FindAllStringIndex(text[start:end], -1))
	block := re.ReplaceAllString(text[start:end], "${1}"+action+"Removed")
	return text[:start] + block + text[end:], n
}

// reachableOps builds each function's handler as app wires it (with clients that are never called)
// and lists the SDK operations its fields can reach.
func reachableOps(t *testing.T, s *stack.Stack, functions map[string]string) map[string]map[string][]string {
	t.Helper()
	tpl, res := s.Template()
	out := map[string]map[string][]string{}
	for _, f := range tpl.Functions() {
		kind := filepath.Base(filepath.Clean(f.CodeDir))
		cfg, err := res.Function(f)
		if err != nil {
			t.Fatal(err)
		}
		env := app.Env(func(k string) string { return cfg.Environment[k] })
		clients := app.NewClients(aws.Config{Region: stack.Region})
		var h any
		switch kind {
		case "router":
			h, err = app.Router(env, clients, fakes.Logger(t))
		case "starter":
			h, err = app.Starter(env, clients, fakes.Logger(t))
		case "releaser":
			h, err = app.Releaser(env, clients, fakes.Logger(t))
		default:
			t.Fatalf("function %s (%s) is not known to this test", f.LogicalID, kind)
		}
		if err != nil {
			t.Fatalf("build %s: %v", kind, err)
		}
		ops, err := iampolicy.Reachable(h, module)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if len(ops) == 0 {
			t.Fatalf("%s reaches no SDK operation: the reflection found nothing", kind)
		}
		out[kind] = ops
	}
	if len(out) != len(functions) {
		t.Fatalf("built %d functions, the template has %d", len(out), len(functions))
	}
	return out
}

func rolePolicies(t *testing.T, res *cfntemplate.Resolver, functionID string) []iampolicy.Policy {
	t.Helper()
	docs, err := res.Policies(functionID)
	if err != nil {
		t.Fatal(err)
	}
	var out []iampolicy.Policy
	for _, d := range docs {
		p, err := iampolicy.Parse(d.Name, d.Document)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no policies", functionID)
	}
	return out
}

func hashKey(tb cfntemplate.Table) string {
	for _, k := range tb.KeySchema {
		if k.KeyType == "HASH" {
			return k.AttributeName
		}
	}
	return ""
}

func recorded(rec *iampolicy.Recorder, action string) bool {
	acct := iampolicy.Account{Partition: "aws", Region: stack.Region, ID: stack.Account, PartitionKey: "pk"}
	for _, c := range rec.Calls() {
		reqs, _ := iampolicy.Requests(acct, c.Input)
		for _, r := range reqs {
			if r.Action == action {
				return true
			}
		}
	}
	return false
}

func executions(t *testing.T, c *sfn.Client, sm, typ string, status sfntypes.ExecutionStatus) []string {
	t.Helper()
	var out []string
	p := sfn.NewListExecutionsPaginator(c, &sfn.ListExecutionsInput{StateMachineArn: &sm, StatusFilter: status})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("ListExecutions = %v", err)
		}
		for _, x := range page.Executions {
			if typ == "" || strings.HasPrefix(aws.ToString(x.Name), typ+"-") {
				out = append(out, aws.ToString(x.Name))
			}
		}
	}
	sort.Strings(out)
	return out
}

func queueDepth(t *testing.T, c *sqs.Client, url string) int {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		t.Fatalf("GetQueueAttributes = %v", err)
	}
	var n int
	_, _ = fmt.Sscan(out.Attributes["ApproximateNumberOfMessages"], &n)
	return n
}

func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
