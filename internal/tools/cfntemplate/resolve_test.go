package cfntemplate

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func loadFixture(t *testing.T, name string) *Template {
	t.Helper()
	tpl, err := Load(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("Load(%s) error: %v", name, err)
	}
	return tpl
}

func queueAttrs() Attributes {
	a := Attributes{}
	a.Set("Q", Ref, "http://localhost/q")
	a.Set("Q", "Arn", "arn:aws:sqs:us-east-1:123456789012:q")
	a.Set("Q", "QueueName", "q")
	return a
}

func TestIntrinsics(t *testing.T) {
	for _, file := range []string{"intrinsics.yaml", "longform.json"} {
		tpl := loadFixture(t, file)
		thing := tpl.byID["Thing"].Properties
		tests := []struct {
			name    string
			prop    string
			params  map[string]string
			want    any
			wantErr string
		}{
			{name: "sub pseudo and parameter", prop: "SubPlain", want: "stk-dev-eu-west-1"},
			{name: "sub parameter override", prop: "SubPlain", params: map[string]string{"Env": "prod"}, want: "stk-prod-eu-west-1"},
			{name: "sub attribute", prop: "SubGetAtt", want: "arn:aws:sqs:us-east-1:123456789012:q"},
			{name: "sub variables", prop: "SubVars", want: "dev/x/5"},
			{name: "sub literal", prop: "SubLiteral", want: "${Literal}-dev"},
			{name: "sub of a list", prop: "SubList", wantErr: "not a scalar"},
			{name: "select of split", prop: "Select", want: "b"},
			{name: "select out of range", prop: "SelectOut", wantErr: "out of range"},
			{name: "join empty list parameter", prop: "JoinList", want: ""},
			{name: "join list parameter", prop: "JoinList", params: map[string]string{"List": "a,b"}, want: "a+b"},
			{name: "join scalars", prop: "JoinMixed", want: "dev-5"},
			{name: "if false", prop: "If", want: "d"},
			{name: "if true", prop: "If", params: map[string]string{"Env": "prod"}, want: "p"},
			{name: "if list, empty", prop: "IfList", want: []any{"none"}},
			{name: "if list, given", prop: "IfList", params: map[string]string{"List": "a,b"}, want: []any{"a", "b"}},
			{name: "no value dropped", prop: "NoValue", want: map[string]any{"B": int64(1), "C": []any{"kept"}}},
			{name: "no value not taken", prop: "NoValue", params: map[string]string{"Env": "prod"}, want: map[string]any{"A": "x", "B": int64(1), "C": []any{"kept"}}},
			{name: "find in map", prop: "FindInMap", want: int64(30)},
			{name: "ref resource", prop: "RefResource", want: "http://localhost/q"},
			{name: "ref number parameter is text", prop: "RefNumber", want: "5"},
			{name: "ref pseudo", prop: "RefPseudo", want: "000000000000"},
			{name: "ref unknown", prop: "RefUnknown", wantErr: "neither a parameter nor a resource"},
			{name: "getatt short", prop: "GetAttShort", want: "arn:aws:sqs:us-east-1:123456789012:q"},
			{name: "getatt list", prop: "GetAttList", want: "q"},
			{name: "getatt not known", prop: "GetAttUnknown", wantErr: "!GetAtt Q.Nope is not known"},
			{name: "unsupported function", prop: "Unsupported", wantErr: "Fn::Base64 is not supported"},
			{name: "and, or: neither", prop: "Conditions", want: []any{false, false}},
			{name: "and, or: one", prop: "Conditions", params: map[string]string{"List": "a"}, want: []any{false, true}},
			{name: "and, or: both", prop: "Conditions", params: map[string]string{"Env": "prod", "List": "a"}, want: []any{true, true}},
		}
		for _, tt := range tests {
			v, ok := thing[tt.prop]
			if !ok { // the JSON fixture has the long forms of some cases only
				continue
			}
			t.Run(file+"/"+tt.name, func(t *testing.T) {
				params := map[string]string{}
				for k, p := range tt.params {
					if _, ok := tpl.Parameter(k); ok {
						params[k] = p
					}
				}
				r, err := tpl.Resolver(Env{Parameters: params, StackName: "stk", Region: "eu-west-1", AccountID: "000000000000", Attr: queueAttrs().Lookup})
				if err != nil {
					t.Fatalf("Resolver() error: %v", err)
				}
				got, err := r.Eval(v)
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("Eval(%s) = %v, %v, want error containing %q", tt.prop, got, err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatalf("Eval(%s) error: %v", tt.prop, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("Eval(%s) = %#v, want %#v", tt.prop, got, tt.want)
				}
			})
		}
	}
}

func TestParameterOverridesAreChecked(t *testing.T) {
	tpl := loadFixture(t, "intrinsics.yaml")
	tests := []struct {
		name    string
		give    map[string]string
		wantErr string
	}{
		{name: "defaults", give: nil},
		{name: "allowed value", give: map[string]string{"Env": "prod"}},
		{name: "not an allowed value", give: map[string]string{"Env": "test"}, wantErr: "not one of"},
		{name: "unknown parameter", give: map[string]string{"Nope": "x"}, wantErr: "not in the template"},
		{name: "number in range", give: map[string]string{"Size": "10"}},
		{name: "number above max", give: map[string]string{"Size": "11"}, wantErr: "above MaxValue"},
		{name: "number below min", give: map[string]string{"Size": "0"}, wantErr: "below MinValue"},
		{name: "not a number", give: map[string]string{"Size": "five"}, wantErr: "not a number"},
		{name: "pattern must match all of it", give: map[string]string{"Name": "abc1"}, wantErr: "does not match"},
		{name: "too long", give: map[string]string{"Name": "abcdef"}, wantErr: "longer than 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tpl.Resolver(Env{Parameters: tt.give})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Resolver(%v) error: %v", tt.give, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Resolver(%v) error = %v, want one containing %q", tt.give, err, tt.wantErr)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr string
	}{
		{name: "unknown tag", give: "testdata/badtag.yaml", wantErr: "unknown tag !Frobnicate"},
		{name: "getatt without attribute", give: "", wantErr: "not of the form Resource.Attribute"},
		{name: "no resources", give: "-", wantErr: "no Resources"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			switch tt.give {
			case "":
				_, err = Parse([]byte("Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      X: !GetAtt Q\n"), ".")
			case "-":
				_, err = Parse([]byte("Parameters: {}\n"), ".")
			default:
				_, err = Load(tt.give)
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestConditionCycleIsRefused(t *testing.T) {
	tpl := loadFixture(t, "cycle.yaml")
	_, err := tpl.Resolver(Env{})
	if err == nil || !strings.Contains(err.Error(), "refers to itself") {
		t.Fatalf("Resolver() error = %v, want a condition cycle", err)
	}
}

func TestFunctionGlobalsAndEvents(t *testing.T) {
	tpl := loadFixture(t, "globals.yaml")
	attrs := Attributes{}
	attrs.Set("Jobs", "Arn", "arn:aws:sqs:us-east-1:123456789012:stk-jobs.fifo")
	r, err := tpl.Resolver(Env{StackName: "stk", Attr: attrs.Lookup})
	if err != nil {
		t.Fatalf("Resolver() error: %v", err)
	}
	fns := map[string]Function{}
	for _, f := range tpl.Functions() {
		fns[f.LogicalID] = f
	}

	got, err := r.Function(fns["Overrides"])
	if err != nil {
		t.Fatalf("Function(Overrides) error: %v", err)
	}
	want := FunctionConfig{
		LogicalID:     "Overrides",
		Name:          "named",
		CodeDir:       filepath.Join("testdata", "fn", "overrides"),
		Handler:       "bootstrap",
		Runtime:       "provided.al2023",
		Architectures: []string{"arm64"},
		MemorySize:    256,
		Timeout:       20,
		Environment:   map[string]string{"A": "global", "B": "local", "C": "5"},
		SQSEvents: []SQSEvent{{
			Name: "Jobs", QueueLogicalID: "Jobs", BatchSize: 10, MaximumConcurrency: 5, Enabled: false,
		}},
		EventRules:  []EventRule{{Name: "Rule", Pattern: json.RawMessage(`{"source":["aws.states"]}`), Enabled: false}},
		OtherEvents: []string{"Api"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Function(Overrides) =\n%+v\nwant\n%+v", got, want)
	}

	got, err = r.Function(fns["Defaults"])
	if err != nil {
		t.Fatalf("Function(Defaults) error: %v", err)
	}
	if got.Name != "stk-Defaults" || got.Timeout != 10 || got.MemorySize != 128 ||
		!maps.Equal(got.Environment, map[string]string{"A": "global", "B": "global"}) {
		t.Errorf("Function(Defaults) = %+v, want name stk-Defaults, Globals' timeout 10 and environment, memory 128", got)
	}

	if _, err := r.Function(fns["BadQueue"]); err == nil || !strings.Contains(err.Error(), "Queue is not") {
		t.Errorf("Function(BadQueue) error = %v, want one about its queue", err)
	}

	qs := tpl.Queues()
	if len(qs) != 1 || !qs[0].Fifo {
		t.Fatalf("Queues() = %+v, want one FIFO queue", qs)
	}
	q, err := r.Queue(qs[0])
	if err != nil {
		t.Fatalf("Queue(Jobs) error: %v", err)
	}
	if q.Name != "stk-jobs.fifo" || !maps.Equal(q.Attributes, map[string]string{"FifoQueue": "true"}) {
		t.Errorf("Queue(Jobs) = %+v, want name stk-jobs.fifo and only FifoQueue", q)
	}
}

func TestStateMachineDefinitions(t *testing.T) {
	tpl := loadFixture(t, "statemachines.yaml")
	byID := map[string]StateMachine{}
	for _, sm := range tpl.StateMachines() {
		byID[sm.LogicalID] = sm
	}
	const fnArn = "arn:aws:lambda:us-east-1:123456789012:function:fn"
	tests := []struct {
		name     string
		id       string
		params   map[string]string
		attrs    bool
		wantName string
		wantType string
		wantDef  map[string]any
		wantErr  string
	}{
		{
			name: "file with substitutions", id: "FromFile", attrs: true,
			wantName: "from-file", wantType: "STANDARD",
			wantDef: map[string]any{
				"Comment": "fixture", "TimeoutSeconds": float64(60), "Version": "1.0", "StartAt": "Call",
				"States": map[string]any{"Call": map[string]any{"Type": "Task", "Resource": fnArn, "End": true}},
			},
		},
		{
			name: "timeout from a parameter", id: "FromFile", attrs: true, params: map[string]string{"Timeout": "7"},
			wantName: "from-file", wantType: "STANDARD",
			wantDef: map[string]any{
				"Comment": "fixture", "TimeoutSeconds": float64(7), "Version": "1.0", "StartAt": "Call",
				"States": map[string]any{"Call": map[string]any{"Type": "Task", "Resource": fnArn, "End": true}},
			},
		},
		{name: "attribute not known yet", id: "FromFile", wantErr: "create Fn first"},
		{name: "placeholder without substitution", id: "MissingSubstitution", attrs: true, wantErr: "${Missing} in the definition has no DefinitionSubstitutions entry"},
		{name: "not JSON after substitution", id: "BreaksJSON", attrs: true, wantErr: "not valid JSON"},
		{
			name: "inline definition", id: "Inline", attrs: true,
			wantName: "stk-inline", wantType: "STANDARD",
			wantDef: map[string]any{
				"StartAt": "Call", "TimeoutSeconds": "60",
				"States": map[string]any{"Call": map[string]any{"Type": "Task", "Resource": fnArn, "End": true}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			attrs := Attributes{}
			if tt.attrs {
				attrs.Set("Fn", "Arn", fnArn)
			}
			r, err := tpl.Resolver(Env{StackName: "stk", Parameters: tt.params, Attr: attrs.Lookup})
			if err != nil {
				t.Fatalf("Resolver() error: %v", err)
			}
			got, err := r.StateMachine(byID[tt.id])
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("StateMachine(%s) error = %v, want one containing %q", tt.id, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("StateMachine(%s) error: %v", tt.id, err)
			}
			if got.Name != tt.wantName || got.Type != tt.wantType {
				t.Errorf("StateMachine(%s) name, type = %q, %q, want %q, %q", tt.id, got.Name, got.Type, tt.wantName, tt.wantType)
			}
			var def map[string]any
			if err := json.Unmarshal([]byte(got.Definition), &def); err != nil {
				t.Fatalf("StateMachine(%s).Definition is not JSON: %v", tt.id, err)
			}
			if !reflect.DeepEqual(def, tt.wantDef) {
				t.Errorf("StateMachine(%s).Definition = %v, want %v", tt.id, def, tt.wantDef)
			}
		})
	}
}

func TestQueuesComeAfterTheirDeadLetterQueues(t *testing.T) {
	tpl, err := Parse([]byte(`
Resources:
  A:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: {deadLetterTargetArn: !GetAtt B.Arn, maxReceiveCount: 3}
  B:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: {deadLetterTargetArn: !GetAtt C.Arn, maxReceiveCount: 3}
  C:
    Type: AWS::SQS::Queue
  D:
    Type: AWS::SQS::Queue
`), ".")
	if err != nil {
		t.Fatalf("Parse() error: %v", err)
	}
	var got []string
	for _, q := range tpl.Queues() {
		got = append(got, q.LogicalID)
	}
	if want := []string{"C", "D", "B", "A"}; !slices.Equal(got, want) {
		t.Errorf("Queues() order = %v, want %v", got, want)
	}
}
