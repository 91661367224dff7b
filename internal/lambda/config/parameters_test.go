package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
)

var templatePath = filepath.Join("..", "..", "..", "template.yaml")

// resourceOnly are the parameters no function reads: each sets resource properties only, so AWS,
// not the code, is what they must agree with (TestResourceParametersRefuseWhatAWSRefuses).
var resourceOnly = map[string]string{
	"AlarmTopicArn":               "the alarms' actions",
	"ExecutionTimeoutSeconds":     "the sample workflows' TimeoutSeconds",
	"ExtraStateMachineArns":       "IAM policies and the releaser's event patterns",
	"FailedExecutionsThreshold":   "an alarm's threshold",
	"GeneralQueueAgeAlarmSeconds": "an alarm's threshold",
	"LanesQueueAgeAlarmSeconds":   "an alarm's threshold",
	"PauseAlarmSeconds":           "an alarm's threshold",
	"ReleaserReservedConcurrency": "the releaser's reserved concurrency",
	"StalledMinutes":              "an alarm's evaluation periods",
	"StarterMaxConcurrency":       "the starter's event source mapping",
	"SweepSchedule":               "the sweep's schedule rule",
}

// envParameters maps each environment variable of the functions (Globals included) that is !Ref of
// a parameter to that parameter.
func envParameters(t *testing.T, tpl *cfntemplate.Template) map[string]string {
	t.Helper()
	root := templateRoot(t)
	out := map[string]string{}
	var walk func(n *yaml.Node, underVariables bool)
	walk = func(n *yaml.Node, underVariables bool) {
		if n.Kind != yaml.MappingNode {
			for _, c := range n.Content {
				walk(c, false)
			}
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if _, isParam := tpl.Parameter(v.Value); underVariables && v.Tag == "!Ref" && isParam {
				if prev, dup := out[k.Value]; dup && prev != v.Value {
					t.Fatalf("%s is set from %s and from %s", k.Value, prev, v.Value)
				}
				out[k.Value] = v.Value
			}
			walk(v, k.Value == "Variables")
		}
	}
	walk(&root, false)
	return out
}

func paramNames(tpl *cfntemplate.Template) []string {
	var names []string
	for _, p := range tpl.Parameters() {
		names = append(names, p.Name)
	}
	return names
}

// Every parameter is checked against what reads it: a function (a string parameter in the
// agreement table, a Number parameter in config.Numbers with the same bounds), or, for those no
// function reads, AWS (resourceOnly). A parameter added to the template without either fails here.
func TestEveryParameterIsCheckedAgainstWhatReadsIt(t *testing.T) {
	tpl, err := cfntemplate.Load(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	readBy := map[string]string{} // parameter -> variable
	for env, param := range envParameters(t, tpl) {
		readBy[param] = env
	}
	tabled := map[string]bool{}
	for _, tt := range stringAgreement {
		tabled[tt.param] = true
	}
	for _, name := range paramNames(tpl) {
		p, _ := tpl.Parameter(name)
		env, read := readBy[name]
		_, only := resourceOnly[name]
		switch {
		case read && only:
			t.Errorf("%s is read by the functions (%s) and listed as resource-only", name, env)
		case !read && !only:
			t.Errorf("%s is neither read by a function nor listed as resource-only: check it against what reads it", name)
		case read && p.Type == "Number":
			n, ok := config.Numbers[env]
			if !ok {
				t.Errorf("%s sets %s, which config.Numbers does not read", name, env)
				continue
			}
			if p.MinValue == nil || p.MaxValue == nil || *p.MinValue != float64(n.Min) || *p.MaxValue != float64(n.Max) {
				t.Errorf("%s bounds %v..%v, config.Numbers[%s] %d..%d: they must be equal", name, deref(p.MinValue), deref(p.MaxValue), env, n.Min, n.Max)
			}
		case read && !tabled[name]:
			t.Errorf("%s sets %s, but the string agreement table has no example of it", name, env)
		}
	}
	for env := range config.Numbers {
		if _, ok := envParameters(t, tpl)[env]; !ok {
			t.Errorf("config.Numbers reads %s, which no template parameter sets", env)
		}
	}
}

func deref(f *float64) any {
	if f == nil {
		return "none"
	}
	return *f
}

// Each whole-number parameter: its bounds, its bounds written with decimals (CloudFormation's
// Number hands "3.0" over as written), and just past each bound, accepted or refused by both the
// template and the code.
func TestNumberParametersAgreeWithTheCode(t *testing.T) {
	tpl, err := cfntemplate.Load(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	for env, name := range envParameters(t, tpl) {
		p, _ := tpl.Parameter(name)
		n, ok := config.Numbers[env]
		if p.Type != "Number" || !ok {
			continue
		}
		for _, tt := range []struct {
			give string
			want bool
		}{
			{strconv.Itoa(n.Min), true},
			{strconv.Itoa(n.Max), true},
			{strconv.Itoa(n.Min) + ".0", true},
			{strconv.Itoa(n.Max) + ".000", true},
			{strconv.Itoa(n.Min - 1), false},
			{strconv.Itoa(n.Max + 1), false},
			{"many", false},
			{"", false},
		} {
			t.Run(fmt.Sprintf("%s=%q", name, tt.give), func(t *testing.T) {
				tplErr := p.Check(tt.give)
				_, codeErr := n.Parse(tt.give)
				if (tplErr == nil) != tt.want || (codeErr == nil) != tt.want {
					t.Errorf("template accepts %q: %v (%v); code (%s): %v (%v); want both %v",
						tt.give, tplErr == nil, tplErr, env, codeErr == nil, codeErr, tt.want)
				}
			})
		}
	}
}

// What the Number type cannot refuse: a fraction. AllowedPattern applies to String and
// CommaDelimitedList parameters only, MinValue and MaxValue to Number ones (CloudFormation,
// "Parameters" syntax), and no rule function tests a number or a substring (Fn::Contains matches
// whole list members), so a parameter keeps its bounds only as a Number, and the template accepts
// 1.5. What reads it must refuse it, and docs/configuration.md says who does:
//   - a variable of the functions: they refuse it at cold start, naming the variable;
//   - a property that takes a whole number (wholeNumberProperties): AWS refuses it during the
//     deploy, which then rolls back;
//   - an alarm's threshold (a double): AWS takes it, and it means what it says.
//
// Every Number parameter is one of the three, and every use of one no function reads is in its
// list. If the template learns to refuse a fraction, the parameter moves to
// TestNumberParametersAgreeWithTheCode.
func TestFractionsTheNumberTypeCannotRefuse(t *testing.T) {
	tpl, err := cfntemplate.Load(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	readBy := map[string]string{} // parameter -> variable
	for env, name := range envParameters(t, tpl) {
		readBy[name] = env
	}
	uses := numberUses(t, tpl)
	doc := fractionBullet(t)
	for _, p := range tpl.Parameters() {
		if p.Type != "Number" {
			continue
		}
		give := "1.5"
		if p.MinValue != nil {
			give = strconv.FormatFloat(*p.MinValue, 'f', -1, 64) + ".5"
		}
		if err := p.Check(give); err != nil {
			t.Errorf("template %s refuses %q (%v): move it to the agreement test", p.Name, give, err)
		}
		whole, wholeOK := wholeNumberProperties[p.Name]
		double, doubleOK := doubleProperties[p.Name]
		switch env, read := readBy[p.Name]; {
		case read:
			if _, err := config.Numbers[env].Parse(give); err == nil {
				t.Errorf("code accepts %s=%q, want it refused at cold start", env, give)
			}
			continue
		case wholeOK:
			if !equalSets(uses[p.Name], whole) {
				t.Errorf("%s is used by %v, wholeNumberProperties lists %v: check what each use takes", p.Name, uses[p.Name], whole)
			}
			if !strings.Contains(doc, "`"+p.Name+"`") {
				t.Errorf("docs/configuration.md does not name %s among the fractions AWS refuses mid-deploy:\n%s", p.Name, doc)
			}
		case doubleOK:
			if !equalSets(uses[p.Name], double) {
				t.Errorf("%s is used by %v, doubleProperties lists %v: check what each use takes", p.Name, uses[p.Name], double)
			}
		default:
			t.Errorf("Number parameter %s is neither read by a function nor listed by what AWS property it sets: a fraction reaches it unchecked", p.Name)
		}
	}
}

// wholeNumberProperties are the Number parameters no function reads whose every use takes a whole
// number (the template keys under which the parameter is used): AWS refuses a fraction there.
var wholeNumberProperties = map[string][]string{
	// The sample workflows' TimeoutSeconds, a positive integer in the Amazon States Language.
	"ExecutionTimeoutSeconds": {"TimeoutSecondsMember"},
	// AWS::Lambda::Function ReservedConcurrentExecutions (Integer); the condition that sets it.
	"ReleaserReservedConcurrency": {"HasReleaserReservedConcurrency", "ReservedConcurrentExecutions"},
	// AWS::CloudWatch::Alarm EvaluationPeriods and DatapointsToAlarm (Integer).
	"StalledMinutes": {"DatapointsToAlarm", "EvaluationPeriods"},
	// The event source mapping's ScalingConfig MaximumConcurrency (Integer).
	"StarterMaxConcurrency": {"MaximumConcurrency"},
}

// doubleProperties are the Number parameters no function reads that set an alarm's Threshold
// (Double): a fraction is a threshold like any other.
var doubleProperties = map[string][]string{
	"FailedExecutionsThreshold":   {"Threshold"},
	"GeneralQueueAgeAlarmSeconds": {"Threshold"},
	"LanesQueueAgeAlarmSeconds":   {"Threshold"},
	"PauseAlarmSeconds":           {"Threshold"},
}

// numberUses maps each Number parameter to the template keys under which it is used: the nearest
// mapping key above each !Ref of it or ${Name} in a !Sub, outside the Parameters section.
func numberUses(t *testing.T, tpl *cfntemplate.Template) map[string][]string {
	t.Helper()
	root := templateRoot(t)
	numbers := map[string]bool{}
	for _, p := range tpl.Parameters() {
		if p.Type == "Number" {
			numbers[p.Name] = true
		}
	}
	seen := map[string]map[string]bool{}
	add := func(param, key string) {
		if seen[param] == nil {
			seen[param] = map[string]bool{}
		}
		seen[param][key] = true
	}
	var walk func(n *yaml.Node, key string)
	walk = func(n *yaml.Node, key string) {
		if n.Kind == yaml.ScalarNode {
			switch {
			case n.Tag == "!Ref" && numbers[n.Value]:
				add(n.Value, key)
			case n.Tag == "!Sub":
				for name := range numbers {
					if strings.Contains(n.Value, "${"+name+"}") {
						add(name, key)
					}
				}
			}
			return
		}
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if key == "" && k == "Parameters" {
					continue
				}
				walk(n.Content[i+1], k)
			}
			return
		}
		for _, c := range n.Content {
			walk(c, key)
		}
	}
	walk(&root, "")
	out := map[string][]string{}
	for p, keys := range seen {
		for k := range keys {
			out[p] = append(out[p], k)
		}
		slices.Sort(out[p])
	}
	return out
}

func equalSets(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// fractionBullet is the item of docs/configuration.md that says who refuses a fraction in a
// whole-number parameter.
func fractionBullet(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	const start = "- a fraction in a whole-number parameter"
	text := string(data)
	i := strings.Index(text, start)
	if i < 0 {
		t.Fatalf("docs/configuration.md has no item %q", start)
	}
	end := strings.Index(text[i:], "\n\n")
	if end < 0 {
		end = len(text) - i
	}
	return text[i : i+end]
}

// The parameters no function reads refuse, before any resource is touched, what AWS would refuse
// mid-deploy: an empty or malformed ARN member of ExtraStateMachineArns (an empty Resource makes the
// IAM policy malformed; a version or alias ARN is not a state machine's), a topic that is not an SNS
// ARN, a schedule that is not rate() or cron().
func TestResourceParametersRefuseWhatAWSRefuses(t *testing.T) {
	tpl, err := cfntemplate.Load(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	const sm = "arn:aws:states:us-east-1:123456789012:stateMachine:orders"
	tests := []struct {
		param, give string
		want        bool
	}{
		{"ExtraStateMachineArns", "", true},
		{"ExtraStateMachineArns", sm, true},
		{"ExtraStateMachineArns", sm + "," + sm + "2", true},
		{"ExtraStateMachineArns", "arn:aws-cn:states:cn-north-1:123456789012:stateMachine:a_b-c", true},
		{"ExtraStateMachineArns", "arn:aws:states:us-east-1:123456789012:stateMachine:orders.v2", true},
		{"ExtraStateMachineArns", "arn:aws:states:us-east-1:123456789012:stateMachine:" + strings.Repeat("n", 80), true},
		{"ExtraStateMachineArns", "arn:aws:states:us-east-1:123456789012:stateMachine:" + strings.Repeat("n", 81), false},
		{"ExtraStateMachineArns", "arn:aws:states:us-east-1:123456789012:stateMachine:a b", false},
		{"ExtraStateMachineArns", sm + ",", false},
		{"ExtraStateMachineArns", "," + sm, false},
		{"ExtraStateMachineArns", sm + ",," + sm + "2", false},
		{"ExtraStateMachineArns", sm + ", " + sm + "2", false},
		{"ExtraStateMachineArns", sm + ":3", false},
		{"ExtraStateMachineArns", "arn:aws:states:us-east-1:123456789012:execution:orders:x", false},
		{"ExtraStateMachineArns", "orders", false},
		{"AlarmTopicArn", "", true},
		{"AlarmTopicArn", "arn:aws:sns:us-east-1:123456789012:ops", true},
		{"AlarmTopicArn", "arn:aws:sqs:us-east-1:123456789012:ops", false},
		{"SweepSchedule", "rate(1 minute)", true},
		{"SweepSchedule", "cron(0/5 * * * ? *)", true},
		{"SweepSchedule", "every minute", false},
	}
	for _, tt := range tests {
		t.Run(tt.param+"="+tt.give, func(t *testing.T) {
			p, ok := tpl.Parameter(tt.param)
			if !ok {
				t.Fatalf("template.yaml has no parameter %s", tt.param)
			}
			err := p.Check(tt.give)
			if err == nil {
				err = tpl.CheckRules(map[string]string{tt.param: tt.give})
			}
			if (err == nil) != tt.want {
				t.Errorf("template accepts %s=%q: %v (%v), want %v", tt.param, tt.give, err == nil, err, tt.want)
			}
		})
	}
	if !slices.ContainsFunc(tpl.Rules(), func(r cfntemplate.Rule) bool { return r.Name == "ExtraStateMachineArnsWellFormed" }) {
		t.Errorf("template has no rule ExtraStateMachineArnsWellFormed")
	}
}

// templateRoot is template.yaml's YAML tree, its tags (!Ref, !Sub) kept.
func templateRoot(t *testing.T) yaml.Node {
	t.Helper()
	data, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	return root
}
