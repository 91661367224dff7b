package cfntemplate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/iampolicy"
)

// Policies reads each function's role (inline policies and the template's managed policies) and
// expands SAM policy templates, resolved.
func TestPoliciesOfFunctionsAndStateMachine(t *testing.T) {
	tpl := loadApp(t)
	r, err := tpl.Resolver(Env{StackName: stack, Region: region, AccountID: account, Attr: ownAttr(tpl)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"RouterFunction":     {"RouterRole/router"},
		"StarterFunction":    {"StarterRole/starter", "DescribeExecutionsPolicy", "StopExecutionsPolicy"},
		"ReleaserFunction":   {"ReleaserRole/releaser", "DescribeExecutionsPolicy"},
		"SampleStateMachine": {"SampleStateMachine/LambdaInvokePolicy"},
		"BareStateMachine":   nil, // it calls no service
	}
	for id, names := range want {
		ps, err := r.Policies(id)
		if err != nil {
			t.Fatalf("Policies(%s) = %v", id, err)
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.Name)
			if strings.Contains(fmt.Sprint(p.Document), "Fn::") || strings.Contains(fmt.Sprint(p.Document), "map[Ref:") {
				t.Errorf("%s: %s is not fully resolved: %v", id, p.Name, p.Document)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(names) {
			t.Errorf("Policies(%s) = %v, want %v", id, got, names)
		}
	}
	ps, _ := r.Policies("SampleStateMachine")
	st := asMap(asList(asMap(ps[0].Document)["Statement"])[0])
	wantRes := "arn:aws:lambda:us-east-1:123456789012:function:arn:aws:own:us-east-1:123456789012:OWN-ReleaserFunction-Ref*"
	if fmt.Sprint(st["Action"]) != "[lambda:InvokeFunction]" || st["Resource"] != wantRes {
		t.Errorf("LambdaInvokePolicy expanded to %v, want lambda:InvokeFunction on %s", st, wantRes)
	}
}

// What Policies cannot read is an error, not an empty list: an AWS managed policy, an unknown SAM
// policy template, a role that is not the template's.
func TestPoliciesRefusesWhatItCannotRead(t *testing.T) {
	cases := map[string]string{
		"managed": `
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Policies:
        - AWSLambdaBasicExecutionRole`,
		"template": `
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Policies:
        - S3CrudPolicy:
            BucketName: b`,
		"aws managed on a role": `
  Role:
    Type: AWS::IAM::Role
    Properties:
      ManagedPolicyArns:
        - arn:aws:iam::aws:policy/AdministratorAccess
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Role: !GetAtt Role.Arn`,
		"missing parameter": `
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Policies:
        - SQSSendMessagePolicy:
            Queue: q`,
	}
	for name, resources := range cases {
		tpl, err := Parse([]byte("Resources:"+resources+"\n"), t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := tpl.Resolver(Env{})
		if err != nil {
			t.Fatal(err)
		}
		if ps, err := r.Policies("Fn"); err == nil {
			t.Errorf("%s: Policies = %v, want an error", name, ps)
		}
	}
}

// What AWS services do with the functions' and the state machine's roles, beyond the calls the
// functions' code makes (internal/tools/local/stack checks those): Lambda's event source mapping
// polls each SQS event's queue with the function's role, which needs sqs:ReceiveMessage,
// DeleteMessage and GetQueueAttributes on it ("The Lambda execution role must include the following
// permissions", https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-lambda-function-trigger.html),
// and the state machine's role must allow lambda:InvokeFunction on every function its Task states
// invoke. Mutated copies of the template prove each check can fail.
func TestServicesCanUseTheRoles(t *testing.T) {
	text, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	check := func(text string) []string {
		tpl, err := Parse([]byte(text), filepath.Dir(templatePath))
		if err != nil {
			t.Fatal(err)
		}
		s := newLocalStackOf(t, tpl, nil)
		for _, id := range tpl.ResourceIDs("AWS::Logs::LogGroup") {
			s.attrs.Set(id, "Arn", "arn:aws:logs:"+region+":"+account+":log-group:"+id+":*")
		}
		var missing []string
		need := func(id string, reqs ...iampolicy.Request) {
			docs, err := s.r.Policies(id)
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
			for _, rq := range reqs {
				d, err := iampolicy.Decide(ps, rq)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					missing = append(missing, id+": "+rq.String())
				}
			}
		}
		events := 0
		for _, f := range tpl.Functions() {
			for _, e := range s.fns[f.LogicalID].SQSEvents {
				arn, _ := s.attrs.Lookup(e.QueueLogicalID, "Arn")
				for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"} {
					need(f.LogicalID, iampolicy.Request{Action: a, Resource: arn})
				}
				events++
			}
		}
		if events < 2 {
			t.Fatalf("found %d SQS events, want the router's and the starter's", events)
		}
		invokes := 0
		for id, sm := range s.sms {
			for _, fn := range invokedFunctions(t, sm.Definition) {
				need(id, iampolicy.Request{Action: "lambda:InvokeFunction", Resource: fn})
				invokes++
			}
		}
		if invokes == 0 {
			t.Fatal("the state machines invoke no function: the ASL walk found nothing")
		}
		return missing
	}
	if missing := check(string(text)); len(missing) > 0 {
		t.Errorf("roles lack what AWS services need: %v", missing)
	}
	for name, mutate := range map[string]func(string) string{
		"the starter cannot receive from the lanes queue": func(s string) string {
			return replaceIn(t, s, "StarterRole", "- sqs:ReceiveMessage\n", "- sqs:ReceiveMessageX\n")
		},
		"the state machine may invoke the router only": func(s string) string {
			return replaceIn(t, s, "SampleStateMachine", "FunctionName: !Ref ReleaserFunction", "FunctionName: !Ref RouterFunction")
		},
	} {
		if missing := check(mutate(string(text))); len(missing) == 0 {
			t.Errorf("mutation %q: the check still passes", name)
		}
	}
}

// replaceIn replaces old by new once, inside the block of resource id.
func replaceIn(t *testing.T, text, id, old, new string) string {
	t.Helper()
	start := strings.Index(text, "\n  "+id+":\n")
	if start < 0 {
		t.Fatalf("no resource %s in the template text", id)
	}
	i := strings.Index(text[start:], old)
	if i < 0 {
		t.Fatalf("%q not in %s", old, id)
	}
	return text[:start+i] + new + text[start+i+len(old):]
}

var lambdaInvoke = regexp.MustCompile(`^arn:[a-z-]+:states:::lambda:invoke(\.waitForTaskToken)?$`)

// invokedFunctions lists the functions a definition's Task states invoke (lambda:invoke
// integrations, with or without .waitForTaskToken, and plain function ARNs), in nested states too.
func invokedFunctions(t *testing.T, definition string) []string {
	t.Helper()
	var def map[string]any
	if err := json.Unmarshal([]byte(definition), &def); err != nil {
		t.Fatalf("definition: %v", err)
	}
	var out []string
	var walk func(states map[string]any)
	walk = func(states map[string]any) {
		for _, st := range states {
			m := asMap(st)
			res, _ := m["Resource"].(string)
			switch {
			case lambdaInvoke.MatchString(res):
				params := asMap(m["Parameters"])
				if params == nil {
					params = asMap(m["Arguments"])
				}
				fn, _ := params["FunctionName"].(string)
				out = append(out, fn)
			case strings.Contains(res, ":lambda:") && strings.Contains(res, ":function:"):
				out = append(out, res)
			}
			for _, b := range asList(m["Branches"]) {
				walk(asMap(asMap(b)["States"]))
			}
			if it := asMap(m["Iterator"]); it != nil {
				walk(asMap(it["States"]))
			}
			if it := asMap(m["ItemProcessor"]); it != nil {
				walk(asMap(it["States"]))
			}
		}
	}
	walk(asMap(def["States"]))
	return out
}
