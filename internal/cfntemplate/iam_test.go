package cfntemplate

import (
	"fmt"
	"strings"
	"testing"
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
		"StarterFunction":    {"StarterRole/starter", "DescribeExecutionsPolicy"},
		"ReleaserFunction":   {"ReleaserRole/releaser", "DescribeExecutionsPolicy"},
		"SampleStateMachine": {"SampleStateMachine/LambdaInvokePolicy"},
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
