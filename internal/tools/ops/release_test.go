package ops

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// machineFake is a DescribeStateMachine of a fixed set of state machines (any other does not
// exist), or one that fails with err; it counts its calls.
type machineFake struct {
	machines map[string]sfn.DescribeStateMachineOutput
	err      error
	calls    int
}

func (f *machineFake) DescribeStateMachine(_ context.Context, in *sfn.DescribeStateMachineInput, _ ...func(*sfn.Options)) (*sfn.DescribeStateMachineOutput, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	out, ok := f.machines[aws.ToString(in.StateMachineArn)]
	if !ok {
		return nil, &sfntypes.StateMachineDoesNotExist{Message: aws.String("no")}
	}
	return &out, nil
}

const (
	expressArn = "arn:aws:states:us-east-1:123456789012:stateMachine:quick"
	mineArn    = "arn:aws:states:us-east-1:123456789012:stateMachine:mine"
)

// machines are the sample (Standard, with its Release state), a Standard workflow of the user's
// own with no Release state, and an Express one.
func machines() *machineFake {
	return &machineFake{machines: map[string]sfn.DescribeStateMachineOutput{
		sampleArn: {Name: aws.String("sfnlimit-sample"), Type: sfntypes.StateMachineTypeStandard, Status: sfntypes.StateMachineStatusActive,
			Definition: aws.String(`{"States":{"Release":{"Resource":"arn:aws:states:::lambda:invoke","Parameters":{"FunctionName":"sfnlimit-ReleaserFunction-abc"}}}}`)},
		mineArn:    {Name: aws.String("mine"), Type: sfntypes.StateMachineTypeStandard, Status: sfntypes.StateMachineStatusActive, Definition: aws.String(`{"States":{}}`)},
		expressArn: {Name: aws.String("quick"), Type: sfntypes.StateMachineTypeExpress, Status: sfntypes.StateMachineStatusActive},
	}}
}

// config set --release writes the override's release mode; events is refused (nothing written)
// for a type whose state machine, its own or the deployment's, is Express or cannot be described.
func TestConfigSetRelease(t *testing.T) {
	denied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform states:DescribeStateMachine"}
	tests := []struct {
		name     string
		releases map[string]string // TypeReleaseModes
		stored   []config.Override
		give     Change
		noSFN    bool
		sfnErr   error
		wantErr  string
		want     config.Override // stored after
		// the type's release mode after and where it comes from
		wantRelease, wantSource string
		wantWarning             string
		wantCalls               int // DescribeStateMachine calls; -1: any
	}{
		{
			name: "events on the sample", give: Change{Type: "payments", Release: ptr("events")},
			want:        config.Override{Type: "payments", Release: "events"},
			wantRelease: "events", wantSource: ReleaseFromOverride, wantCalls: 1,
		},
		{
			name: "events keeps the stored fields", stored: []config.Override{{Type: "payments", Limit: 9, StateMachineArn: mineArn, Strategy: "random"}},
			give:        Change{Type: "payments", Release: ptr("events")},
			want:        config.Override{Type: "payments", Limit: 9, StateMachineArn: mineArn, Strategy: "random", Release: "events"},
			wantRelease: "events", wantSource: ReleaseFromOverride, wantCalls: 1,
		},
		{
			name: "step needs no check", stored: []config.Override{{Type: "payments", StateMachineArn: expressArn, Release: "events"}},
			give:        Change{Type: "payments", Release: ptr("step")},
			want:        config.Override{Type: "payments", StateMachineArn: expressArn, Release: "step"},
			wantRelease: "step", wantSource: ReleaseFromOverride, wantCalls: 0,
		},
		{
			name: "events on an Express machine", stored: []config.Override{{Type: "payments", StateMachineArn: expressArn}},
			give: Change{Type: "payments", Release: ptr("events")}, wantErr: "Express workflows send no status events: state machine " + expressArn + " is EXPRESS",
		},
		{
			name: "an Express machine for a type in events mode by TypeReleaseModes", releases: map[string]string{"payments": "events"},
			give: Change{Type: "payments", StateMachineArn: ptr(expressArn)}, wantErr: "Express workflows send no status events",
		},
		{
			name: "an Express machine and events at once",
			give: Change{Type: "llm", Limit: ptr(2), StateMachineArn: ptr(expressArn), Release: ptr("events"), NewType: true}, wantErr: "nothing would release the lanes of type llm (nothing written)",
		},
		{
			name: "an Express machine in step mode", give: Change{Type: "payments", StateMachineArn: ptr(expressArn)},
			want:        config.Override{Type: "payments", StateMachineArn: expressArn},
			wantRelease: "step", wantSource: ReleaseFromDefault, wantWarning: "ExtraStateMachineArns", wantCalls: 1,
		},
		{
			name: "events, the machine cannot be described", sfnErr: denied, give: Change{Type: "payments", Release: ptr("events")},
			wantErr: "could not check that state machine " + sampleArn + " is Standard (api error AccessDeniedException",
		},
		{
			name: "step, the machine cannot be described: a warning", sfnErr: denied, give: Change{Type: "payments", StateMachineArn: ptr(mineArn)},
			want:        config.Override{Type: "payments", StateMachineArn: mineArn},
			wantRelease: "step", wantSource: ReleaseFromDefault, wantWarning: "could not check that state machine " + mineArn + " exists", wantCalls: 1,
		},
		{
			name: "events without a Step Functions client", noSFN: true, give: Change{Type: "payments", Release: ptr("events")},
			wantErr: "cannot check that state machine",
		},
		{
			name: "events on a machine that does not exist", give: Change{Type: "payments", StateMachineArn: ptr(strings.Replace(mineArn, "mine", "gone", 1)), Release: ptr("events")},
			wantErr: "does not exist",
		},
		{
			// DescribeStateMachine takes no alias ARN: the machine the alias belongs to is described.
			name: "events on an alias of a Standard machine", give: Change{Type: "payments", StateMachineArn: ptr(mineArn + ":prod"), Release: ptr("events")},
			want:        config.Override{Type: "payments", StateMachineArn: mineArn + ":prod", Release: "events"},
			wantRelease: "events", wantSource: ReleaseFromOverride, wantCalls: 1,
			wantWarning: "ExtraStateMachineArns",
		},
		{
			name: "events on a version of an Express machine", give: Change{Type: "payments", StateMachineArn: ptr(expressArn + ":2"), Release: ptr("events")},
			wantErr: "nothing would release the lanes of type payments (nothing written)",
		},
		{
			name: "limit only: TypeReleaseModes stays", releases: map[string]string{"payments": "events"}, give: Change{Type: "payments", Limit: ptr(4)},
			want:        config.Override{Type: "payments", Limit: 4},
			wantRelease: "events", wantSource: ReleaseFromType, wantCalls: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			d := defaults()
			d.Releases = tt.releases
			store := newMemStore(tt.stored...)
			fake := machines()
			fake.err = tt.sfnErr
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second, SFN: fake}
			if tt.noSFN {
				e.SFN = nil
			}
			res, err := e.Set(ctx, tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Set() = %v, want an error with %q", err, tt.wantErr)
				}
				if store.writes != 0 {
					t.Errorf("a refused change wrote %d times: %v", store.writes, store.items)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := store.items[tt.give.Type]; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("stored override = %+v, want %+v", got, tt.want)
			}
			if res.After.Release != tt.wantRelease || res.After.ReleaseSource != tt.wantSource {
				t.Errorf("Set() release %s (%s), want %s (%s)", res.After.Release, res.After.ReleaseSource, tt.wantRelease, tt.wantSource)
			}
			if w := strings.Join(res.Warnings, "\n"); tt.wantWarning != "" && !strings.Contains(w, tt.wantWarning) {
				t.Errorf("Set() warnings = %q, want %q", res.Warnings, tt.wantWarning)
			}
			if tt.wantCalls >= 0 && fake.calls != tt.wantCalls {
				t.Errorf("DescribeStateMachine called %d times, want %d", fake.calls, tt.wantCalls)
			}
			var b strings.Builder
			if err := res.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if want := " -> " + tt.wantRelease + " (" + tt.wantSource + ")\n"; !strings.Contains(b.String(), want) {
				t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
			}
		})
	}
}

// With the stack's access known, a state machine it may not start is named with the redeploy line,
// and one it may start gets no reminder.
func TestConfigSetStateMachineStackAccess(t *testing.T) {
	stack := &StackAccess{
		Own: map[string]string{"SampleStateMachineArn": sampleArn}, Extra: []string{mineArn},
		Redeploy: SamDeploy{Stack: "sfnlimit", Region: "us-east-1"}.Command,
	}
	other := strings.Replace(mineArn, "mine", "other", 1)
	fake := machines()
	fake.machines[other] = fake.machines[mineArn]
	e := ConfigEditor{Store: newMemStore(), Defaults: defaults(), SFN: fake, Stack: stack}
	res, err := e.Set(context.Background(), Change{Type: "payments", StateMachineArn: ptr(mineArn)})
	if err != nil || len(res.Warnings) != 0 {
		t.Errorf("Set(listed machine) = %v, warnings %q; want none", err, res.Warnings)
	}
	res, err = e.Set(context.Background(), Change{Type: "payments", StateMachineArn: ptr(other)})
	want := "sam deploy --stack-name sfnlimit --region us-east-1 --parameter-overrides 'ExtraStateMachineArns=" + mineArn + "," + other + "'"
	if err != nil || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "is not in the stack's ExtraStateMachineArns") || !strings.Contains(res.Warnings[0], want) {
		t.Errorf("Set(unlisted machine) = %v, warnings %q; want one naming %q", err, res.Warnings, want)
	}
}

// get shows each type's release mode and where it comes from: its live item, its TypeReleaseModes
// entry, or ReleaseMode.
func TestConfigGetRelease(t *testing.T) {
	d := defaults()
	d.Release = "events"
	d.Releases = map[string]string{"reports": "step"}
	d.Limits["llm"] = 3
	e := ConfigEditor{Store: newMemStore(config.Override{Type: "llm", Release: "step"}, config.Override{Type: "reports", Release: "events"}), Defaults: d}
	v, err := e.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"llm":      {"step", ReleaseFromOverride},
		"payments": {"events", ReleaseFromDefault},
		"reports":  {"events", ReleaseFromOverride},
	}
	for typ, w := range want {
		if tv := find(v.Types, typ); tv == nil || [2]string{tv.Release, tv.ReleaseSource} != w {
			t.Errorf("Get() %s = %+v, want release %s from %s", typ, tv, w[0], w[1])
		}
	}
	if v.Release != "events" || v.Releases["reports"] != "step" {
		t.Errorf("Get() deployment release %q %v, want events and reports=step", v.Release, v.Releases)
	}
	// Without its live item, reports takes its TypeReleaseModes entry.
	if _, err := e.Reset(context.Background(), "reports", false); err != nil {
		t.Fatal(err)
	}
	one, err := e.Get(context.Background(), "reports")
	if err != nil || len(one.Types) != 1 || one.Types[0].Release != "step" || one.Types[0].ReleaseSource != ReleaseFromType {
		t.Errorf("Get(reports) after reset = %+v, %v; want step from TypeReleaseModes", one.Types, err)
	}
	var b strings.Builder
	if err := one.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"RELEASE", "step (TypeReleaseModes)", "Release mode without an override: events (ReleaseMode), but reports=step (TypeReleaseModes)."} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("WriteTable() lacks %q:\n%s", w, b.String())
		}
	}
	// The live item's release mode is shown with its other fields.
	if got := (&OverrideView{Limit: 2, Release: "events"}).String(); got != "limit=2 release=events" {
		t.Errorf("OverrideView.String() = %q", got)
	}
	// A hand-written item with an unknown mode is ignored by the functions, and said to be.
	e = ConfigEditor{Store: newMemStore(config.Override{Type: "payments", Limit: 4, Release: "event"}), Defaults: defaults()}
	if v, err := e.Get(context.Background(), ""); err != nil || len(v.Ignored) != 1 || !strings.Contains(v.Ignored[0], `unknown release mode "event"`) {
		t.Errorf("Get() with a bad stored mode = %+v, %v; want it reported as ignored", v.Ignored, err)
	}
	var ue UsageError
	if _, err := e.Set(context.Background(), Change{Type: "payments", Release: ptr("fast")}); !errors.As(err, &ue) {
		t.Errorf("Set(--release fast) = %v, want a usage error", err)
	}
}

// A change the limiter's rules refuse is a usage error (exit 2), as a bad flag is: the limits over
// the quota, a state machine that does not exist, events mode on an Express workflow. A check that
// could not be made (Step Functions failing) is an error (exit 1).
func TestConfigSetRefusalsAreUsageErrors(t *testing.T) {
	denied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized"}
	tests := []struct {
		name      string
		stored    []config.Override
		give      Change
		sfnErr    error
		wantUsage bool
	}{
		{name: "over the quota", stored: []config.Override{{Type: "big", Limit: 119000}}, give: Change{Type: "payments", Limit: ptr(1000)}, wantUsage: true},
		{name: "a state machine that does not exist", give: Change{Type: "payments", StateMachineArn: ptr(strings.Replace(mineArn, "mine", "gone", 1))}, wantUsage: true},
		{name: "events on an Express workflow", give: Change{Type: "payments", StateMachineArn: ptr(expressArn), Release: ptr("events")}, wantUsage: true},
		{name: "events not checkable", give: Change{Type: "payments", Release: ptr("events")}, sfnErr: denied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := machines()
			fake.err = tt.sfnErr
			e := ConfigEditor{Store: newMemStore(tt.stored...), Defaults: defaults(), CacheAge: time.Second, SFN: fake}
			_, err := e.Set(context.Background(), tt.give)
			var ue UsageError
			if err == nil || errors.As(err, &ue) != tt.wantUsage {
				t.Errorf("Set() = %v; want an error, a usage error %v", err, tt.wantUsage)
			}
		})
	}
}
