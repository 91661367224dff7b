package cfntemplate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
)

// The application's own files: these tests hold template.yaml to the contract of docs/design.md.
var (
	repoRoot     = filepath.Join("..", "..", "..")
	templatePath = filepath.Join(repoRoot, "template.yaml")
)

const (
	account     = "123456789012"
	region      = "us-east-1"
	stack       = "sfnlimit-test"
	releaserArn = "arn:aws:lambda:us-east-1:123456789012:function:sfnlimit-test-ReleaserFunction"
	sampleArn   = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-test-sample"
	bareArn     = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-test-bare"
)

func loadApp(t *testing.T) *Template {
	t.Helper()
	tpl, err := Load(templatePath)
	if err != nil {
		t.Fatalf("Load(template.yaml) error: %v", err)
	}
	return tpl
}

// localStack resolves the template the way the local stack does: it creates the queues (dead-letter
// targets first), the table, names the functions, then the state machine, recording attributes.
type localStack struct {
	tpl    *Template
	r      *Resolver
	attrs  Attributes
	queues map[string]QueueConfig
	sms    map[string]StateMachineConfig
	fns    map[string]FunctionConfig
}

func newLocalStack(t *testing.T, params map[string]string) *localStack {
	t.Helper()
	return newLocalStackOf(t, loadApp(t), params)
}

// newLocalStackOf is newLocalStack for a given template (a mutated copy in a test).
func newLocalStackOf(t *testing.T, tpl *Template, params map[string]string) *localStack {
	t.Helper()
	s := &localStack{tpl: tpl, attrs: Attributes{}, queues: map[string]QueueConfig{}, sms: map[string]StateMachineConfig{}, fns: map[string]FunctionConfig{}}
	r, err := tpl.Resolver(Env{Parameters: params, StackName: stack, Region: region, AccountID: account, Attr: s.attrs.Lookup})
	if err != nil {
		t.Fatalf("Resolver(%v) error: %v", params, err)
	}
	s.r = r
	for _, q := range tpl.Queues() {
		cfg, err := r.Queue(q)
		if err != nil {
			t.Fatalf("Queue(%s) error: %v", q.LogicalID, err)
		}
		s.queues[q.LogicalID] = cfg
		s.attrs.Set(q.LogicalID, Ref, "http://sqs.local/"+account+"/"+cfg.Name)
		s.attrs.Set(q.LogicalID, "Arn", "arn:aws:sqs:"+region+":"+account+":"+cfg.Name)
		s.attrs.Set(q.LogicalID, "QueueName", cfg.Name)
	}
	tb, err := tpl.Table()
	if err != nil {
		t.Fatalf("Table() error: %v", err)
	}
	name, err := r.Name(tb.LogicalID)
	if err != nil {
		t.Fatalf("Name(%s) error: %v", tb.LogicalID, err)
	}
	s.attrs.Set(tb.LogicalID, Ref, name)
	s.attrs.Set(tb.LogicalID, "Arn", "arn:aws:dynamodb:"+region+":"+account+":table/"+name)
	for _, f := range tpl.Functions() {
		name, err := r.Name(f.LogicalID)
		if err != nil {
			t.Fatalf("Name(%s) error: %v", f.LogicalID, err)
		}
		s.attrs.Set(f.LogicalID, Ref, name)
		s.attrs.Set(f.LogicalID, "Arn", "arn:aws:lambda:"+region+":"+account+":function:"+name)
	}
	// The router's environment names its role's unique id (ROUTER_ROLE_ID), as IAM gives it.
	s.attrs.Set("RouterRole", "RoleId", "AROAEXAMPLEROUTERROLE")
	for _, sm := range tpl.StateMachines() {
		cfg, err := r.StateMachine(sm)
		if err != nil {
			t.Fatalf("StateMachine(%s) error: %v", sm.LogicalID, err)
		}
		s.sms[sm.LogicalID] = cfg
		s.attrs.Set(sm.LogicalID, Ref, "arn:aws:states:"+region+":"+account+":stateMachine:"+cfg.Name)
		s.attrs.Set(sm.LogicalID, "Name", cfg.Name)
	}
	for _, f := range tpl.Functions() {
		cfg, err := r.Function(f)
		if err != nil {
			t.Fatalf("Function(%s) error: %v", f.LogicalID, err)
		}
		s.fns[f.LogicalID] = cfg
	}
	return s
}

func TestParametersAreSortedDescribedAndDefaulted(t *testing.T) {
	tpl := loadApp(t)
	var names []string
	for _, p := range tpl.Parameters() {
		names = append(names, p.Name)
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("parameter %s has no Description", p.Name)
		}
		if !p.HasDefault {
			t.Errorf("parameter %s has no Default", p.Name)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("Parameters() = %v, want them sorted", names)
	}

	wantDefaults := map[string]string{
		"ConfigCacheSeconds":      "30",
		"DefaultLimit":            "0",
		"DefaultMaxAttempts":      "3",
		"ExecutionTimeoutSeconds": "3600",
		"ExtraStateMachineArns":   "",
		"FifoVisibilityTimeout":   "900",
		"LaneStrategy":            "first-free",
		"StartRetrySeconds":       "5",
		"StarterMaxConcurrency":   "50",
		"SweepMaxDescribes":       "500",
		"SweepMinAgeSeconds":      "60",
		"SweepSchedule":           "rate(1 minute)",
		"TypeLimits":              "demo=5",
		"TypeMaxAttempts":         "",
	}
	for name, want := range wantDefaults {
		p, ok := tpl.Parameter(name)
		if !ok {
			t.Errorf("Parameter(%s) missing", name)
			continue
		}
		if p.Default != want {
			t.Errorf("Parameter(%s).Default = %q, want %q", name, p.Default, want)
		}
	}
}

func TestParameterConstraints(t *testing.T) {
	tpl := loadApp(t)
	tests := []struct {
		name    string
		give    map[string]string
		wantErr bool
	}{
		{name: "fifo visibility at the minimum", give: map[string]string{"FifoVisibilityTimeout": "30"}},
		{name: "fifo visibility at 12 hours", give: map[string]string{"FifoVisibilityTimeout": "43200"}},
		{name: "fifo visibility below the starter timeout", give: map[string]string{"FifoVisibilityTimeout": "29"}, wantErr: true},
		{name: "fifo visibility beyond 12 hours", give: map[string]string{"FifoVisibilityTimeout": "43201"}, wantErr: true},
		{name: "config cache beyond 30 s", give: map[string]string{"ConfigCacheSeconds": "31"}, wantErr: true},
		{name: "unknown lane strategy", give: map[string]string{"LaneStrategy": "roundrobin"}, wantErr: true},
		{name: "type limits", give: map[string]string{"TypeLimits": "payments=50,reports=5"}},
		{name: "no type limits", give: map[string]string{"TypeLimits": ""}},
		{name: "type limits with a space", give: map[string]string{"TypeLimits": "pay ments=5"}, wantErr: true},
		{name: "type limits without a number", give: map[string]string{"TypeLimits": "payments"}, wantErr: true},
		{name: "type max attempts", give: map[string]string{"TypeMaxAttempts": "payments=5"}},
		{name: "starter concurrency below Lambda's 2", give: map[string]string{"StarterMaxConcurrency": "1"}, wantErr: true},
		{name: "schedule not rate or cron", give: map[string]string{"SweepSchedule": "every 5 minutes"}, wantErr: true},
		{name: "cron schedule", give: map[string]string{"SweepSchedule": "cron(0/5 * * * ? *)"}},
		{name: "unknown parameter", give: map[string]string{"TypeLimit": "demo=5"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tpl.Resolver(Env{Parameters: tt.give})
			if (err != nil) != tt.wantErr {
				t.Errorf("Resolver(%v) error = %v, want error %v", tt.give, err, tt.wantErr)
			}
		})
	}
}

func TestQueues(t *testing.T) {
	s := newLocalStack(t, nil)
	dlqArn, _ := s.attrs.Lookup("DeadLetterQueue", "Arn")
	redrive, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlqArn, "maxReceiveCount": 5})
	tests := []struct {
		id       string
		wantName string
		want     map[string]string
	}{
		{
			id:       "LanesQueue",
			wantName: stack + "-LanesQueue.fifo",
			want: map[string]string{
				"FifoQueue":                 "true",
				"ContentBasedDeduplication": "false",
				"DeduplicationScope":        "messageGroup",
				"FifoThroughputLimit":       "perMessageGroupId",
				"MessageRetentionPeriod":    "1209600",
				"SqsManagedSseEnabled":      "true",
				"VisibilityTimeout":         "900",
				// and no RedrivePolicy: attempts are counted by the limiter
			},
		},
		{
			id:       "GeneralQueue",
			wantName: stack + "-GeneralQueue",
			want: map[string]string{
				"MessageRetentionPeriod": "1209600",
				"RedrivePolicy":          string(redrive),
				"SqsManagedSseEnabled":   "true",
				"VisibilityTimeout":      "180",
			},
		},
		{
			id:       "DeadLetterQueue",
			wantName: stack + "-DeadLetterQueue",
			want: map[string]string{
				"MessageRetentionPeriod": "1209600",
				"SqsManagedSseEnabled":   "true",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			got, ok := s.queues[tt.id]
			if !ok {
				t.Fatalf("queue %s missing from Queues()", tt.id)
			}
			if got.Name != tt.wantName {
				t.Errorf("Queue(%s).Name = %q, want %q", tt.id, got.Name, tt.wantName)
			}
			if !maps.Equal(got.Attributes, tt.want) {
				t.Errorf("Queue(%s).Attributes =\n%v\nwant\n%v", tt.id, got.Attributes, tt.want)
			}
		})
	}
	if len(s.queues) != len(tests) {
		t.Errorf("template has %d queues, want %d", len(s.queues), len(tests))
	}

	var order []string
	for _, q := range s.tpl.Queues() {
		order = append(order, q.LogicalID)
	}
	if slices.Index(order, "DeadLetterQueue") > slices.Index(order, "GeneralQueue") {
		t.Errorf("Queues() order = %v, want DeadLetterQueue before GeneralQueue (its redrive target)", order)
	}
}

func TestParameterOverridesReachResources(t *testing.T) {
	s := newLocalStack(t, map[string]string{
		"FifoVisibilityTimeout":   "1200",
		"ExecutionTimeoutSeconds": "120",
		"StarterMaxConcurrency":   "7",
		"TypeLimits":              "payments=50,reports=5",
		"SweepSchedule":           "rate(1 minute)",
	})
	if got := s.queues["LanesQueue"].Attributes["VisibilityTimeout"]; got != "1200" {
		t.Errorf("LanesQueue VisibilityTimeout = %q, want 1200", got)
	}
	if got := s.fns["StarterFunction"].Environment["FIFO_VISIBILITY_TIMEOUT"]; got != "1200" {
		t.Errorf("StarterFunction FIFO_VISIBILITY_TIMEOUT = %q, want 1200, the queue's", got)
	}
	for _, id := range []string{"SampleStateMachine", "BareStateMachine"} {
		if got := timeoutSeconds(t, s.sms[id].Definition); got != 120 {
			t.Errorf("%s TimeoutSeconds = %v, want 120", id, got)
		}
	}
	if got := s.fns["StarterFunction"].SQSEvents[0].MaximumConcurrency; got != 7 {
		t.Errorf("StarterFunction MaximumConcurrency = %d, want 7", got)
	}
	for _, fn := range []string{"RouterFunction", "StarterFunction"} {
		if got := s.fns[fn].Environment["TYPE_LIMITS"]; got != "payments=50,reports=5" {
			t.Errorf("%s TYPE_LIMITS = %q, want payments=50,reports=5", fn, got)
		}
	}
	if got := s.fns["ReleaserFunction"].Schedules[0].Expression; got != "rate(1 minute)" {
		t.Errorf("ReleaserFunction schedule = %q, want rate(1 minute)", got)
	}
}

func TestTimeoutsAgree(t *testing.T) {
	s := newLocalStack(t, nil)
	router := s.fns["RouterFunction"].Timeout
	if got := s.queues["GeneralQueue"].Attributes["VisibilityTimeout"]; got != strconv.Itoa(6*router) {
		t.Errorf("GeneralQueue VisibilityTimeout = %s, want 6 x router timeout %d", got, router)
	}
	fifo, _ := s.tpl.Parameter("FifoVisibilityTimeout")
	if starter := s.fns["StarterFunction"].Timeout; fifo.MinValue == nil || float64(starter) > *fifo.MinValue {
		t.Errorf("starter timeout %d > FifoVisibilityTimeout MinValue %v: Lambda refuses the event source mapping", starter, fifo.MinValue)
	}
	if fifo.MaxValue == nil || *fifo.MaxValue != 43200 {
		t.Errorf("FifoVisibilityTimeout MaxValue = %v, want 43200 (SQS's 12 hours)", fifo.MaxValue)
	}
	for id, f := range s.fns {
		if f.Timeout < 1 || f.Timeout > 900 {
			t.Errorf("%s timeout %d outside Lambda's 1..900", id, f.Timeout)
		}
	}
}

// The template offers exactly the lane strategies the code knows, the code's default first, and the
// retired least-loaded last, so that a stack deployed with it still updates (it runs as first-free).
func TestLaneStrategyValuesAreTheCodes(t *testing.T) {
	for _, p := range loadApp(t).Parameters() {
		if p.Name != "LaneStrategy" {
			continue
		}
		want := append(slices.Clone(lane.Strategies), lane.LeastLoaded)
		if !slices.Equal(p.AllowedValues, want) || p.Default != lane.DefaultStrategy {
			t.Errorf("LaneStrategy allows %q (default %q), want %q (default %q)", p.AllowedValues, p.Default, want, lane.DefaultStrategy)
		}
		return
	}
	t.Fatal("template.yaml has no LaneStrategy parameter")
}

func TestTable(t *testing.T) {
	tb, err := loadApp(t).Table()
	if err != nil {
		t.Fatalf("Table() error: %v", err)
	}
	want := Table{
		LogicalID:            "Table",
		BillingMode:          "PAY_PER_REQUEST",
		KeySchema:            []KeyElement{{"pk", "HASH"}, {"sk", "RANGE"}},
		AttributeDefinitions: []AttributeDefinition{{"pk", "S"}, {"sk", "S"}},
	}
	if !reflect.DeepEqual(tb, want) {
		t.Errorf("Table() = %+v, want %+v", tb, want)
	}
}

// designEnvironment reads the "Functions and their environment" table of docs/design.md:
// function ("router") -> its variables.
func designEnvironment(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs", "design.md"))
	if err != nil {
		t.Fatalf("open design.md: %v", err)
	}
	defer f.Close()
	row := regexp.MustCompile(`^\|\s*([A-Z][A-Z0-9_]+)\s*\|\s*([a-z, ]+?)\s*\|`)
	out := map[string][]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.Contains(line, "Functions and their environment")
			continue
		}
		m := row.FindStringSubmatch(line)
		if !in || m == nil {
			continue
		}
		for _, fn := range strings.Split(m[2], ",") {
			fn = strings.TrimSpace(fn)
			out[fn] = append(out[fn], m[1])
		}
	}
	if len(out) == 0 {
		t.Fatal("design.md: no environment table found")
	}
	return out
}

func TestFunctionEnvironmentIsTheDesigns(t *testing.T) {
	s := newLocalStack(t, nil)
	design := designEnvironment(t)
	for _, fn := range []string{"router", "starter", "releaser"} {
		id := strings.ToUpper(fn[:1]) + fn[1:] + "Function"
		got := slices.Sorted(maps.Keys(s.fns[id].Environment))
		want := slices.Sorted(slices.Values(design[fn]))
		if !slices.Equal(got, want) {
			t.Errorf("%s environment = %v, want docs/design.md's %v", id, got, want)
		}
	}
	if len(s.fns) != 3 {
		t.Errorf("template has %d functions, want 3", len(s.fns))
	}
}

func TestFunctionEnvironmentValues(t *testing.T) {
	s := newLocalStack(t, nil)
	lanesURL, _ := s.attrs.Lookup("LanesQueue", Ref)
	dlqURL, _ := s.attrs.Lookup("DeadLetterQueue", Ref)
	table, _ := s.attrs.Lookup("Table", Ref)
	tests := []struct {
		fn, name, want string
	}{
		{"RouterFunction", "FIFO_QUEUE_URL", lanesURL},
		{"RouterFunction", "DLQ_URL", dlqURL},
		{"RouterFunction", "TABLE_NAME", table},
		{"RouterFunction", "TYPE_LIMITS", "demo=5"},
		{"RouterFunction", "DEFAULT_LIMIT", "0"},
		{"RouterFunction", "LANE_STRATEGY", "first-free"},
		{"RouterFunction", "CONFIG_CACHE_SECONDS", "30"},
		{"StarterFunction", "STATE_MACHINE_ARN", sampleArn},
		{"StarterFunction", "FIFO_QUEUE_URL", lanesURL},
		{"StarterFunction", "DEFAULT_MAX_ATTEMPTS", "3"},
		{"StarterFunction", "TYPE_MAX_ATTEMPTS", ""},
		{"StarterFunction", "START_RETRY_SECONDS", "5"},
		{"StarterFunction", "FIFO_VISIBILITY_TIMEOUT", "900"},
		{"StarterFunction", "LANE_STRATEGY", "first-free"},
		{"ReleaserFunction", "FIFO_QUEUE_URL", lanesURL},
		{"ReleaserFunction", "DLQ_URL", dlqURL},
		{"ReleaserFunction", "SWEEP_MIN_AGE_SECONDS", "60"},
		{"ReleaserFunction", "SWEEP_MAX_DESCRIBES", "500"},
		{"ReleaserFunction", "LANE_STRATEGY", "first-free"},
		{"ReleaserFunction", "FIFO_VISIBILITY_TIMEOUT", "900"},
	}
	for _, tt := range tests {
		t.Run(tt.fn+"/"+tt.name, func(t *testing.T) {
			got, ok := s.fns[tt.fn].Environment[tt.name]
			if !ok || got != tt.want {
				t.Errorf("%s %s = %q (set %v), want %q", tt.fn, tt.name, got, ok, tt.want)
			}
		})
	}
}

func TestFunctionsAreBuiltByTheMakefile(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatalf("read Makefile: %v", err)
	}
	s := newLocalStack(t, nil)
	for id, f := range s.fns {
		name := strings.ToLower(strings.TrimSuffix(id, "Function"))
		if want := filepath.Join(repoRoot, "functions", name); f.CodeDir != want {
			t.Errorf("%s CodeDir = %q, want %q", id, f.CodeDir, want)
		}
		if f.Metadata["BuildMethod"] != "makefile" {
			t.Errorf("%s Metadata.BuildMethod = %v, want makefile", id, f.Metadata["BuildMethod"])
		}
		if !strings.Contains(string(makefile), "\nbuild-"+id+":") {
			t.Errorf("Makefile has no target build-%s", id)
		}
		if f.Runtime != "provided.al2023" || f.Handler != "bootstrap" || !slices.Equal(f.Architectures, []string{"arm64"}) {
			t.Errorf("%s runtime, handler, architectures = %s, %s, %v, want provided.al2023, bootstrap, [arm64]", id, f.Runtime, f.Handler, f.Architectures)
		}
	}
}

func TestSQSEventSources(t *testing.T) {
	s := newLocalStack(t, nil)
	tests := []struct {
		fn   string
		want SQSEvent
	}{
		{"RouterFunction", SQSEvent{Name: "GeneralQueue", QueueLogicalID: "GeneralQueue", BatchSize: 10, MaximumBatchingWindowInSeconds: 1, FunctionResponseTypes: []string{"ReportBatchItemFailures"}, Enabled: true}},
		{"StarterFunction", SQSEvent{Name: "LanesQueue", QueueLogicalID: "LanesQueue", BatchSize: 10, FunctionResponseTypes: []string{"ReportBatchItemFailures"}, MaximumConcurrency: 50, Enabled: true}},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			got := s.fns[tt.fn].SQSEvents
			if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Errorf("%s SQSEvents = %+v, want [%+v]", tt.fn, got, tt.want)
			}
		})
	}
	for id, f := range s.fns {
		for _, e := range f.SQSEvents {
			if !e.ReportsBatchItemFailures() {
				t.Errorf("%s event %s does not report batch item failures", id, e.Name)
			}
		}
		if len(f.OtherEvents) > 0 {
			t.Errorf("%s has events this package does not resolve: %v", id, f.OtherEvents)
		}
	}
	if got := s.fns["ReleaserFunction"].SQSEvents; len(got) != 0 {
		t.Errorf("ReleaserFunction SQSEvents = %+v, want none", got)
	}
}

// The releaser's rules: every unsuccessful end of every state machine the limiter runs
// (StatusChange), and the successes of those that may run in events release mode (Succeeded): the
// bare sample and the extra ones, never the sample, whose Release step releases its successes (an
// event per job would double the releaser's invocations).
func TestReleaserEvents(t *testing.T) {
	extraA := "arn:aws:states:us-east-1:123456789012:stateMachine:a"
	extraB := "arn:aws:states:us-east-1:123456789012:stateMachine:b"
	tests := []struct {
		name      string
		params    map[string]string
		wantRules map[string]map[string]any // rule name -> its detail
	}{
		{
			name: "samples only",
			wantRules: map[string]map[string]any{
				"StatusChange": {"status": []any{"FAILED", "TIMED_OUT", "ABORTED"}, "stateMachineArn": []any{sampleArn, bareArn}},
				"Succeeded":    {"status": []any{"SUCCEEDED"}, "stateMachineArn": []any{bareArn}},
			},
		},
		{
			name:   "with extra state machines",
			params: map[string]string{"ExtraStateMachineArns": extraA + "," + extraB},
			wantRules: map[string]map[string]any{
				"StatusChange": {"status": []any{"FAILED", "TIMED_OUT", "ABORTED"}, "stateMachineArn": []any{sampleArn, bareArn, extraA, extraB}},
				"Succeeded":    {"status": []any{"SUCCEEDED"}, "stateMachineArn": []any{bareArn, extraA, extraB}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newLocalStack(t, tt.params)
			rel := s.fns["ReleaserFunction"]
			got := map[string]map[string]any{}
			for _, rule := range rel.EventRules {
				var p map[string]any
				if err := json.Unmarshal(rule.Pattern, &p); err != nil {
					t.Fatalf("rule %s pattern is not JSON: %v", rule.Name, err)
				}
				want := map[string]any{"source": []any{"aws.states"}, "detail-type": []any{"Step Functions Execution Status Change"}}
				detail := p["detail"]
				delete(p, "detail")
				if !reflect.DeepEqual(p, want) {
					t.Errorf("rule %s matches %v besides its detail, want %v", rule.Name, p, want)
				}
				if !rule.Enabled {
					t.Errorf("rule %s is disabled", rule.Name)
				}
				got[rule.Name], _ = detail.(map[string]any)
			}
			if !reflect.DeepEqual(got, tt.wantRules) {
				t.Errorf("releaser rules' details = %v, want %v", got, tt.wantRules)
			}
			if slices.Contains(got["Succeeded"]["stateMachineArn"].([]any), any(sampleArn)) {
				t.Error("the Succeeded rule lists the sample: each of its jobs would invoke the releaser twice")
			}
			if want := []Schedule{{Name: "Sweep", Expression: "rate(1 minute)", Enabled: true}}; !reflect.DeepEqual(rel.Schedules, want) {
				t.Errorf("ReleaserFunction Schedules = %+v, want %+v", rel.Schedules, want)
			}
		})
	}
}

func TestSampleStateMachine(t *testing.T) {
	s := newLocalStack(t, nil)
	sm := s.sms["SampleStateMachine"]
	if sm.Name != stack+"-sample" || sm.Type != "STANDARD" {
		t.Errorf("SampleStateMachine name, type = %q, %q, want %q, STANDARD", sm.Name, sm.Type, stack+"-sample")
	}
	if strings.Contains(sm.Definition, "${") {
		t.Errorf("definition still has a placeholder: %s", sm.Definition)
	}
	var def struct {
		Comment        string
		TimeoutSeconds any
		QueryLanguage  string
		States         map[string]struct {
			Type       string
			Resource   string
			Parameters struct {
				FunctionName string
				Payload      map[string]any
			}
		}
	}
	if err := json.Unmarshal([]byte(sm.Definition), &def); err != nil {
		t.Fatalf("definition is not JSON: %v", err)
	}
	if got := timeoutSeconds(t, sm.Definition); got != 3600 {
		t.Errorf("TimeoutSeconds = %v, want the number 3600", def.TimeoutSeconds)
	}
	if strings.ContainsAny(def.Comment, `"$`) || !strings.HasSuffix(def.Comment, "releases its lane") {
		t.Errorf("Comment = %q, want the file's text without the placeholder", def.Comment)
	}
	if def.QueryLanguage != "" && def.QueryLanguage != "JSONPath" {
		t.Errorf("QueryLanguage = %q, want JSONPath (the local emulator has no JSONata)", def.QueryLanguage)
	}
	for _, step := range []struct{ state, outcome string }{{"Release", "succeeded"}, {"ReleaseFailed", "failed"}} {
		st := def.States[step.state]
		if st.Resource != "arn:aws:states:::lambda:invoke" || st.Parameters.FunctionName != releaserArn {
			t.Errorf("%s invokes %s %s, want lambda:invoke of %s", step.state, st.Resource, st.Parameters.FunctionName, releaserArn)
		}
		p := st.Parameters.Payload
		if p["source"] != "workflow" || p["outcome"] != step.outcome || p["job.$"] != "$$.Execution.Input.job" || p["executionArn.$"] != "$$.Execution.Id" {
			t.Errorf("%s payload = %v, want the releaser's workflow event with outcome %s", step.state, p, step.outcome)
		}
	}
	if jf := def.States["JobFailed"]; jf.Type != "Fail" {
		t.Errorf("JobFailed is a %q state, want Fail", jf.Type)
	}
}

// The bare sample is a workflow as a user writes it: the sample's work, nothing that calls the
// releaser, and the same execution timeout.
func TestBareStateMachine(t *testing.T) {
	s := newLocalStack(t, map[string]string{"ExecutionTimeoutSeconds": "77"})
	sm := s.sms["BareStateMachine"]
	if sm.Name != stack+"-bare" || sm.Type != "STANDARD" {
		t.Errorf("BareStateMachine name, type = %q, %q, want %q, STANDARD (Express workflows send no status events)", sm.Name, sm.Type, stack+"-bare")
	}
	if got := timeoutSeconds(t, sm.Definition); got != 77 {
		t.Errorf("TimeoutSeconds = %v, want 77 (ExecutionTimeoutSeconds)", got)
	}
	var bare struct {
		StartAt string
		States  map[string]map[string]any
	}
	if err := json.Unmarshal([]byte(sm.Definition), &bare); err != nil {
		t.Fatalf("definition is not JSON: %v", err)
	}
	for name, st := range bare.States {
		if st["Type"] == "Task" || st["Type"] == "Parallel" || st["Type"] == "Map" || st["Catch"] != nil {
			t.Errorf("state %s is a %v (Catch %v): the bare workflow has no task and no catch", name, st["Type"], st["Catch"])
		}
	}
	if strings.Contains(sm.Definition, releaserArn) || slices.Contains(references(s.tpl.byID["BareStateMachine"].Properties), "ReleaserFunction") {
		t.Error("the bare workflow names the releaser")
	}

	// Its states are the sample's work, WorkDone renamed Done, comments aside: the same input
	// contract, the same errors.
	var sample struct {
		States map[string]struct {
			Branches []struct {
				StartAt string
				States  map[string]map[string]any
			}
		}
	}
	if err := json.Unmarshal([]byte(s.sms["SampleStateMachine"].Definition), &sample); err != nil {
		t.Fatal(err)
	}
	if len(sample.States["Work"].Branches) != 1 {
		t.Fatalf("the sample's Work has %d branches, want 1", len(sample.States["Work"].Branches))
	}
	work := sample.States["Work"].Branches[0]
	rename := func(v any) any {
		b, _ := json.Marshal(v)
		b = []byte(strings.ReplaceAll(string(b), `"WorkDone"`, `"Done"`))
		var out any
		_ = json.Unmarshal(b, &out)
		return out
	}
	want := map[string]any{}
	for name, st := range work.States {
		delete(st, "Comment")
		want[rename(name).(string)] = rename(st)
	}
	got := map[string]any{}
	for name, st := range bare.States {
		delete(st, "Comment")
		got[name] = rename(st)
	}
	if bare.StartAt != work.StartAt || !reflect.DeepEqual(got, want) {
		t.Errorf("bare states (from %s) =\n%v\nwant the sample's work (from %s)\n%v", bare.StartAt, got, work.StartAt, want)
	}
}

func TestDefinitionFilesStayJSON(t *testing.T) {
	for _, file := range []string{"sample.asl.json", "bare.asl.json"} {
		t.Run(file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(repoRoot, "statemachine", file))
			if err != nil {
				t.Fatalf("read %s: %v", file, err)
			}
			var def map[string]any
			if err := json.Unmarshal(raw, &def); err != nil {
				t.Fatalf("%s is not JSON: %v", file, err)
			}
			if _, ok := def["TimeoutSeconds"]; ok {
				t.Errorf("%s sets TimeoutSeconds itself; it comes from ${TimeoutSecondsMember}", file)
			}
			comment, _ := def["Comment"].(string)
			if !strings.HasSuffix(comment, "${TimeoutSecondsMember}") || strings.Count(string(raw), "${TimeoutSecondsMember}") != 1 {
				t.Errorf("Comment = %q, want it to end with the only ${TimeoutSecondsMember}", comment)
			}
			for _, banned := range []string{`"QueryLanguage": "JSONata"`, "{%"} {
				if strings.Contains(string(raw), banned) {
					t.Errorf("%s uses JSONata (%s): the local emulator cannot evaluate it", file, banned)
				}
			}
			if regexp.MustCompile(`\$[.\w]*\[\d+\]`).Match(raw) {
				t.Errorf("%s indexes an array in a path: the local emulator gets it wrong", file)
			}
		})
	}
}

func TestOutputs(t *testing.T) {
	s := newLocalStack(t, nil)
	got, err := s.r.Outputs()
	if err != nil {
		t.Fatalf("Outputs() error: %v", err)
	}
	lanesURL, _ := s.attrs.Lookup("LanesQueue", Ref)
	want := map[string]string{
		"LanesQueueUrl":         lanesURL,
		"SampleStateMachineArn": sampleArn,
		"BareStateMachineArn":   bareArn,
		"ReleaserFunctionArn":   releaserArn,
		"TableName":             stack + "-Table",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("output %s = %q, want %q", name, got[name], w)
		}
	}
	for _, name := range []string{
		"GeneralQueueUrl", "GeneralQueueArn", "GeneralQueueName", "LanesQueueArn", "LanesQueueName",
		"DeadLetterQueueUrl", "DeadLetterQueueArn", "DeadLetterQueueName", "TableArn", "SampleStateMachineName", "BareStateMachineName",
		"RouterFunctionName", "RouterFunctionArn", "StarterFunctionName", "StarterFunctionArn", "ReleaserFunctionName",
	} {
		if got[name] == "" {
			t.Errorf("output %s is missing or empty", name)
		}
	}
}

// The state machine invokes the releaser, and the starter starts the state machine. The
// releaser (its properties other than Events, which SAM turns into resources of their own, and
// everything those reference) must not reference the state machine, or CloudFormation finds a
// cycle.
func TestReleaserDoesNotDependOnTheStateMachine(t *testing.T) {
	tpl := loadApp(t)
	if !slices.Contains(references(tpl.byID["SampleStateMachine"].Properties), "ReleaserFunction") {
		t.Fatal("SampleStateMachine does not reference ReleaserFunction: the test no longer tests anything")
	}
	props := maps.Clone(tpl.byID["ReleaserFunction"].Properties)
	delete(props, "Events")
	seen := map[string]bool{}
	queue := references(props)
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		res, ok := tpl.byID[id]
		if !ok || seen[id] {
			continue
		}
		seen[id] = true
		if id == "SampleStateMachine" {
			t.Fatalf("ReleaserFunction depends on SampleStateMachine (through %v)", slices.Sorted(maps.Keys(seen)))
		}
		queue = append(queue, references(res.Properties)...)
	}
}

// Every Allow statement of the stack's policies names actions without wildcards, and resources of
// the stack (or, for X-Ray, which has no resource-level permissions, "*").
func TestPoliciesAreLeastPrivilege(t *testing.T) {
	tpl := loadApp(t)
	var docs []any
	for _, res := range tpl.resources {
		switch res.Type {
		case "AWS::IAM::Role":
			for _, p := range asList(res.Properties["Policies"]) {
				docs = append(docs, asMap(p)["PolicyDocument"])
			}
			if mp := asList(res.Properties["ManagedPolicyArns"]); len(mp) > 0 {
				for _, arn := range mp {
					if _, isRef := asMap(arn)["Ref"]; !isRef {
						t.Errorf("%s attaches managed policy %v, want only the stack's own", res.ID, arn)
					}
				}
			}
		case "AWS::IAM::ManagedPolicy", "AWS::SQS::QueuePolicy":
			docs = append(docs, res.Properties["PolicyDocument"])
		case TypeFunction:
			if _, ok := res.Properties["Role"]; !ok {
				t.Errorf("%s has no Role: SAM would give it AWS managed policies on every resource", res.ID)
			}
		}
	}
	if len(docs) < 4 {
		t.Fatalf("found %d policy documents, want at least 4", len(docs))
	}
	for _, doc := range docs {
		for _, st := range asList(asMap(doc)["Statement"]) {
			m := asMap(st)
			if m["Effect"] != "Allow" {
				continue
			}
			actions := asList(m["Action"])
			if a, ok := m["Action"].(string); ok {
				actions = []any{a}
			}
			xray := true
			for _, a := range actions {
				s, _ := a.(string)
				if strings.Contains(s, "*") {
					t.Errorf("statement %v allows the wildcard action %q", m["Sid"], s)
				}
				if !strings.HasPrefix(s, "xray:") {
					xray = false
				}
			}
			if m["Resource"] == "*" && !xray {
				t.Errorf("statement %v allows %v on every resource", m["Sid"], actions)
			}
		}
	}
}

func TestDescribeAndStartScopes(t *testing.T) {
	extra := "arn:aws:states:us-east-1:123456789012:stateMachine:mine"
	execPrefix := "arn:aws:states:us-east-1:123456789012:execution:"
	tests := []struct {
		name         string
		params       map[string]string
		wantDescribe []any
		wantStart    []any
	}{
		{
			name:         "samples only",
			wantDescribe: []any{execPrefix + stack + "-sample:*", execPrefix + stack + "-bare:*"},
			wantStart:    []any{sampleArn, bareArn},
		},
		{
			name:         "with an extra state machine",
			params:       map[string]string{"ExtraStateMachineArns": extra},
			wantDescribe: []any{execPrefix + stack + "-sample:*", execPrefix + stack + "-bare:*", execPrefix + "mine:*"},
			wantStart:    []any{sampleArn, bareArn, extra},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newLocalStack(t, tt.params)
			describe := statement(t, s.tpl, "DescribeExecutionsPolicy", "DescribeExecutions")
			got, err := s.r.Eval(describe["Resource"])
			if err != nil {
				t.Fatalf("DescribeExecutions Resource: %v", err)
			}
			if !reflect.DeepEqual(got, tt.wantDescribe) {
				t.Errorf("DescribeExecutions Resource = %v, want %v", got, tt.wantDescribe)
			}
			// The sweep (the releaser) lists the running executions of the same state machines the
			// starter starts.
			list := statement(t, s.tpl, "ReleaserRole", "ListRunningExecutions")
			got, err = s.r.Eval(list["Resource"])
			if err != nil {
				t.Fatalf("ListRunningExecutions Resource: %v", err)
			}
			if !reflect.DeepEqual(got, tt.wantStart) {
				t.Errorf("ListRunningExecutions Resource = %v, want %v", got, tt.wantStart)
			}
			start := statement(t, s.tpl, "StarterRole", "StartExecutions")
			got, err = s.r.Eval(start["Resource"])
			if err != nil {
				t.Fatalf("StartExecutions Resource: %v", err)
			}
			if !reflect.DeepEqual(got, tt.wantStart) {
				t.Errorf("StartExecutions Resource = %v, want %v", got, tt.wantStart)
			}
			// The names the policy writes out are the state machines' names.
			for i, id := range []string{"SampleStateMachine", "BareStateMachine"} {
				if sm := s.sms[id]; !strings.HasPrefix(tt.wantDescribe[i].(string), execPrefix+sm.Name+":") {
					t.Errorf("DescribeExecutions names %v, the state machine %s is %s", tt.wantDescribe[i], id, sm.Name)
				}
			}
		})
	}
}

// statement returns the statement sid of a role's inline policies or a managed policy.
func statement(t *testing.T, tpl *Template, id, sid string) map[string]any {
	t.Helper()
	res := tpl.byID[id]
	docs := []any{res.Properties["PolicyDocument"]}
	for _, p := range asList(res.Properties["Policies"]) {
		docs = append(docs, asMap(p)["PolicyDocument"])
	}
	for _, d := range docs {
		for _, st := range asList(asMap(d)["Statement"]) {
			if asMap(st)["Sid"] == sid {
				return asMap(st)
			}
		}
	}
	t.Fatalf("%s has no statement %s", id, sid)
	return nil
}

func timeoutSeconds(t *testing.T, definition string) float64 {
	t.Helper()
	var def map[string]any
	if err := json.Unmarshal([]byte(definition), &def); err != nil {
		t.Fatalf("definition is not JSON: %v", err)
	}
	f, ok := def["TimeoutSeconds"].(float64)
	if !ok {
		t.Fatalf("TimeoutSeconds = %#v, want a number", def["TimeoutSeconds"])
	}
	return f
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// A dead-lettering lease belongs to the release that wrote it for as long as a releaser invocation
// can run; after that another release finishes it. The constant must be the releaser's timeout.
func TestDeadLetterTakeoverIsTheReleasersTimeout(t *testing.T) {
	s := newLocalStack(t, nil)
	releaserTimeout := time.Duration(s.fns["ReleaserFunction"].Timeout) * time.Second
	if releaser.DeadLetterTakeover != releaserTimeout {
		t.Errorf("releaser.DeadLetterTakeover = %s, want the ReleaserFunction timeout %s", releaser.DeadLetterTakeover, releaserTimeout)
	}
	for id, f := range s.fns {
		if d := time.Duration(f.Timeout) * time.Second; d > releaser.DeadLetterTakeover {
			t.Errorf("%s timeout %s > DeadLetterTakeover %s: a slower release could be taken over while it runs", id, d, releaser.DeadLetterTakeover)
		}
	}
}

// The dashboard's SEARCH expressions name the stack's metric namespace in their metric schema. A
// namespace with a non-alphanumeric character (a stack named "sfnlimit-prod") must be in double
// quotes there, or the widget finds nothing (CloudWatch, "CloudWatch search expression syntax").
func TestDashboardSearchQuotesTheNamespace(t *testing.T) {
	const stackName = "sfnlimit-prod"
	tpl := loadApp(t)
	r, err := tpl.Resolver(Env{StackName: stackName, Attr: ownAttr(tpl)})
	if err != nil {
		t.Fatal(err)
	}
	dash, ok := tpl.byID["Dashboard"]
	if !ok {
		t.Fatal("template.yaml has no Dashboard")
	}
	body, err := r.Eval(dash.Properties["DashboardBody"])
	if err != nil {
		t.Fatalf("resolve DashboardBody: %v", err)
	}
	text, _ := body.(string)
	if !json.Valid([]byte(text)) {
		t.Fatalf("DashboardBody is not JSON:\n%s", text)
	}
	schema := regexp.MustCompile(`SEARCH\('\{([^,}]*)`)
	found := schema.FindAllStringSubmatch(text, -1)
	if len(found) == 0 {
		t.Fatal("the dashboard has no SEARCH expression: the test no longer checks its case")
	}
	for _, m := range found {
		// The body is JSON: a double quote inside its strings is written \".
		if got := strings.ReplaceAll(m[1], `\"`, `"`); got != `"`+stackName+`"` {
			t.Errorf("SEARCH metric schema names namespace %s, want %q (quoted)", got, stackName)
		}
	}
}

// The workflows' ARNs take the stack's partition: arn:aws: would not resolve in aws-cn or
// aws-us-gov (the Lambda integration there is arn:aws-cn:states:::lambda:invoke). The bare
// workflow has no task, and so no ARN.
func TestSampleDefinitionUsesThePartition(t *testing.T) {
	wantTasks := map[string]bool{"SampleStateMachine": true, "BareStateMachine": false}
	for _, file := range []string{"sample.asl.json", "bare.asl.json"} {
		raw, err := os.ReadFile(filepath.Join(repoRoot, "statemachine", file))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), `"arn:aws:`) {
			t.Errorf("%s hard-codes the aws partition (arn:aws:)", file)
		}
	}
	tpl := loadApp(t)
	r, err := tpl.Resolver(Env{StackName: stack, Partition: "aws-us-gov", Attr: ownAttr(tpl)})
	if err != nil {
		t.Fatal(err)
	}
	for _, sm := range tpl.StateMachines() {
		cfg, err := r.StateMachine(sm)
		if err != nil {
			t.Fatalf("StateMachine(%s): %v", sm.LogicalID, err)
		}
		var def struct {
			States map[string]struct{ Type, Resource string }
		}
		if err := json.Unmarshal([]byte(cfg.Definition), &def); err != nil {
			t.Fatalf("%s definition is not JSON: %v", sm.LogicalID, err)
		}
		tasks := 0
		for name, st := range def.States {
			if st.Type != "Task" {
				continue
			}
			tasks++
			if st.Resource != "arn:aws-us-gov:states:::lambda:invoke" {
				t.Errorf("%s state %s Resource = %q in partition aws-us-gov, want arn:aws-us-gov:states:::lambda:invoke", sm.LogicalID, name, st.Resource)
			}
		}
		if want, known := wantTasks[sm.LogicalID]; !known || want != (tasks > 0) {
			t.Errorf("%s has %d Task states, want some: %v (known: %v)", sm.LogicalID, tasks, want, known)
		}
	}
}

// Every value the template lets through for a number or a choice reaches the functions as an
// environment they accept at cold start: each Number parameter at its MinValue and MaxValue, each
// AllowedValue, with the other parameters at their defaults. (The one relation no constraint can
// state, DefaultLimit plus the TypeLimits adding up to the FIFO in-flight quota, is checked at cold
// start and in internal/lambda/config; DefaultLimit's maximum is tried without TypeLimits.)
func TestParameterBoundsPassColdStart(t *testing.T) {
	clients := app.NewClients(aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	builders := map[string]func(app.Env) error{
		"RouterFunction":   func(e app.Env) error { _, err := app.Router(e, clients, log); return err },
		"StarterFunction":  func(e app.Env) error { _, err := app.Starter(e, clients, log); return err },
		"ReleaserFunction": func(e app.Env) error { _, err := app.Releaser(e, clients, log); return err },
	}
	var cases []map[string]string
	for _, p := range loadApp(t).Parameters() {
		for _, b := range []*float64{p.MinValue, p.MaxValue} {
			if b != nil {
				cases = append(cases, map[string]string{p.Name: strconv.FormatFloat(*b, 'f', -1, 64)})
			}
		}
		for _, v := range p.AllowedValues {
			cases = append(cases, map[string]string{p.Name: v})
		}
	}
	for _, params := range cases {
		if _, ok := params["DefaultLimit"]; ok {
			params["TypeLimits"] = ""
		}
		s := newLocalStack(t, params)
		for id, build := range builders {
			env := s.fns[id].Environment
			if err := build(func(k string) string { return env[k] }); err != nil {
				t.Errorf("%v: %s refuses its environment at cold start: %v", params, id, err)
			}
		}
	}
	if len(cases) < 10 {
		t.Errorf("only %d bounds tried: the template lost its constraints?", len(cases))
	}
}

// The outcome of the work survives a failed release: when the Release step (outcome succeeded)
// fails after its retries (a throttled releaser), its Catch ends the execution SUCCEEDED, which
// the sweep then releases as a success. Without the Catch the execution ended FAILED and the
// status event retried or dead-lettered a job whose work had succeeded.
func TestReleaseFailureKeepsTheSuccess(t *testing.T) {
	s := newLocalStack(t, nil)
	var def struct {
		States map[string]struct {
			Type  string
			Next  string
			End   bool
			Catch []struct {
				ErrorEquals []string
				Next        string
			}
		}
	}
	if err := json.Unmarshal([]byte(s.sms["SampleStateMachine"].Definition), &def); err != nil {
		t.Fatal(err)
	}
	rel, ok := def.States["Release"]
	if !ok || rel.Type != "Task" {
		t.Fatalf("no Release Task state: %+v", def.States)
	}
	if len(rel.Catch) == 0 {
		t.Fatal("Release has no Catch: a release that fails after its retries fails the execution of a succeeded job")
	}
	last := rel.Catch[len(rel.Catch)-1]
	if !slices.Equal(last.ErrorEquals, []string{"States.ALL"}) {
		t.Errorf("Release's last Catch catches %v, want States.ALL", last.ErrorEquals)
	}
	if next := def.States[last.Next]; next.Type != "Succeed" {
		t.Errorf("Release's Catch goes to %s (%s), want a Succeed state", last.Next, next.Type)
	}
	// The sweep is what releases such an execution: it must treat SUCCEEDED as a success.
	if o, closed := releaser.OutcomeOf("SUCCEEDED"); !closed || o != releaser.Succeeded {
		t.Errorf("releaser.OutcomeOf(SUCCEEDED) = %v, %v; want succeeded, closed", o, closed)
	}
}

// The releaser has reserved concurrency, so a burst of other functions in the account cannot starve
// the releases (a throttled Release step ends in the sweep, minutes later). 0 reserves none: an
// account must keep 100 unreserved, which a small account's quota cannot.
func TestReleaserReservedConcurrencyIsOptional(t *testing.T) {
	tpl := loadApp(t)
	p, ok := tpl.Parameter("ReleaserReservedConcurrency")
	if !ok {
		t.Fatal("template.yaml has no ReleaserReservedConcurrency parameter")
	}
	for _, tt := range []struct {
		give string
		want any
	}{{"50", "50"}, {"7", "7"}, {"0", nil}} { // nil: AWS::NoValue, the property is dropped
		r, err := tpl.Resolver(Env{Parameters: map[string]string{"ReleaserReservedConcurrency": tt.give}, Attr: ownAttr(tpl)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Eval(tpl.byID["ReleaserFunction"].Properties["ReservedConcurrentExecutions"])
		if err != nil {
			t.Fatal(err)
		}
		if s, isString := got.(string); isString {
			got = s
		}
		if got != tt.want {
			t.Errorf("ReleaserReservedConcurrency=%s: ReservedConcurrentExecutions = %#v, want %#v", tt.give, got, tt.want)
		}
	}
	// Lambda keeps 100 of an account's concurrency unreserved, and new accounts may have a quota
	// of 10 or 50: any default reservation would fail their first deploy.
	if p.Default != "0" {
		t.Errorf("ReleaserReservedConcurrency default %q, want 0 (no reservation: a reservation fails the deploy on accounts with a low concurrency quota)", p.Default)
	}
}

// The router refuses a job whose batch is not open at its BatchWaitReceives-th delivery, with a
// reason: before the general queue's redrive policy would move it to the dead-letter queue without one.
func TestBatchWaitEndsBeforeTheGeneralQueuesRedrive(t *testing.T) {
	s := newLocalStack(t, nil)
	var rp struct {
		MaxReceiveCount int `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s.queues["GeneralQueue"].Attributes["RedrivePolicy"]), &rp); err != nil || rp.MaxReceiveCount == 0 {
		t.Fatalf("GeneralQueue RedrivePolicy %q: %v", s.queues["GeneralQueue"].Attributes["RedrivePolicy"], err)
	}
	if router.BatchWaitReceives >= rp.MaxReceiveCount {
		t.Errorf("router.BatchWaitReceives = %d, want below the general queue's maxReceiveCount %d", router.BatchWaitReceives, rp.MaxReceiveCount)
	}
}

// Dashboards are global to an account, not per region: the same stack name deployed in a second
// region must not take (and, on an update, overwrite) the first one's dashboard. The name fits
// CloudWatch's rule (1-255 of A-Z a-z 0-9 - _) for every stack name CloudFormation allows, and the
// DashboardUrl output opens the dashboard of that name.
func TestDashboardNameIsUniqueAcrossRegions(t *testing.T) {
	tpl := loadApp(t)
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	longest := "s" + strings.Repeat("x-", 63) + "y" // 128 characters, CloudFormation's longest stack name
	names := map[string]string{}
	for _, tt := range []struct{ stack, region string }{
		{"sfnlimit", "us-east-1"}, {"sfnlimit", "eu-west-1"}, {longest, "ap-southeast-2"},
	} {
		r, err := tpl.Resolver(Env{StackName: tt.stack, Region: tt.region, Attr: ownAttr(tpl)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Eval(tpl.byID["Dashboard"].Properties["DashboardName"])
		if err != nil {
			t.Fatal(err)
		}
		name, _ := got.(string)
		if !valid.MatchString(name) {
			t.Errorf("stack %s in %s: DashboardName %q breaks CloudWatch's rule (1-255 of A-Z a-z 0-9 - _)", tt.stack, tt.region, name)
		}
		if other, ok := names[name]; ok {
			t.Errorf("stack %s in %s: DashboardName %q is also the dashboard of %s", tt.stack, tt.region, name, other)
		}
		names[name] = tt.stack + " in " + tt.region
		outs, err := r.Outputs()
		if err != nil {
			t.Fatal(err)
		}
		if u := outs["DashboardUrl"]; !strings.HasSuffix(u, "#dashboards:name="+name) {
			t.Errorf("stack %s in %s: DashboardUrl %q does not open dashboard %q", tt.stack, tt.region, u, name)
		}
	}
}

// A job's lanes message lives for the lanes queue's retention, counted from when the router sent
// it: a workflow allowed to run longer loses its lane (the message expires) while it still runs.
func TestExecutionTimeoutFitsTheLanesQueueRetention(t *testing.T) {
	tpl := loadApp(t)
	p, ok := tpl.Parameter("ExecutionTimeoutSeconds")
	if !ok || p.MaxValue == nil {
		t.Fatal("template.yaml: ExecutionTimeoutSeconds has no MaxValue")
	}
	lanes, ok := tpl.byID["LanesQueue"]
	if !ok {
		t.Fatal("template.yaml has no LanesQueue")
	}
	retention, err := strconv.ParseFloat(strings.TrimSpace(fmt.Sprint(lanes.Properties["MessageRetentionPeriod"])), 64)
	if err != nil {
		t.Fatalf("LanesQueue MessageRetentionPeriod %v: %v", lanes.Properties["MessageRetentionPeriod"], err)
	}
	if *p.MaxValue > retention {
		t.Errorf("ExecutionTimeoutSeconds MaxValue %v, want at most the lanes queue's retention %v s", *p.MaxValue, retention)
	}
}
