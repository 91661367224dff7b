package ops

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// memStore is an in-memory override store.
type memStore struct {
	mu     sync.Mutex
	items  map[string]config.Override
	writes int
}

func newMemStore(ovs ...config.Override) *memStore {
	m := &memStore{items: map[string]config.Override{}}
	for _, o := range ovs {
		m.items[itemKey(o)] = o
	}
	return m
}

// itemKey is where an override is stored: a pool's live cap as "POOL#{name}", a type's by its name,
// as the table keeps them apart.
func itemKey(o config.Override) string {
	if o.Pool != "" {
		return "POOL#" + o.Pool
	}
	return o.Type
}

func (m *memStore) ListOverrides(context.Context) ([]config.Override, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []config.Override
	for _, o := range m.items {
		out = append(out, o)
	}
	return out, nil
}

func (m *memStore) SetOverride(_ context.Context, o config.Override) error {
	if err := o.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	m.items[itemKey(o)] = o
	return nil
}

func (m *memStore) DeleteOverride(_ context.Context, typ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	delete(m.items, typ)
	return nil
}

func (m *memStore) DeletePool(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	delete(m.items, "POOL#"+name)
	return nil
}

const sampleArn = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample"

func defaults() config.Defaults {
	return config.Defaults{
		Limits: map[string]int{"payments": 2, "reports": 5}, MaxAttempts: map[string]int{"reports": 4},
		DefaultMaxAttempts: 3, StateMachineArn: sampleArn,
	}
}

func ptr[T any](v T) *T { return &v }

func TestChangeValidate(t *testing.T) {
	tests := []struct {
		name    string
		give    Change
		wantErr string
	}{
		{name: "limit", give: Change{Type: "payments", Limit: ptr(20)}},
		{name: "all", give: Change{Type: "a_1", Limit: ptr(1), MaxAttempts: ptr(5), StateMachineArn: ptr(sampleArn)}},
		{name: "bad type", give: Change{Type: "a-b", Limit: ptr(1)}, wantErr: "invalid_type"},
		{name: "no type", give: Change{Limit: ptr(1)}, wantErr: "missing_type"},
		{name: "nothing", give: Change{Type: "a"}, wantErr: "nothing to set: give --limit, --max-attempts, --state-machine, --strategy, --release, --key-limit, --key-rate, --key with --limit or --rate, --rate or --burst, --pools, --no-pools, --share or --overflow"},
		{name: "zero limit", give: Change{Type: "a", Limit: ptr(0)}, wantErr: "at least 1"},
		{name: "limit at quota", give: Change{Type: "a", Limit: ptr(config.MaxInFlight)}, wantErr: "quota"},
		{name: "zero attempts", give: Change{Type: "a", MaxAttempts: ptr(0)}, wantErr: "--max-attempts 0 must be 1-999"},
		{name: "not an ARN", give: Change{Type: "a", StateMachineArn: ptr("sample")}, wantErr: "not a state machine ARN"},
		{name: "an execution ARN", give: Change{Type: "a", StateMachineArn: ptr("arn:aws:states:us-east-1:123456789012:execution:x:y")}, wantErr: "not a state machine ARN"},
		{name: "a version ARN", give: Change{Type: "a", StateMachineArn: ptr(sampleArn + ":3")}},
		{name: "an alias ARN", give: Change{Type: "a", StateMachineArn: ptr(sampleArn + ":prod")}},
		{name: "two qualifiers", give: Change{Type: "a", StateMachineArn: ptr(sampleArn + ":prod:3")}, wantErr: "not a state machine ARN"},
		{name: "a Distributed Map label", give: Change{Type: "a", StateMachineArn: ptr(sampleArn + "/mapLabel")}, wantErr: "not a state machine ARN"},
		{name: "strategy alone", give: Change{Type: "a", Strategy: ptr("random")}},
		{name: "first-free", give: Change{Type: "a", Limit: ptr(3), Strategy: ptr("first-free")}},
		{name: "an alias of random", give: Change{Type: "a", Strategy: ptr("hashed")}},
		{name: "least-loaded is retired", give: Change{Type: "a", Strategy: ptr("least-loaded")}, wantErr: "--strategy: lane strategy least-loaded is retired: it kept a counter per lane"},
		{name: "least-loaded beside a good limit", give: Change{Type: "a", Limit: ptr(3), Strategy: ptr("least-loaded")}, wantErr: "run as first-free"},
		{name: "unknown strategy", give: Change{Type: "a", Strategy: ptr("fastest")}, wantErr: `--strategy: unknown lane strategy "fastest" (known: first-free, random)`},
		{name: "strategy in capitals", give: Change{Type: "a", Strategy: ptr("Random")}, wantErr: `unknown lane strategy "Random" (known: first-free, random)`},
		{name: "empty strategy", give: Change{Type: "a", Strategy: ptr("")}, wantErr: "--strategy needs a name (known: first-free, random)"},
		{name: "bad strategy beside a good limit", give: Change{Type: "a", Limit: ptr(3), Strategy: ptr("fastest")}, wantErr: "known: first-free, random"},
		{name: "release alone", give: Change{Type: "a", Release: ptr("events")}},
		{name: "release step", give: Change{Type: "a", Limit: ptr(2), Release: ptr("step")}},
		{name: "unknown release mode", give: Change{Type: "a", Release: ptr("event")}, wantErr: `--release: unknown release mode "event" (known: step, events)`},
		{name: "release mode in capitals", give: Change{Type: "a", Release: ptr("Events")}, wantErr: "known: step, events"},
		{name: "empty release mode", give: Change{Type: "a", Release: ptr("")}, wantErr: "--release needs a mode (known: step, events)"},
		{name: "bad release beside a good limit", give: Change{Type: "a", Limit: ptr(3), Release: ptr("status")}, wantErr: `unknown release mode "status"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			var ue UsageError
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
				t.Errorf("Validate() = %v, want a usage error with %q", err, tt.wantErr)
			}
		})
	}
}

// describeFunc is a function-type fake of DescribeStateMachine.
type describeFunc func(arn string) error

func (f describeFunc) DescribeStateMachine(_ context.Context, in *sfn.DescribeStateMachineInput, _ ...func(*sfn.Options)) (*sfn.DescribeStateMachineOutput, error) {
	if err := f(aws.ToString(in.StateMachineArn)); err != nil {
		return nil, err
	}
	return &sfn.DescribeStateMachineOutput{}, nil
}

func TestConfigSet(t *testing.T) {
	ctx := context.Background()
	other := strings.Replace(sampleArn, "sfnlimit-sample", "mine", 1)
	machines := describeFunc(func(arn string) error {
		if arn == other || arn == sampleArn {
			return nil
		}
		return &sfntypes.StateMachineDoesNotExist{Message: aws.String("no")}
	})

	t.Run("only the fields given change", func(t *testing.T) {
		store := newMemStore(config.Override{Type: "payments", Limit: 10, MaxAttempts: 7})
		e := ConfigEditor{Store: store, Defaults: defaults(), CacheAge: 30 * time.Second, SFN: machines}
		res, err := e.Set(ctx, Change{Type: "payments", StateMachineArn: ptr(other)})
		if err != nil {
			t.Fatal(err)
		}
		if got := store.items["payments"]; !reflect.DeepEqual(got, config.Override{Type: "payments", Limit: 10, MaxAttempts: 7, StateMachineArn: other}) {
			t.Errorf("stored override = %+v", got)
		}
		if res.Before.Limit != 10 || res.After.Limit != 10 || res.After.StateMachineArn != other || res.After.Source != "override" {
			t.Errorf("Set() = %+v", res)
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "ExtraStateMachineArns") {
			t.Errorf("Set() warnings = %v, want the ExtraStateMachineArns reminder", res.Warnings)
		}
	})
	t.Run("a new type", func(t *testing.T) {
		store := newMemStore()
		e := ConfigEditor{Store: store, Defaults: defaults(), CacheAge: time.Second}
		res, err := e.Set(ctx, Change{Type: "llm", Limit: ptr(10), NewType: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Before.Limit != 0 || res.Before.Source != "none" || res.After.Limit != 10 || res.Config.Lanes != 17 {
			t.Errorf("Set() = %+v, want llm from none to 10 and 17 lanes in all", res)
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "is new: wait 1s") {
			t.Errorf("Set() warnings = %v", res.Warnings)
		}
	})
	t.Run("attempts without a limit leave the type refused", func(t *testing.T) {
		e := ConfigEditor{Store: newMemStore(), Defaults: defaults()}
		res, err := e.Set(ctx, Change{Type: "llm", MaxAttempts: ptr(2), NewType: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.After.Limit != 0 || res.After.MaxAttempts != 2 || res.After.Override == nil || !strings.Contains(strings.Join(res.Warnings, " "), "unknown_type") {
			t.Errorf("Set() = %+v", res)
		}
		v, err := e.Get(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if tv := find(v.Types, "llm"); tv == nil || tv.Source != "none" || tv.Override.MaxAttempts != 2 {
			t.Errorf("Get() llm = %+v, want it listed with its override and no limit", tv)
		}
	})
	t.Run("the quota counts defaults, overrides and the fallback", func(t *testing.T) {
		d := defaults()
		d.FallbackLimit = 3
		store := newMemStore(config.Override{Type: "big", Limit: 100000})
		e := ConfigEditor{Store: store, Defaults: d}
		// 100000 + 2 + 5 + 3 + 19990 = 120000: at the quota.
		if _, err := e.Set(ctx, Change{Type: "other", Limit: ptr(19990), NewType: true}); err == nil || !strings.Contains(err.Error(), "quota") {
			t.Errorf("Set() over the quota = %v", err)
		}
		// Overriding an existing limit replaces it rather than adds to it.
		if _, err := e.Set(ctx, Change{Type: "big", Limit: ptr(119990)}); err == nil {
			t.Errorf("Set() big to 119990 = nil, want the quota error")
		}
		if _, err := e.Set(ctx, Change{Type: "big", Limit: ptr(110000)}); err != nil {
			t.Errorf("Set() big to 110000 = %v", err)
		}
		if store.writes != 1 {
			t.Errorf("%d writes, want 1 (refused changes write nothing)", store.writes)
		}
	})
	t.Run("a missing state machine", func(t *testing.T) {
		store := newMemStore()
		e := ConfigEditor{Store: store, Defaults: defaults(), SFN: machines}
		_, err := e.Set(ctx, Change{Type: "payments", StateMachineArn: ptr(strings.Replace(sampleArn, "sfnlimit-sample", "gone", 1))})
		if err == nil || !strings.Contains(err.Error(), "does not exist") || store.writes != 0 {
			t.Errorf("Set() = %v with %d writes, want does not exist and none", err, store.writes)
		}
	})
}

// A type the stack does not know (not in the deployment's defaults, no live override) is refused
// unless the change says it is new: a typo must not create a type. The closest known type is
// suggested. A known type needs no flag.
func TestConfigSetUnknownType(t *testing.T) {
	ctx := context.Background()
	d := defaults()
	d.Rates = map[string]config.Rate{"partner": {PerSecond: 5, Burst: 5}}
	tests := []struct {
		name      string
		stored    []config.Override
		give      Change
		wantErr   string
		wantWrite bool
	}{
		{name: "a typo of a default type", give: Change{Type: "paymnets", Limit: ptr(3)},
			wantErr: "type paymnets is not known to the stack (no limit or other setting in its parameters, no live override): nothing written. Did you mean payments? To create type paymnets, add --new-type"},
		{name: "a typo of a live type", stored: []config.Override{{Type: "llm_chat", Limit: 4}}, give: Change{Type: "llm_caht", MaxAttempts: ptr(2)},
			wantErr: "Did you mean llm_chat?"},
		{name: "nothing close", give: Change{Type: "thumbnails", Limit: ptr(3)},
			wantErr: "type thumbnails is not known to the stack (no limit or other setting in its parameters, no live override): nothing written. To create type thumbnails, add --new-type"},
		{name: "a new type", give: Change{Type: "thumbnails", Limit: ptr(3), NewType: true}, wantWrite: true},
		{name: "a default type", give: Change{Type: "payments", Limit: ptr(3)}, wantWrite: true},
		{name: "a type known by its rate alone", give: Change{Type: "partner", Limit: ptr(3)}, wantWrite: true},
		{name: "a live type", stored: []config.Override{{Type: "llm", Limit: 4}}, give: Change{Type: "llm", Limit: ptr(3)}, wantWrite: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored...)
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second}
			_, err := e.Set(ctx, tt.give)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Errorf("Set() = %v, want a usage error with %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Errorf("Set() = %v, want nil", err)
			}
			if wrote := store.writes > 0; wrote != tt.wantWrite {
				t.Errorf("Set() wrote %d times, want a write %v", store.writes, tt.wantWrite)
			}
		})
	}
}

// Out-of-range attempts are refused as the template refuses them (1-999).
func TestChangeValidateAttempts(t *testing.T) {
	for _, n := range []int{0, 1000, 9999999999999} {
		var ue UsageError
		if err := (Change{Type: "payments", MaxAttempts: ptr(n)}).Validate(); err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "must be 1-999") {
			t.Errorf("Validate() of --max-attempts %d = %v, want a usage error: must be 1-999", n, err)
		}
		if err := (Attach{StateMachineArn: sampleArn, Type: "mine", Limit: 1, MaxAttempts: ptr(n)}).Validate(); err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "must be 1-999") {
			t.Errorf("Attach.Validate() of --max-attempts %d = %v, want a usage error: must be 1-999", n, err)
		}
	}
	for _, n := range []int{1, 999} {
		if err := (Change{Type: "payments", MaxAttempts: ptr(n)}).Validate(); err != nil {
			t.Errorf("Validate() of --max-attempts %d = %v, want nil", n, err)
		}
	}
}

// A change written says when it applies: within ConfigCacheSeconds, the time the functions cache
// the live config, as the editor was told it (the stack's own value).
func TestConfigSetSaysWhenItApplies(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		cache time.Duration
		want  string
	}{
		{cache: 30 * time.Second, want: "the change applies within 30s (ConfigCacheSeconds): until then, a function that read the config before it goes on with the old one\n"},
		{cache: 0, want: "the change applies at once (ConfigCacheSeconds is 0)\n"},
	} {
		e := ConfigEditor{Store: newMemStore(), Defaults: defaults(), CacheAge: tt.cache}
		res, err := e.Set(ctx, Change{Type: "payments", Limit: ptr(4)})
		if err != nil {
			t.Fatal(err)
		}
		if res.AppliesWithinSeconds == nil || *res.AppliesWithinSeconds != tt.cache.Seconds() {
			t.Errorf("Set() appliesWithinSeconds = %v, want %v", res.AppliesWithinSeconds, tt.cache.Seconds())
		}
		var b strings.Builder
		if err := res.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		// Right below the change, not only at the foot of the table.
		if lines := strings.SplitAfterN(b.String(), "\n", 3); len(lines) < 2 || lines[1] != tt.want {
			t.Errorf("WriteTable() =\n%s\nwant its second line %q", b.String(), tt.want)
		}
	}
}

// A change that leaves the stored override as it was writes nothing, and says so: removing a key's
// cap that it does not have must not write an empty item.
func TestConfigSetNothingChanged(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		stored []config.Override
		give   Change
	}{
		{name: "no override, no key cap", give: Change{Type: "payments", Key: ptr("acme"), KeyCap: ptr(0)}},
		{name: "an override without that key cap", stored: []config.Override{{Type: "payments", Limit: 4}}, give: Change{Type: "payments", Key: ptr("acme"), KeyCap: ptr(0)}},
		{name: "a new type with nothing to keep", give: Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(0), NewType: true}},
		{name: "the same limit", stored: []config.Override{{Type: "payments", Limit: 4}}, give: Change{Type: "payments", Limit: ptr(4)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored...)
			e := ConfigEditor{Store: store, Defaults: defaults(), CacheAge: time.Second}
			res, err := e.Set(ctx, tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if store.writes != 0 || len(store.items) != len(tt.stored) {
				t.Errorf("Set() wrote %d times (overrides %v), want no write", store.writes, store.items)
			}
			if !res.Unchanged || !strings.Contains(strings.Join(res.Warnings, "\n"), "nothing changed, nothing written") {
				t.Errorf("Set() = %+v, want it unchanged and a note that nothing was written", res)
			}
		})
	}
}

// --strategy follows the rule of the other fields: it changes the stored strategy and nothing else,
// the others keep it, and a name lane.ParseStrategy refuses writes nothing.
func TestConfigSetStrategy(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		defaults string // the deployment's LaneStrategy
		stored   []config.Override
		give     Change
		wantErr  string
		want     config.Override // the stored override after
		// the type's strategy before and after, and where it comes from after
		wantBefore, wantAfter, wantSource string
		// the retired strategy the type is configured with after, and a warning about it
		wantRetired, wantWarning string
	}{
		{
			name: "strategy alone keeps the stored fields", stored: []config.Override{{Type: "payments", Limit: 10, MaxAttempts: 7}},
			give:       Change{Type: "payments", Strategy: ptr("random")},
			want:       config.Override{Type: "payments", Limit: 10, MaxAttempts: 7, Strategy: "random"},
			wantBefore: "first-free", wantAfter: "random", wantSource: "override",
		},
		{
			name: "the other fields keep the strategy", stored: []config.Override{{Type: "payments", Strategy: "random"}},
			give:       Change{Type: "payments", Limit: ptr(4)},
			want:       config.Override{Type: "payments", Limit: 4, Strategy: "random"},
			wantBefore: "random", wantAfter: "random", wantSource: "override",
		},
		{
			name: "a type with no override", give: Change{Type: "reports", Strategy: ptr("random")},
			want:       config.Override{Type: "reports", Strategy: "random"},
			wantBefore: "first-free", wantAfter: "random", wantSource: "override",
		},
		{
			name: "the deployment's default shown before", defaults: "random", give: Change{Type: "reports", Strategy: ptr("first-free")},
			want:       config.Override{Type: "reports", Strategy: "first-free"},
			wantBefore: "random", wantAfter: "first-free", wantSource: "override",
		},
		{
			name: "an alias is stored by its name", give: Change{Type: "reports", Strategy: ptr("hashed")},
			want:       config.Override{Type: "reports", Strategy: "random"},
			wantBefore: "first-free", wantAfter: "random", wantSource: "override",
		},
		{
			name: "limit only: the default strategy stays", give: Change{Type: "reports", Limit: ptr(6)},
			want:       config.Override{Type: "reports", Limit: 6},
			wantBefore: "first-free", wantAfter: "first-free", wantSource: "default",
		},
		{
			name: "a deployment on least-loaded runs first-free", defaults: "least-loaded", give: Change{Type: "reports", Limit: ptr(6)},
			want:       config.Override{Type: "reports", Limit: 6},
			wantBefore: "first-free", wantAfter: "first-free", wantSource: "default", wantRetired: "least-loaded",
		},
		{
			name: "a live item on least-loaded keeps it when other fields change", stored: []config.Override{{Type: "payments", Limit: 10, Strategy: "least-loaded"}},
			give:       Change{Type: "payments", Limit: ptr(4)},
			want:       config.Override{Type: "payments", Limit: 4, Strategy: "least-loaded"},
			wantBefore: "first-free", wantAfter: "first-free", wantSource: "override", wantRetired: "least-loaded",
			wantWarning: "the live override of type payments keeps lane strategy least-loaded, which is retired: it runs as first-free (config set payments --strategy first-free writes that)",
		},
		{
			name: "first-free rewrites a live item on least-loaded", stored: []config.Override{{Type: "payments", Limit: 10, Strategy: "least-loaded"}},
			give:       Change{Type: "payments", Strategy: ptr("first-free")},
			want:       config.Override{Type: "payments", Limit: 10, Strategy: "first-free"},
			wantBefore: "first-free", wantAfter: "first-free", wantSource: "override",
		},
		{
			name: "least-loaded is refused", stored: []config.Override{{Type: "payments", Limit: 10, Strategy: "random"}},
			give:    Change{Type: "payments", Strategy: ptr("least-loaded")},
			wantErr: "lane strategy least-loaded is retired: it kept a counter per lane that a lost update silently took a lane away from",
		},
		{
			name: "least-loaded is refused for a type with no override", defaults: "least-loaded",
			give:    Change{Type: "reports", Limit: ptr(3), Strategy: ptr("least-loaded")},
			wantErr: "is retired",
		},
		{
			name: "unknown strategy", stored: []config.Override{{Type: "payments", Limit: 10, Strategy: "random"}},
			give:    Change{Type: "payments", Limit: ptr(3), Strategy: ptr("fastest")},
			wantErr: `unknown lane strategy "fastest" (known: first-free, random)`,
		},
		{
			name: "empty strategy", stored: []config.Override{{Type: "payments", Strategy: "random"}},
			give: Change{Type: "payments", Strategy: ptr("")}, wantErr: "--strategy needs a name",
		},
		{
			name: "unknown strategy of a type with no override", give: Change{Type: "llm", Limit: ptr(3), Strategy: ptr("round-robin")},
			wantErr: `unknown lane strategy "round-robin"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored...)
			d := defaults()
			d.Strategy = tt.defaults
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second}
			res, err := e.Set(ctx, tt.give)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Errorf("Set() = %v, want a usage error with %q", err, tt.wantErr)
				}
				if store.writes != 0 || len(store.items) != len(tt.stored) || len(tt.stored) > 0 && !reflect.DeepEqual(store.items[tt.stored[0].Type], tt.stored[0]) {
					t.Errorf("a refused change wrote: %d writes, overrides %v, want %v", store.writes, store.items, tt.stored)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := store.items[tt.give.Type]; !reflect.DeepEqual(got, tt.want) || store.writes != 1 {
				t.Errorf("stored override = %+v after %d writes, want %+v after 1", got, store.writes, tt.want)
			}
			if res.Before.Strategy != tt.wantBefore || res.After.Strategy != tt.wantAfter || res.After.StrategySource != tt.wantSource {
				t.Errorf("Set() strategy %s -> %s (%s), want %s -> %s (%s)", res.Before.Strategy, res.After.Strategy, res.After.StrategySource,
					tt.wantBefore, tt.wantAfter, tt.wantSource)
			}
			if res.After.Override == nil || res.After.Override.Strategy != tt.want.Strategy {
				t.Errorf("Set() override = %+v, want strategy %q", res.After.Override, tt.want.Strategy)
			}
			if res.After.RetiredStrategy != tt.wantRetired {
				t.Errorf("Set() retired strategy = %q, want %q", res.After.RetiredStrategy, tt.wantRetired)
			}
			if got := strings.Join(res.Warnings, "\n"); tt.wantWarning != "" && !strings.Contains(got, tt.wantWarning) || tt.wantWarning == "" && strings.Contains(got, "retired") {
				t.Errorf("Set() warnings = %q, want %q", res.Warnings, tt.wantWarning)
			}
			// What get shows afterwards is what set said.
			v, err := e.Get(ctx, tt.give.Type)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Types) != 1 || v.Types[0].Strategy != tt.wantAfter || v.Types[0].StrategySource != tt.wantSource || v.Types[0].RetiredStrategy != tt.wantRetired {
				t.Errorf("Get(%s) = %+v, want strategy %s from %s", tt.give.Type, v.Types, tt.wantAfter, tt.wantSource)
			}
			var b strings.Builder
			if err := res.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				fmt.Sprintf("strategy %s -> %s (%s), release step -> step (ReleaseMode)\n", tt.wantBefore, tt.wantAfter, tt.wantSource),
				fmt.Sprintf("%s  %s%s (%s)", sampleArn[strings.LastIndexByte(sampleArn, ':')+1:], tt.wantAfter, map[bool]string{true: "*"}[tt.wantRetired != ""], tt.wantSource),
				fmt.Sprintf("Lane strategy without an override: %s (LaneStrategy", defaultStrategy(d)),
			} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// An override written by hand with a strategy the functions do not know is ignored by them: get
// says so instead of leaving it out, and set does not carry the bad name along.
func TestConfigUnknownStoredStrategy(t *testing.T) {
	ctx := context.Background()
	store := newMemStore(config.Override{Type: "payments", Limit: 9, Strategy: "fastest"})
	e := ConfigEditor{Store: store, Defaults: defaults()}
	v, err := e.Get(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if p := find(v.Types, "payments"); p == nil || p.Limit != 2 || p.Source != "default" || p.Strategy != "first-free" || p.Override != nil {
		t.Errorf("Get() payments = %+v, want the defaults the functions fall back to", p)
	}
	if len(v.Ignored) != 1 || !strings.Contains(v.Ignored[0], `type payments is ignored by the functions: type payments: unknown lane strategy "fastest"`) {
		t.Errorf("Get() ignored = %q", v.Ignored)
	}
	var b strings.Builder
	if err := v.WriteTable(&b); err != nil || !strings.Contains(b.String(), "WARNING: the live override of type payments is ignored") {
		t.Errorf("WriteTable() = %v:\n%s", err, b.String())
	}
	if _, err := e.Set(ctx, Change{Type: "payments", Limit: ptr(3)}); err == nil || !strings.Contains(err.Error(), "unknown lane strategy") || store.writes != 0 {
		t.Errorf("Set(--limit) over a bad stored strategy = %v with %d writes, want the strategy named and none", err, store.writes)
	}
	if _, err := e.Set(ctx, Change{Type: "payments", Strategy: ptr("random")}); err != nil {
		t.Fatal(err)
	}
	if got := store.items["payments"]; !reflect.DeepEqual(got, config.Override{Type: "payments", Limit: 9, Strategy: "random"}) {
		t.Errorf("stored after --strategy random = %+v", got)
	}
}

// A type configured with the retired least-loaded, by its live item or by the deployment's
// LaneStrategy, is shown as the first-free it runs as, and marked as configured least-loaded.
func TestConfigGetRetiredStrategy(t *testing.T) {
	tests := []struct {
		name       string
		deployment string
		stored     []config.Override
		// per type: its strategy, and the retired one it is configured with
		want        map[string][2]string
		wantDefault [2]string // the deployment's strategy, and the retired one LaneStrategy names
		wantLines   []string
		wantNot     []string
	}{
		{
			name: "nothing retired", deployment: "random", stored: []config.Override{{Type: "payments", Strategy: "first-free"}},
			want:        map[string][2]string{"payments": {"first-free", ""}, "reports": {"random", ""}},
			wantDefault: [2]string{"random", ""},
			wantLines:   []string{"first-free (override)", "random (default)", "Lane strategy without an override: random (LaneStrategy)."},
			wantNot:     []string{"*", "retired"},
		},
		{
			name: "a live item", deployment: "random", stored: []config.Override{{Type: "payments", Limit: 4, Strategy: "least-loaded"}},
			want:        map[string][2]string{"payments": {"first-free", "least-loaded"}, "reports": {"random", ""}},
			wantDefault: [2]string{"random", ""},
			wantLines: []string{
				"first-free* (override)  step (ReleaseMode)  limit=4 strategy=least-loaded",
				"* configured least-loaded, a retired lane strategy: run as first-free (payments). Set first-free or random to drop this note.",
				"Lane strategy without an override: random (LaneStrategy).",
			},
		},
		{
			name: "the deployment", deployment: "least-loaded", stored: []config.Override{{Type: "payments", Strategy: "random"}, {Type: "llm", Limit: 3, MaxAttempts: 2}},
			want:        map[string][2]string{"payments": {"random", ""}, "reports": {"first-free", "least-loaded"}, "llm": {"first-free", "least-loaded"}},
			wantDefault: [2]string{"first-free", "least-loaded"},
			wantLines: []string{
				"random (override)", "first-free* (default)",
				"* configured least-loaded, a retired lane strategy: run as first-free (llm, reports).",
				"Lane strategy without an override: first-free (LaneStrategy least-loaded, which is retired).",
			},
		},
		{
			// The functions ignore a live item with an unknown strategy: the deployment's applies.
			name: "an ignored live item", deployment: "least-loaded", stored: []config.Override{{Type: "payments", Limit: 4, Strategy: "fastest"}},
			want:        map[string][2]string{"payments": {"first-free", "least-loaded"}},
			wantDefault: [2]string{"first-free", "least-loaded"},
			wantLines:   []string{"(payments, reports)", "WARNING: the live override of type payments is ignored"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := defaults()
			d.Strategy = tt.deployment
			e := ConfigEditor{Store: newMemStore(tt.stored...), Defaults: d, CacheAge: time.Second}
			v, err := e.Get(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			for typ, want := range tt.want {
				if tv := find(v.Types, typ); tv == nil || [2]string{tv.Strategy, tv.RetiredStrategy} != want {
					t.Errorf("Get() %s = %+v, want strategy %s, retired %q", typ, tv, want[0], want[1])
				}
				// Get of one type says the same.
				one, err := e.Get(context.Background(), typ)
				if err != nil {
					t.Fatal(err)
				}
				if len(one.Types) != 1 || [2]string{one.Types[0].Strategy, one.Types[0].RetiredStrategy} != want {
					t.Errorf("Get(%s) = %+v, want strategy %s, retired %q", typ, one.Types, want[0], want[1])
				}
			}
			if got := [2]string{v.Strategy, v.RetiredStrategy}; got != tt.wantDefault {
				t.Errorf("Get() deployment strategy %q, want %q", got, tt.wantDefault)
			}
			var b strings.Builder
			if err := v.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.wantLines {
				if !strings.Contains(b.String(), want) {
					t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
				}
			}
			for _, not := range tt.wantNot {
				if strings.Contains(b.String(), not) {
					t.Errorf("WriteTable() says %q:\n%s", not, b.String())
				}
			}
		})
	}
}

func TestConfigReset(t *testing.T) {
	ctx := context.Background()
	store := newMemStore(config.Override{Type: "payments", Limit: 20, Strategy: "random"}, config.Override{Type: "llm", Limit: 4})
	e := ConfigEditor{Store: store, Defaults: defaults()}
	res, err := e.Reset(ctx, "payments", false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Before.Limit != 20 || res.After.Limit != 2 || res.After.Source != "default" || len(res.Warnings) != 0 {
		t.Errorf("Reset(payments) = %+v, want 20 -> 2 from default", res)
	}
	if res.Before.Strategy != "random" || res.After.Strategy != "first-free" || res.After.StrategySource != "default" {
		t.Errorf("Reset(payments) strategy %s -> %s (%s), want random -> first-free (default)", res.Before.Strategy, res.After.Strategy, res.After.StrategySource)
	}
	res, err = e.Reset(ctx, "llm", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.After.Limit != 0 || !strings.Contains(strings.Join(res.Warnings, " "), "unknown_type") {
		t.Errorf("Reset(llm) = %+v, want no limit and a warning", res)
	}
	res, err = e.Reset(ctx, "reports", false)
	if err != nil || !strings.Contains(strings.Join(res.Warnings, " "), "no live override") {
		t.Errorf("Reset(reports) = %+v, %v; want a no-op with a note", res, err)
	}
	if _, err := e.Reset(ctx, "a-b", false); err == nil {
		t.Error("Reset(a-b) = nil, want invalid_type")
	}
	if len(store.items) != 0 {
		t.Errorf("overrides left: %v", store.items)
	}
}

// fakeStatus is a StatusReader's reading.
type fakeStatus struct {
	st  Status
	err error
}

func (f fakeStatus) Read(context.Context) (Status, error) { return f.st, f.err }

// Resetting a type that exists only as an override makes the limiter refuse every job of it still
// queued (unknown_type): the reset says what it can count of them and is done only with force.
func TestConfigResetOverrideOnlyNeedsForce(t *testing.T) {
	ctx := context.Background()
	reading := Status{
		Types: []TypeStatus{
			{Type: "llm", Limit: 4, Source: "override", Strategy: "first-free", Running: 4, ByStatus: map[string]int{"started": 3, "bound": 1}},
			{Type: "chat", Limit: 2, Source: "override", Strategy: "random", Running: 1},
		},
		Queues: QueueStatus{General: QueueDepth{Waiting: 7}, Lanes: QueueDepth{Waiting: 191, InFlight: 5}},
	}
	tests := []struct {
		name      string
		typ       string
		status    statusReader
		force     bool
		wantErr   []string // in the refusal; nil: the reset is done
		wantWarn  string
		wantStays bool
	}{
		{name: "first-free", typ: "llm", status: fakeStatus{st: reading},
			wantErr: []string{"exists only as a live override", "unknown_type", "4 of its jobs hold a lane (leases)", "191 waiting", "5 in flight", "7 waiting", "cannot count one type's", "Nothing written: add --force to reset it anyway"}},
		{name: "random", typ: "chat", status: fakeStatus{st: reading},
			wantErr: []string{"1 of its jobs holds a lane (leases)", "191 waiting", "--force"}},
		{name: "status unreadable", typ: "llm", status: fakeStatus{err: errors.New("table unreachable")},
			wantErr: []string{"could not be counted", "table unreachable", "--force"}},
		{name: "no status reader", typ: "llm", wantErr: []string{"could not be counted", "--force"}},
		{name: "forced", typ: "llm", status: fakeStatus{st: reading}, force: true, wantWarn: "4 of its jobs hold a lane (leases); the lanes queue holds about 191 waiting"},
		{name: "a default remains", typ: "payments", status: fakeStatus{st: reading}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(config.Override{Type: "llm", Limit: 4}, config.Override{Type: "chat", Limit: 2, Strategy: "random"}, config.Override{Type: "payments", Limit: 9})
			e := ConfigEditor{Store: store, Defaults: defaults(), Status: tt.status}
			res, err := e.Reset(ctx, tt.typ, tt.force)
			if tt.wantErr != nil {
				var ue UsageError
				if err == nil || !errors.As(err, &ue) {
					t.Fatalf("Reset(%s) = %+v, %v; want a refusal that asks for --force", tt.typ, res, err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Reset(%s) refusal = %q, want it to say %q", tt.typ, err, w)
					}
				}
				if _, ok := store.items[tt.typ]; !ok || store.writes != 0 {
					t.Errorf("a refused reset changed the overrides: %v (%d writes)", store.items, store.writes)
				}
				return
			}
			if err != nil {
				t.Fatalf("Reset(%s) = %v", tt.typ, err)
			}
			if _, ok := store.items[tt.typ]; ok {
				t.Errorf("Reset(%s) left the override", tt.typ)
			}
			if tt.wantWarn != "" && !strings.Contains(strings.Join(res.Warnings, " "), tt.wantWarn) {
				t.Errorf("Reset(%s) warnings = %q, want %q", tt.typ, res.Warnings, tt.wantWarn)
			}
		})
	}
}

// Overrides that break the quota together (written by hand) are shown as the functions treat
// them: refused as a whole, the defaults in force.
func TestConfigGetRefusedSet(t *testing.T) {
	store := newMemStore(config.Override{Type: "a", Limit: 60000}, config.Override{Type: "b", Limit: 60000})
	v, err := ConfigEditor{Store: store, Defaults: defaults()}.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if v.Warning == "" || v.Lanes != 7 || find(v.Types, "a") != nil {
		t.Errorf("Get() = %+v, want a warning and the defaults' 7 lanes", v)
	}
	var b strings.Builder
	if err := v.WriteTable(&b); err != nil || !strings.Contains(b.String(), "WARNING") {
		t.Errorf("WriteTable() = %v:\n%s", err, b.String())
	}
}

func find(ts []TypeView, typ string) *TypeView {
	for i := range ts {
		if ts[i].Type == typ {
			return &ts[i]
		}
	}
	return nil
}
