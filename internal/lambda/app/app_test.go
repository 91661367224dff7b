package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
)

const (
	lanesURL   = "http://127.0.0.1:1/123456789012/sfnlimit-LanesQueue.fifo"
	dlqURL     = "http://127.0.0.1:1/123456789012/sfnlimit-DeadLetterQueue"
	tableName  = "sfnlimit-Table"
	sampleArn  = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample"
	repoRelDir = "../../.."
)

// clients points at a closed loopback port: building handlers must make no call.
func clients() app.Clients { return clientsAt("http://127.0.0.1:1") }

func clientsAt(endpoint string) app.Clients {
	return app.NewClients(aws.Config{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fullEnv is an environment in which every builder succeeds.
func fullEnv() map[string]string {
	return map[string]string{
		"FIFO_QUEUE_URL":    lanesURL,
		"DLQ_URL":           dlqURL,
		"TABLE_NAME":        tableName,
		"STATE_MACHINE_ARN": sampleArn,
		"TYPE_LIMITS":       "demo=5",
		"ROUTER_ROLE_ID":    routerRoleID,
	}
}

// routerRoleID stands for the router's role's unique id (IAM's "AROA…" form).
const routerRoleID = "AROAEXAMPLEROUTERROLE"

func envOf(m map[string]string) app.Env { return func(k string) string { return m[k] } }

// with returns a copy of base with changes applied; an empty value is set as empty.
func with(base map[string]string, changes map[string]string) map[string]string {
	out := maps.Clone(base)
	maps.Copy(out, changes)
	return out
}

// builder builds one function's handler and returns it (as any) or the error.
type builder struct {
	name  string
	build func(app.Env) (any, error)
}

var builders = []builder{
	{"router", func(e app.Env) (any, error) { return app.Router(e, clients(), discard()) }},
	{"starter", func(e app.Env) (any, error) { return app.Starter(e, clients(), discard()) }},
	{"releaser", func(e app.Env) (any, error) { return app.Releaser(e, clients(), discard()) }},
}

func builderNamed(t *testing.T, name string) builder {
	t.Helper()
	for _, b := range builders {
		if b.name == name {
			return b
		}
	}
	t.Fatalf("no builder for function code %q (functions/%s)", name, name)
	return builder{}
}

func TestBuildersWithFullEnvironment(t *testing.T) {
	// Handlers are built at cold start: building them must call no AWS API (a failing or slow
	// dependency would stop the function from starting at all).
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	c := clientsAt(srv.URL)
	build := map[string]func(app.Env) (any, error){
		"router":   func(e app.Env) (any, error) { return app.Router(e, c, discard()) },
		"starter":  func(e app.Env) (any, error) { return app.Starter(e, c, discard()) },
		"releaser": func(e app.Env) (any, error) { return app.Releaser(e, c, discard()) },
	}
	for _, name := range slices.Sorted(maps.Keys(build)) {
		t.Run(name, func(t *testing.T) {
			got, err := build[name](envOf(fullEnv()))
			if err != nil {
				t.Fatalf("%s(full environment) error: %v", name, err)
			}
			if got == nil {
				t.Fatalf("%s(full environment) = nil, want a handler", name)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("AWS calls while building the handlers = %d, want 0", n)
	}
	r, err := app.Router(envOf(fullEnv()), clients(), discard())
	if err != nil {
		t.Fatal(err)
	}
	if r.Lanesq == nil || r.DLQ == nil || r.Lanes == nil || r.Config == nil || r.Log == nil || r.Self != routerRoleID {
		t.Errorf("Router(full environment) = %+v, want every dependency set and Self %s", r, routerRoleID)
	}
	s, err := app.Starter(envOf(fullEnv()), clients(), discard())
	if err != nil {
		t.Fatal(err)
	}
	if s.QueueURL != lanesURL || s.Leases == nil || s.SFN == nil || s.Queue == nil || s.DLQ == nil || s.Releaser == nil || s.Lanes == nil || s.Config == nil {
		t.Errorf("Starter(full environment) = %+v, want QueueURL %q and every dependency set", s, lanesURL)
	}
	h, err := app.Releaser(envOf(fullEnv()), clients(), discard())
	if err != nil {
		t.Fatal(err)
	}
	if h.Service == nil || h.Service.QueueURL != lanesURL || h.Leases == nil || h.Service.SFN == nil || h.Service.DLQ == nil || h.SweepConcurrency < 1 {
		t.Errorf("Releaser(full environment) = %+v, service %+v, want QueueURL %q and every dependency set", h, h.Service, lanesURL)
	}
}

func TestBuildersRequireTheirVariables(t *testing.T) {
	tests := []struct {
		name      string
		builder   string
		give      string // the variable left out
		giveBlank bool   // set to spaces instead of left out
		wantErr   bool
	}{
		{name: "router without lanes queue", builder: "router", give: "FIFO_QUEUE_URL", wantErr: true},
		{name: "router without dead-letter queue", builder: "router", give: "DLQ_URL", wantErr: true},
		{name: "router without table", builder: "router", give: "TABLE_NAME", wantErr: true},
		{name: "router with blank table", builder: "router", give: "TABLE_NAME", giveBlank: true, wantErr: true},
		{name: "router needs no state machine", builder: "router", give: "STATE_MACHINE_ARN"},
		{name: "router without its role id", builder: "router", give: "ROUTER_ROLE_ID", wantErr: true},
		{name: "router with a blank role id", builder: "router", give: "ROUTER_ROLE_ID", giveBlank: true, wantErr: true},
		{name: "starter without lanes queue", builder: "starter", give: "FIFO_QUEUE_URL", wantErr: true},
		{name: "starter with blank lanes queue", builder: "starter", give: "FIFO_QUEUE_URL", giveBlank: true, wantErr: true},
		{name: "starter without dead-letter queue", builder: "starter", give: "DLQ_URL", wantErr: true},
		{name: "starter without table", builder: "starter", give: "TABLE_NAME", wantErr: true},
		{name: "starter without state machine", builder: "starter", give: "STATE_MACHINE_ARN", wantErr: true},
		{name: "starter with blank state machine", builder: "starter", give: "STATE_MACHINE_ARN", giveBlank: true, wantErr: true},
		{name: "releaser without lanes queue", builder: "releaser", give: "FIFO_QUEUE_URL", wantErr: true},
		{name: "releaser without dead-letter queue", builder: "releaser", give: "DLQ_URL", wantErr: true},
		{name: "releaser without table", builder: "releaser", give: "TABLE_NAME", wantErr: true},
		{name: "releaser needs no state machine", builder: "releaser", give: "STATE_MACHINE_ARN"},
		{name: "releaser needs no limits", builder: "releaser", give: "TYPE_LIMITS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := fullEnv()
			if tt.giveBlank {
				env[tt.give] = "  \t"
			} else {
				delete(env, tt.give)
			}
			got, err := builderNamed(t, tt.builder).build(envOf(env))
			if !tt.wantErr {
				if err != nil || got == nil {
					t.Fatalf("%s(without %s) = %v, %v, want a handler", tt.builder, tt.give, got, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s(without %s) error = nil, want an error naming %s", tt.builder, tt.give, tt.give)
			}
			if !strings.Contains(err.Error(), tt.give) {
				t.Errorf("%s(without %s) error = %q, want it to name %s", tt.builder, tt.give, err, tt.give)
			}
		})
	}
}

func TestBuildersCheckLimits(t *testing.T) {
	tests := []struct {
		name       string
		give       map[string]string
		wantLimits map[string]int
		wantErr    string // substring of the error; "" for success
	}{
		{name: "one type", give: map[string]string{"TYPE_LIMITS": "demo=5"}, wantLimits: map[string]int{"demo": 5}},
		{name: "several types", give: map[string]string{"TYPE_LIMITS": "payments=50,reports=5"}, wantLimits: map[string]int{"payments": 50, "reports": 5}},
		{name: "spaces refused, as the template's pattern refuses them", give: map[string]string{"TYPE_LIMITS": " payments=50 , reports=5 "}, wantErr: "TYPE_LIMITS"},
		{name: "none, fallback only", give: map[string]string{"TYPE_LIMITS": "", "DEFAULT_LIMIT": "3"}, wantLimits: map[string]int{}},
		{name: "one under the quota", give: map[string]string{"TYPE_LIMITS": "big=119999"}, wantLimits: map[string]int{"big": 119999}},
		{name: "zero limit", give: map[string]string{"TYPE_LIMITS": "a=0"}, wantErr: "TYPE_LIMITS"},
		{name: "negative limit", give: map[string]string{"TYPE_LIMITS": "a=-1"}, wantErr: "TYPE_LIMITS"},
		{name: "type with a dash", give: map[string]string{"TYPE_LIMITS": "a-b=1"}, wantErr: "TYPE_LIMITS"},
		{name: "no number", give: map[string]string{"TYPE_LIMITS": "a"}, wantErr: "TYPE_LIMITS"},
		{name: "not a number", give: map[string]string{"TYPE_LIMITS": "a=x"}, wantErr: "TYPE_LIMITS"},
		{name: "type twice", give: map[string]string{"TYPE_LIMITS": "a=1,a=2"}, wantErr: "TYPE_LIMITS"},
		{name: "one type at the quota", give: map[string]string{"TYPE_LIMITS": "a=120000"}, wantErr: "120000"},
		{name: "sum at the quota", give: map[string]string{"TYPE_LIMITS": "a=60000,b=60000"}, wantErr: "120000"},
		{name: "sum over the quota", give: map[string]string{"TYPE_LIMITS": "a=60000,b=60001"}, wantErr: "120000"},
		{name: "fallback pushes the sum over", give: map[string]string{"TYPE_LIMITS": "a=100000", "DEFAULT_LIMIT": "20000"}, wantErr: "120000"},
		{name: "negative fallback", give: map[string]string{"DEFAULT_LIMIT": "-1"}, wantErr: "DEFAULT_LIMIT"},
		{name: "fallback not a number", give: map[string]string{"DEFAULT_LIMIT": "many"}, wantErr: "DEFAULT_LIMIT"},
		{name: "zero attempts", give: map[string]string{"DEFAULT_MAX_ATTEMPTS": "0"}, wantErr: "DEFAULT_MAX_ATTEMPTS"},
		{name: "type attempts zero", give: map[string]string{"TYPE_MAX_ATTEMPTS": "demo=0"}, wantErr: "TYPE_MAX_ATTEMPTS"},
		{name: "cache not a number", give: map[string]string{"CONFIG_CACHE_SECONDS": "soon"}, wantErr: "CONFIG_CACHE_SECONDS"},
		// CloudFormation's Number parameters hand the value over as written.
		{name: "whole numbers written with decimals", give: map[string]string{"DEFAULT_MAX_ATTEMPTS": "3.0", "DEFAULT_LIMIT": "2.00", "CONFIG_CACHE_SECONDS": "30.0"}, wantLimits: map[string]int{"demo": 5}},
		{name: "a fraction", give: map[string]string{"DEFAULT_MAX_ATTEMPTS": "2.5"}, wantErr: "DEFAULT_MAX_ATTEMPTS"},
		{name: "attempts over the template's bound", give: map[string]string{"DEFAULT_MAX_ATTEMPTS": "101"}, wantErr: "DEFAULT_MAX_ATTEMPTS"},
		{name: "backlog written with decimals", give: map[string]string{"MAX_LANES_BACKLOG": "50000.0", "GENERAL_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/general"}, wantLimits: map[string]int{"demo": 5}},
		{name: "batch retention written with decimals", give: map[string]string{"BATCH_RETENTION_DAYS": "30.0"}, wantLimits: map[string]int{"demo": 5}},
		{name: "batch retention zero", give: map[string]string{"BATCH_RETENTION_DAYS": "0"}, wantErr: "BATCH_RETENTION_DAYS"},
	}
	for _, b := range []string{"router", "starter"} {
		for _, tt := range tests {
			t.Run(b+"/"+tt.name, func(t *testing.T) {
				got, err := builderNamed(t, b).build(envOf(with(fullEnv(), tt.give)))
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("%s(%v) error = %v, want an error containing %q", b, tt.give, err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatalf("%s(%v) error: %v", b, tt.give, err)
				}
				r := resolverOf(t, got)
				if got := r.Defaults().Limits; !maps.Equal(got, tt.wantLimits) {
					t.Errorf("%s(%v) limits = %v, want %v", b, tt.give, got, tt.wantLimits)
				}
			})
		}
	}
}

func TestBuildersApplyTypeSettings(t *testing.T) {
	env := with(fullEnv(), map[string]string{
		"TYPE_LIMITS":          "payments=50,reports=5",
		"DEFAULT_LIMIT":        "7",
		"DEFAULT_MAX_ATTEMPTS": "4",
		"TYPE_MAX_ATTEMPTS":    "payments=9",
	})
	want := config.Defaults{
		Limits:             map[string]int{"payments": 50, "reports": 5},
		FallbackLimit:      7,
		MaxAttempts:        map[string]int{"payments": 9},
		DefaultMaxAttempts: 4,
		StateMachineArn:    sampleArn,
	}
	for _, b := range builders {
		t.Run(b.name, func(t *testing.T) {
			h, err := b.build(envOf(env))
			if err != nil {
				t.Fatalf("%s error: %v", b.name, err)
			}
			got := resolverOf(t, h).Defaults()
			if !maps.Equal(got.Limits, want.Limits) || got.FallbackLimit != want.FallbackLimit ||
				!maps.Equal(got.MaxAttempts, want.MaxAttempts) || got.DefaultMaxAttempts != want.DefaultMaxAttempts ||
				got.StateMachineArn != want.StateMachineArn {
				t.Errorf("%s defaults = %+v, want %+v", b.name, got, want)
			}
		})
	}
}

// resolverOf returns the *config.Resolver a built handler resolves job types with.
func resolverOf(t *testing.T, h any) *config.Resolver {
	t.Helper()
	var c any
	switch h := h.(type) {
	case *router.Router:
		c = h.Config
	case *starter.Starter:
		c = h.Config
	case *releaser.Handler:
		c = h.Service.Config
	default:
		t.Fatalf("resolverOf(%T): not a handler of package app", h)
	}
	r, ok := c.(*config.Resolver)
	if !ok {
		t.Fatalf("config of %T = %T, want *config.Resolver", h, c)
	}
	return r
}

func TestLaneStrategy(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr bool
	}{
		{name: "unset is random", give: ""},
		{name: "random", give: "random"},
		{name: "unknown", give: "roundrobin", wantErr: true},
		{name: "typo", give: "randon", wantErr: true},
	}
	for _, b := range []string{"router", "starter"} {
		for _, tt := range tests {
			t.Run(b+"/"+tt.name, func(t *testing.T) {
				h, err := builderNamed(t, b).build(envOf(with(fullEnv(), map[string]string{"LANE_STRATEGY": tt.give})))
				if tt.wantErr {
					if err == nil || !strings.Contains(err.Error(), tt.give) {
						t.Fatalf("%s(LANE_STRATEGY=%q) error = %v, want an error naming %q", b, tt.give, err, tt.give)
					}
					return
				}
				if err != nil {
					t.Fatalf("%s(LANE_STRATEGY=%q) error: %v", b, tt.give, err)
				}
				var ch lane.Chooser
				switch h := h.(type) {
				case *router.Router:
					ch = h.Lanes
				case *starter.Starter:
					ch = h.Lanes
				}
				for i := range 50 {
					j := job.Job{Type: "demo", ID: fmt.Sprintf("job-%d", i)}
					if got, err := ch.Choose(context.Background(), j, 5); err != nil || got < 1 || got > 5 {
						t.Fatalf("%s lanes Choose(%s, 5) = %d, %v, want 1..5", b, j.ID, got, err)
					}
				}
			})
		}
	}
	// The releaser reads the same configuration, strategy included, and refuses the same mistakes.
	if _, err := app.Releaser(envOf(with(fullEnv(), map[string]string{"LANE_STRATEGY": "roundrobin"})), clients(), discard()); err == nil || !strings.Contains(err.Error(), "roundrobin") {
		t.Errorf("Releaser(LANE_STRATEGY=roundrobin) error: %v, want one naming the strategy", err)
	}
}

func TestStarterTimings(t *testing.T) {
	tests := []struct {
		name           string
		give           map[string]string
		wantRetry      time.Duration
		wantStaleAfter time.Duration
		wantErr        string
	}{
		{name: "defaults", give: nil, wantRetry: 5 * time.Second, wantStaleAfter: 1350 * time.Second},
		{name: "retry set", give: map[string]string{"START_RETRY_SECONDS": "7"}, wantRetry: 7 * time.Second, wantStaleAfter: 1350 * time.Second},
		{name: "retry zero", give: map[string]string{"START_RETRY_SECONDS": "0"}, wantRetry: 0, wantStaleAfter: 1350 * time.Second},
		{name: "retry with spaces", give: map[string]string{"START_RETRY_SECONDS": " 9 "}, wantRetry: 9 * time.Second, wantStaleAfter: 1350 * time.Second},
		{name: "visibility 60", give: map[string]string{"FIFO_VISIBILITY_TIMEOUT": "60"}, wantRetry: 5 * time.Second, wantStaleAfter: 90 * time.Second},
		{name: "visibility odd", give: map[string]string{"FIFO_VISIBILITY_TIMEOUT": "31"}, wantRetry: 5 * time.Second, wantStaleAfter: 46500 * time.Millisecond},
		{name: "visibility 12 hours", give: map[string]string{"FIFO_VISIBILITY_TIMEOUT": "43200"}, wantRetry: 5 * time.Second, wantStaleAfter: 18 * time.Hour},
		{name: "retry negative", give: map[string]string{"START_RETRY_SECONDS": "-1"}, wantErr: "START_RETRY_SECONDS"},
		{name: "retry fraction", give: map[string]string{"START_RETRY_SECONDS": "1.5"}, wantErr: "START_RETRY_SECONDS"},
		{name: "visibility not a number", give: map[string]string{"FIFO_VISIBILITY_TIMEOUT": "15m"}, wantErr: "FIFO_VISIBILITY_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := app.Starter(envOf(with(fullEnv(), tt.give)), clients(), discard())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Starter(%v) error = %v, want an error naming %s", tt.give, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Starter(%v) error: %v", tt.give, err)
			}
			if s.RetryDelay != tt.wantRetry {
				t.Errorf("Starter(%v).RetryDelay = %v, want %v", tt.give, s.RetryDelay, tt.wantRetry)
			}
			if s.StaleAfter != tt.wantStaleAfter {
				t.Errorf("Starter(%v).StaleAfter = %v, want %v (1.5 x FIFO_VISIBILITY_TIMEOUT)", tt.give, s.StaleAfter, tt.wantStaleAfter)
			}
		})
	}
}

func TestReleaserSweepSettings(t *testing.T) {
	tests := []struct {
		name             string
		give             map[string]string
		wantMinAge       time.Duration
		wantMaxDescribes int
		wantErr          string
	}{
		{name: "defaults", wantMinAge: 60 * time.Second, wantMaxDescribes: 500},
		{name: "min age set", give: map[string]string{"SWEEP_MIN_AGE_SECONDS": "15"}, wantMinAge: 15 * time.Second, wantMaxDescribes: 500},
		{name: "min age zero", give: map[string]string{"SWEEP_MIN_AGE_SECONDS": "0"}, wantMinAge: 0, wantMaxDescribes: 500},
		{name: "max describes set", give: map[string]string{"SWEEP_MAX_DESCRIBES": "42"}, wantMinAge: 60 * time.Second, wantMaxDescribes: 42},
		{name: "both set", give: map[string]string{"SWEEP_MIN_AGE_SECONDS": "86400", "SWEEP_MAX_DESCRIBES": "10000"}, wantMinAge: 24 * time.Hour, wantMaxDescribes: 10000},
		{name: "min age negative", give: map[string]string{"SWEEP_MIN_AGE_SECONDS": "-5"}, wantErr: "SWEEP_MIN_AGE_SECONDS"},
		{name: "max describes not a number", give: map[string]string{"SWEEP_MAX_DESCRIBES": "lots"}, wantErr: "SWEEP_MAX_DESCRIBES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := app.Releaser(envOf(with(fullEnv(), tt.give)), clients(), discard())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Releaser(%v) error = %v, want an error naming %s", tt.give, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Releaser(%v) error: %v", tt.give, err)
			}
			if h.SweepMinAge != tt.wantMinAge || h.SweepMaxDescribes != tt.wantMaxDescribes {
				t.Errorf("Releaser(%v) SweepMinAge, SweepMaxDescribes = %v, %d, want %v, %d", tt.give, h.SweepMinAge, h.SweepMaxDescribes, tt.wantMinAge, tt.wantMaxDescribes)
			}
		})
	}
}

// recorder is an Env over a map that records every variable read.
type recorder struct {
	env  map[string]string
	mu   sync.Mutex
	read map[string]bool
}

func (r *recorder) get(k string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.read == nil {
		r.read = map[string]bool{}
	}
	r.read[k] = true
	return r.env[k]
}

// readButNotSet lists, per function, the variables its builder reads that template.yaml does not
// set for it, each falling back to a default the function does not act on.
var readButNotSet = map[string][]string{
	// config.FromEnv reads every type setting for every function; the router neither starts
	// executions nor counts attempts.
	"router": {"DEFAULT_MAX_ATTEMPTS", "STATE_MACHINE_ARN", "TYPE_MAX_ATTEMPTS"},
	// The starter builds a releaser service for jobs whose executions ended without a release; it
	// never sweeps.
	"starter": {"SWEEP_MAX_DESCRIBES", "SWEEP_MIN_AGE_SECONDS"},
	// The releaser never starts an execution.
	"releaser": {"STATE_MACHINE_ARN"},
}

// resolveTemplate resolves template.yaml with params the way the local stack does, with made-up
// attributes for the resources, and returns each function's configuration by its code directory's
// name (router, starter, releaser).
func resolveTemplate(t *testing.T, params map[string]string) map[string]cfntemplate.FunctionConfig {
	t.Helper()
	tpl, err := cfntemplate.Load(filepath.Join(repoRelDir, "template.yaml"))
	if err != nil {
		t.Fatalf("Load(template.yaml) error: %v", err)
	}
	attrs := cfntemplate.Attributes{}
	r, err := tpl.Resolver(cfntemplate.Env{Parameters: params, Attr: attrs.Lookup})
	if err != nil {
		t.Fatalf("Resolver(%v) error: %v", params, err)
	}
	const arnPrefix = "arn:aws:%s:us-east-1:123456789012:%s"
	for _, q := range tpl.Queues() {
		cfg, err := r.Queue(q)
		if err != nil {
			t.Fatalf("Queue(%s) error: %v", q.LogicalID, err)
		}
		attrs.Set(q.LogicalID, cfntemplate.Ref, "http://127.0.0.1:1/123456789012/"+cfg.Name)
		attrs.Set(q.LogicalID, "Arn", fmt.Sprintf(arnPrefix, "sqs", cfg.Name))
		attrs.Set(q.LogicalID, "QueueName", cfg.Name)
	}
	tb, err := tpl.Table()
	if err != nil {
		t.Fatalf("Table() error: %v", err)
	}
	// The router trusts held-job attributes only from its own role (ROUTER_ROLE_ID).
	attrs.Set("RouterRole", "RoleId", routerRoleID)
	attrs.Set(tb.LogicalID, cfntemplate.Ref, "sfnlimit-"+tb.LogicalID)
	attrs.Set(tb.LogicalID, "Arn", fmt.Sprintf(arnPrefix, "dynamodb", "table/sfnlimit-"+tb.LogicalID))
	for _, f := range tpl.Functions() {
		attrs.Set(f.LogicalID, cfntemplate.Ref, "sfnlimit-"+f.LogicalID)
		attrs.Set(f.LogicalID, "Arn", fmt.Sprintf(arnPrefix, "lambda", "function:sfnlimit-"+f.LogicalID))
	}
	for _, sm := range tpl.StateMachines() {
		arn := fmt.Sprintf(arnPrefix, "states", "stateMachine:sfnlimit-"+sm.LogicalID)
		attrs.Set(sm.LogicalID, cfntemplate.Ref, arn)
		attrs.Set(sm.LogicalID, "Arn", arn)
		attrs.Set(sm.LogicalID, "Name", "sfnlimit-"+sm.LogicalID)
	}
	out := map[string]cfntemplate.FunctionConfig{}
	for _, f := range tpl.Functions() {
		cfg, err := r.Function(f)
		if err != nil {
			t.Fatalf("Function(%s) error: %v", f.LogicalID, err)
		}
		out[filepath.Base(filepath.Clean(cfg.CodeDir))] = cfg
	}
	return out
}

// envNamesInSource returns the environment variable names written as whole string literals in the
// files that read the functions' environment.
func envNamesInSource(t *testing.T) []string {
	t.Helper()
	lit := regexp.MustCompile(`"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)"`) // POOLS too
	seen := map[string]bool{}
	for _, f := range []string{"app.go", filepath.Join(repoRelDir, "internal", "lambda", "config", "env.go")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// TestTemplateEnvironmentMatchesCode holds template.yaml and the code to each other: each function
// builds from exactly the environment the template gives it, reads every variable the template sets,
// and reads nothing unset but what it can do without.
func TestTemplateEnvironmentMatchesCode(t *testing.T) {
	paramSets := []struct {
		name string
		give map[string]string
	}{
		{name: "defaults"},
		{name: "custom", give: map[string]string{
			"TypeLimits":            "payments=50,reports=5",
			"TypeMaxAttempts":       "payments=5",
			"DefaultLimit":          "10",
			"DefaultMaxAttempts":    "4",
			"ConfigCacheSeconds":    "0",
			"FifoVisibilityTimeout": "30",
			"StartRetrySeconds":     "0",
			"SweepMinAgeSeconds":    "0",
			"SweepMaxDescribes":     "1",
			"ExtraStateMachineArns": "arn:aws:states:us-east-1:123456789012:stateMachine:mine",
		}},
	}
	for _, ps := range paramSets {
		t.Run(ps.name, func(t *testing.T) {
			fns := resolveTemplate(t, ps.give)
			if got, want := slices.Sorted(maps.Keys(fns)), []string{"releaser", "router", "starter"}; !slices.Equal(got, want) {
				t.Fatalf("template functions' code = %v, want %v", got, want)
			}
			readByAny := map[string]bool{}
			for name, cfg := range fns {
				t.Run(name, func(t *testing.T) {
					rec := &recorder{env: cfg.Environment}
					if _, err := builderNamed(t, name).build(rec.get); err != nil {
						t.Fatalf("%s with %s's environment %v error: %v", name, cfg.LogicalID, cfg.Environment, err)
					}
					maps.Copy(readByAny, rec.read)
					for _, k := range slices.Sorted(maps.Keys(cfg.Environment)) {
						if !rec.read[k] {
							t.Errorf("template.yaml sets %s on %s, but the %s never reads it", k, cfg.LogicalID, name)
						}
					}
					for _, k := range slices.Sorted(maps.Keys(rec.read)) {
						if _, set := cfg.Environment[k]; !set && !slices.Contains(readButNotSet[name], k) {
							t.Errorf("the %s reads %s, but template.yaml does not set it on %s", name, k, cfg.LogicalID)
						}
					}
					for _, k := range readButNotSet[name] {
						if _, set := cfg.Environment[k]; set {
							t.Errorf("template.yaml now sets %s on %s: drop it from readButNotSet[%q]", k, cfg.LogicalID, name)
						}
					}
				})
			}
			// The builders read every name the source spells out, so the comparison above saw them all.
			if got, want := slices.Sorted(maps.Keys(readByAny)), envNamesInSource(t); !slices.Equal(got, want) {
				t.Errorf("variables the builders read = %v, want the names in app.go and config/env.go %v", got, want)
			}
		})
	}
}

// The releaser counts attempts with the same settings as the starter: a type's own max attempts
// (TYPE_MAX_ATTEMPTS) holds for jobs it releases.
func TestReleaserHonoursTypeMaxAttempts(t *testing.T) {
	c, _ := fakeDynamo(t)
	fns := resolveTemplate(t, map[string]string{"TypeLimits": "payments=50", "TypeMaxAttempts": "payments=5", "DefaultMaxAttempts": "3"})
	h, err := app.Releaser(envOf(fns["releaser"].Environment), c, discard())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.Service.Config.MaxAttempts(context.Background(), "payments"); err != nil || got != 5 {
		t.Errorf("releaser MaxAttempts(payments) = %d, %v, want 5", got, err)
	}
}

// CONFIG_CACHE_SECONDS=0 turns the cache off: every question reads the live config.
func TestConfigCacheSecondsZeroDoesNotCache(t *testing.T) {
	c, calls := fakeDynamo(t)
	r, err := app.Router(envOf(with(fullEnv(), map[string]string{"CONFIG_CACHE_SECONDS": "0"})), c, discard())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.Config.Get(context.Background(), "demo"); err != nil {
			t.Fatal(err)
		}
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("DynamoDB calls = %d, want 2 (no cache)", got)
	}
}

// fakeDynamo is a DynamoDB endpoint on loopback that answers every call with an empty result and
// counts the calls.
func fakeDynamo(t *testing.T) (app.Clients, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		fmt.Fprint(w, `{"Count":0,"Items":[],"ScannedCount":0}`)
	}))
	t.Cleanup(srv.Close)
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")}
	return app.NewClients(cfg), &calls
}

// Every function's metrics name a type without a limit of its own (one a producer invented, refused
// as unknown_type or run on DEFAULT_LIMIT) under one Type dimension: producers choose types, and
// each dimension value is a billed CloudWatch custom metric.
func TestMetricsBoundTheTypeDimension(t *testing.T) {
	var buf bytes.Buffer
	r, err := app.Router(envOf(with(fullEnv(), map[string]string{"DEFAULT_LIMIT": "2"})), clients(), discard(), app.WithMetrics(&buf))
	if err != nil {
		t.Fatal(err)
	}
	r.Metrics.Add("demo", metrics.JobsRouted, 1)
	for i := range 50 {
		r.Metrics.Add(fmt.Sprintf("invented%d", i), metrics.JobsRouted, 1)
	}
	if err := r.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var doc struct{ Type string }
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatal(err)
		}
		types[doc.Type] = true
	}
	if want := map[string]bool{"demo": true, metrics.Unlisted: true}; !maps.Equal(types, want) {
		t.Errorf("Type dimensions = %v, want %v", types, want)
	}
}
