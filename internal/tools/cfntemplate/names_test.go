package cfntemplate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// nameLimits are AWS's length limits of the name properties a template may set, by resource type.
var nameLimits = map[string]struct {
	prop string
	max  int
}{
	"AWS::Serverless::StateMachine":    {"Name", 80},             // Step Functions: 1-80 characters
	"AWS::StepFunctions::StateMachine": {"StateMachineName", 80}, // the same
	"AWS::SQS::Queue":                  {"QueueName", 80},        // SQS: up to 80, ".fifo" included
	"AWS::CloudWatch::Alarm":           {"AlarmName", 255},
	"AWS::CloudWatch::Dashboard":       {"DashboardName", 255},
	"AWS::DynamoDB::Table":             {"TableName", 255},
	"AWS::Serverless::Function":        {"FunctionName", 64},
	"AWS::IAM::Role":                   {"RoleName", 64},
	"AWS::IAM::ManagedPolicy":          {"ManagedPolicyName", 128},
	"AWS::Logs::LogGroup":              {"LogGroupName", 512},
}

// longestRegion is as long as the longest region names (ap-southeast-4, ap-northeast-3).
const longestRegion = "ap-southeast-4"

// namesOf returns each name the template's resources get under stack: the name property it sets,
// or the generated name of a FIFO queue (CloudFormation cuts the other generated names to fit).
func namesOf(t *testing.T, tpl *Template, stack string) map[string]int {
	t.Helper()
	r, err := tpl.Resolver(Env{StackName: stack, Region: longestRegion})
	if err != nil {
		t.Fatal(err)
	}
	limits := map[string]int{}
	names := map[string]string{}
	for _, res := range tpl.resources {
		lim, known := nameLimits[res.Type]
		if !known {
			continue
		}
		v, set := res.Properties[lim.prop]
		switch {
		case set:
			ev, err := r.eval(v)
			if err != nil {
				t.Fatalf("%s %s: %v", res.ID, lim.prop, err)
			}
			s, err := scalarString(ev)
			if err != nil {
				t.Fatalf("%s %s: %v", res.ID, lim.prop, err)
			}
			names[res.ID] = s
		case res.Type == TypeQueue && isTrue(res.Properties["FifoQueue"]):
			names[res.ID] = GeneratedQueueName(stack, res.ID, true)
		default:
			continue
		}
		limits[res.ID] = lim.max
	}
	over := map[string]int{}
	for id, name := range names {
		if len(name) > limits[id] {
			over[id] = len(name)
		}
	}
	if len(names) == 0 {
		t.Fatal("no resource of the template has a name that depends on the stack's")
	}
	return over
}

// Every name the stack name goes into fits AWS's limit for stack names up to MaxStackName, and one
// character more breaks one: the bound is the real one, not a guess.
func TestNamesFitEveryStackNameUpToTheBound(t *testing.T) {
	tpl, err := Load(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	if over := namesOf(t, tpl, "a"+strings.Repeat("b", MaxStackName-1)); len(over) > 0 {
		t.Errorf("with a stack name of %d characters these names are too long (lengths): %v", MaxStackName, over)
	}
	if over := namesOf(t, tpl, strings.Repeat("b", MaxStackName+1)); len(over) == 0 {
		t.Errorf("with a stack name of %d characters every name fits: MaxStackName (%d) is not the bound", MaxStackName+1, MaxStackName)
	}
}

// A stack name over the bound fails on the LanesQueue, and every other retained resource depends on
// it, so the deploy fails before any of them exists (a failed first deploy keeps Retain resources).
func TestATooLongStackNameFailsBeforeAnyRetainedResource(t *testing.T) {
	data, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	doc, err := decodeNode(&root)
	if err != nil {
		t.Fatal(err)
	}
	resources := asMap(asMap(doc)["Resources"])
	deps := func(id string) []string {
		var out []string
		switch d := asMap(resources[id])["DependsOn"].(type) {
		case string:
			out = append(out, d)
		case []any:
			for _, x := range d {
				s, _ := x.(string)
				out = append(out, s)
			}
		}
		var walk func(v any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				if ref, ok := x["Ref"].(string); ok {
					out = append(out, ref)
				}
				if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) > 0 {
					s, _ := ga[0].(string)
					out = append(out, s)
				}
				for _, e := range x {
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(asMap(resources[id])["Properties"])
		return out
	}
	var after func(id string, seen map[string]bool) bool
	after = func(id string, seen map[string]bool) bool {
		for _, d := range deps(id) {
			if d == "LanesQueue" {
				return true
			}
			if _, isResource := resources[d]; isResource && !seen[d] {
				seen[d] = true
				if after(d, seen) {
					return true
				}
			}
		}
		return false
	}
	retained := 0
	for id, v := range resources {
		if asMap(v)["DeletionPolicy"] != "Retain" || id == "LanesQueue" {
			continue
		}
		retained++
		if !after(id, map[string]bool{}) {
			t.Errorf("%s is retained and does not depend on LanesQueue: a too-long stack name would leave it behind", id)
		}
	}
	if retained == 0 {
		t.Error("no retained resource besides LanesQueue: the test checks nothing")
	}
}

// The stack name samconfig.toml deploys under is within the bound.
func TestSamconfigStackNameIsWithinTheBound(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(filepath.Dir(templatePath), "samconfig.toml"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, l := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.TrimSpace(k) != "stack_name" {
			continue
		}
		found++
		if name := strings.Trim(strings.TrimSpace(v), `"`); len(name) > MaxStackName {
			t.Errorf("samconfig.toml stack_name %q has %d characters, over %d", name, len(name), MaxStackName)
		}
	}
	if found == 0 {
		t.Error("samconfig.toml sets no stack_name")
	}
}
