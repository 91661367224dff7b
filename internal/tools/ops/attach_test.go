package ops

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

func TestAttachValidate(t *testing.T) {
	tests := []struct {
		name    string
		give    Attach
		wantErr string
	}{
		{name: "ok", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 3}},
		{name: "step", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 3, Release: "step", MaxAttempts: ptr(2)}},
		{name: "not an ARN", give: Attach{StateMachineArn: "mine", Type: "llm", Limit: 3}, wantErr: `"mine" is not a state machine ARN`},
		{name: "a version", give: Attach{StateMachineArn: mineArn + ":3", Type: "llm", Limit: 3}},
		{name: "an alias", give: Attach{StateMachineArn: mineArn + ":prod", Type: "llm", Limit: 3}},
		{name: "two qualifiers", give: Attach{StateMachineArn: mineArn + ":prod:3", Type: "llm", Limit: 3}, wantErr: "is not a state machine ARN"},
		{name: "bad type", give: Attach{StateMachineArn: mineArn, Type: "l-m", Limit: 3}, wantErr: "--type: invalid_type"},
		{name: "no type", give: Attach{StateMachineArn: mineArn, Limit: 3}, wantErr: "--type: missing_type"},
		{name: "no limit", give: Attach{StateMachineArn: mineArn, Type: "llm"}, wantErr: "--limit 0 must be at least 1"},
		{name: "limit at the quota", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: config.MaxInFlight}, wantErr: "in-flight quota"},
		{name: "bad release", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 3, Release: "event"}, wantErr: `--release: unknown release mode "event" (known: step, events)`},
		{name: "bad attempts", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 3, MaxAttempts: ptr(0)}, wantErr: "--max-attempts 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			var ue UsageError
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue)) {
				t.Errorf("Validate() = %v, want a usage error with %q", err, tt.wantErr)
			}
		})
	}
}

// attach checks the state machine, the stack's roles and the quota, and writes the type's override
// only when nothing stops it; a refusal writes nothing and says why (and, when the stack must be
// redeployed, how).
func TestAttach(t *testing.T) {
	const other = "arn:aws:states:us-east-1:123456789012:stateMachine:other"
	existing := "arn:aws:states:us-east-1:123456789012:stateMachine:old"
	denied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "no"}
	tests := []struct {
		name     string
		give     Attach
		stored   []config.Override
		extra    []string
		extraErr error
		status   string
		sfnErr   error
		region   string
		fallback int
		// what refuses ("" none), with the refusal's words
		wantFail, wantErr string
		wantRedeploy      string
		want              config.Override // stored after
		wantChecks        map[string]string
		wantDetail        []string // in some check's detail
	}{
		{
			name: "listed in ExtraStateMachineArns", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 4}, extra: []string{existing, mineArn},
			want:       config.Override{Type: "llm", Limit: 4, StateMachineArn: mineArn, Release: "events"},
			wantChecks: map[string]string{"state machine": CheckOK, "release": CheckOK, "stack roles": CheckOK, "status events": CheckOK, "type": CheckOK, "quota": CheckOK},
			wantDetail: []string{"mine exists: STANDARD, ACTIVE", "listed in the stack's ExtraStateMachineArns", "llm is a new type", "limits add up to 11 lanes", "StartExecution refills 300/s in us-east-1: 11 lanes stay full only with jobs of 0.037 s or longer"},
		},
		{
			name: "the sample in step mode, attempts and the strategy kept", give: Attach{StateMachineArn: sampleArn, Type: "payments", Limit: 6, Release: "step", MaxAttempts: ptr(5)},
			stored:     []config.Override{{Type: "payments", Strategy: "random", MaxAttempts: 2}},
			want:       config.Override{Type: "payments", Limit: 6, StateMachineArn: sampleArn, Release: "step", MaxAttempts: 5, Strategy: "random"},
			wantChecks: map[string]string{"release": CheckOK, "stack roles": CheckOK, "type": CheckOK},
			wantDetail: []string{"the stack's own state machine (SampleStateMachineArn)", "step mode: its Release state calls the releaser", "payments already runs sfnlimit-sample: its limit is now 6"},
		},
		{
			name: "the sample in events mode: its Release state noted", give: Attach{StateMachineArn: sampleArn, Type: "payments", Limit: 2},
			want:       config.Override{Type: "payments", Limit: 2, StateMachineArn: sampleArn, Release: "events"},
			wantChecks: map[string]string{"release": CheckNote},
		},
		{
			name: "step mode on a workflow without a Release state", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 1, Release: "step"}, extra: []string{mineArn},
			want:       config.Override{Type: "llm", Limit: 1, StateMachineArn: mineArn, Release: "step"},
			wantChecks: map[string]string{"release": CheckWarn},
			wantDetail: []string{"does not name the releaser (sfnlimit-ReleaserFunction-abc)"},
		},
		{
			name: "a type moved to another machine", give: Attach{StateMachineArn: mineArn, Type: "payments", Limit: 2}, extra: []string{mineArn},
			want:       config.Override{Type: "payments", Limit: 2, StateMachineArn: mineArn, Release: "events"},
			wantChecks: map[string]string{"type": CheckWarn},
			wantDetail: []string{"payments ran state machine sfnlimit-sample: its new jobs start mine"},
		},
		{
			// Step Functions authorizes a version or alias by its state machine's ARN, names its
			// executions after the state machine, and lists them under it: the stack lists the
			// machine, and the type starts the version or alias.
			name: "a version of a listed machine", give: Attach{StateMachineArn: mineArn + ":3", Type: "llm", Limit: 4}, extra: []string{mineArn},
			want:       config.Override{Type: "llm", Limit: 4, StateMachineArn: mineArn + ":3", Release: "events"},
			wantChecks: map[string]string{"state machine": CheckOK, "stack roles": CheckOK, "status events": CheckOK, "type": CheckOK},
			wantDetail: []string{"mine exists: STANDARD, ACTIVE", "listed in the stack's ExtraStateMachineArns", "starts version 3 of mine"},
		},
		{
			name: "an alias of the sample", give: Attach{StateMachineArn: sampleArn + ":prod", Type: "payments", Limit: 2},
			want:       config.Override{Type: "payments", Limit: 2, StateMachineArn: sampleArn + ":prod", Release: "events"},
			wantChecks: map[string]string{"state machine": CheckOK, "stack roles": CheckOK},
			wantDetail: []string{"the stack's own state machine (SampleStateMachineArn)", "starts alias prod of sfnlimit-sample"},
		},
		{
			name: "an alias of a machine not listed", give: Attach{StateMachineArn: mineArn + ":prod", Type: "llm", Limit: 4}, extra: []string{existing},
			wantFail: "stack roles", wantErr: "the stack's roles may not start mine",
			wantRedeploy: "sam deploy --stack-name sfnlimit --region us-east-1 --parameter-overrides 'ExtraStateMachineArns=" + existing + "," + mineArn + "'",
		},
		{
			// A qualified ARN in ExtraStateMachineArns grants nothing: IAM authorizes by the state
			// machine's ARN, and the status-change rules match the state machine's ARN.
			name: "an alias listed only as an alias", give: Attach{StateMachineArn: mineArn + ":prod", Type: "llm", Limit: 4}, extra: []string{mineArn + ":prod"},
			wantFail: "stack roles", wantErr: "the stack's roles may not start mine",
			// The redeploy lists the state machine instead: the template refuses a qualified ARN.
			wantRedeploy: "sam deploy --stack-name sfnlimit --region us-east-1 --parameter-overrides 'ExtraStateMachineArns=" + mineArn + "'",
		},
		{
			name: "not in ExtraStateMachineArns", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 4}, extra: []string{existing, other},
			wantFail: "stack roles", wantErr: "attach refused, nothing written: the stack's roles may not start mine: it is neither the stack's own state machine nor in ExtraStateMachineArns (now: " + existing + "," + other + ")",
			wantRedeploy: "sam deploy --stack-name sfnlimit --region us-east-1 --parameter-overrides 'ExtraStateMachineArns=" + existing + "," + other + "," + mineArn + "'",
		},
		{
			name: "not listed, none listed", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 4},
			wantFail: "stack roles", wantErr: "(now: empty)",
			wantRedeploy: "sam deploy --stack-name sfnlimit --region us-east-1 --parameter-overrides 'ExtraStateMachineArns=" + mineArn + "'",
		},
		{
			name: "the parameters cannot be read", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 4}, extraErr: errors.New("AccessDenied"),
			wantFail: "stack roles", wantErr: "could not read the stack's ExtraStateMachineArns parameter",
		},
		{
			name: "Express", give: Attach{StateMachineArn: expressArn, Type: "llm", Limit: 4}, extra: []string{expressArn},
			wantFail: "state machine", wantErr: "state machine quick is EXPRESS; the limiter runs Standard workflows only. Express workflows send no status events",
		},
		{
			name: "Express in step mode too", give: Attach{StateMachineArn: expressArn, Type: "llm", Limit: 4, Release: "step"}, extra: []string{expressArn},
			wantFail: "state machine", wantErr: "is EXPRESS",
		},
		{
			name: "no such machine", give: Attach{StateMachineArn: other, Type: "llm", Limit: 4}, extra: []string{other},
			wantFail: "state machine", wantErr: "state machine " + other + " does not exist",
		},
		{
			name: "the machine cannot be described", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 4}, extra: []string{mineArn}, sfnErr: denied,
			wantFail: "state machine", wantErr: "needs states:DescribeStateMachine",
		},
		{
			name: "another region", give: Attach{StateMachineArn: strings.Replace(mineArn, "us-east-1", "eu-west-1", 1), Type: "llm", Limit: 4},
			wantFail: "region and account", wantErr: "is in aws:eu-west-1:123456789012, the limiter in aws:us-east-1:123456789012",
		},
		{
			name: "over the in-flight quota", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 110000}, extra: []string{mineArn},
			stored:   []config.Override{{Type: "big", Limit: 9000}},
			fallback: 1000,
			wantFail: "quota", wantErr: "at or over the SQS FIFO in-flight quota of 120000",
		},
		{
			name: "more lanes than StartExecution's bucket", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 2000}, extra: []string{mineArn}, region: "ap-south-2",
			want:       config.Override{Type: "llm", Limit: 2000, StateMachineArn: mineArn, Release: "events"},
			wantChecks: map[string]string{"quota": CheckWarn},
			wantDetail: []string{"StartExecution refills 150/s in ap-south-2: 2007 lanes stay full only with jobs of 13 s or longer", "more than StartExecution's bucket of 800: filling them all at once takes about 9 s"},
		},
		{
			name: "a stack being updated", give: Attach{StateMachineArn: mineArn, Type: "llm", Limit: 1}, extra: []string{mineArn}, status: "UPDATE_IN_PROGRESS",
			want:       config.Override{Type: "llm", Limit: 1, StateMachineArn: mineArn, Release: "events"},
			wantChecks: map[string]string{"stack": CheckWarn},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := defaults()
			d.FallbackLimit = tt.fallback
			store := newMemStore(tt.stored...)
			fake := machines()
			fake.err = tt.sfnErr
			region := tt.region
			if region == "" {
				region = "us-east-1"
			}
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second, SFN: fake, Stack: &StackAccess{
				Own:   map[string]string{"SampleStateMachineArn": sampleArn, "BareStateMachineArn": strings.Replace(sampleArn, "sample", "bare", 1)},
				Extra: tt.extra, ExtraErr: tt.extraErr, Releaser: "sfnlimit-ReleaserFunction-abc", Region: region, Status: tt.status,
				Redeploy: SamDeploy{Stack: "sfnlimit", Region: "us-east-1"}.Command,
			}}
			res, err := e.Attach(context.Background(), tt.give)
			var b strings.Builder
			if werr := res.WriteTable(&b); werr != nil {
				t.Fatal(werr)
			}
			if tt.wantFail != "" {
				if !errors.Is(err, ErrAttachRefused) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Attach() = %v, want a refusal with %q", err, tt.wantErr)
				}
				if last := res.Checks[len(res.Checks)-1]; last.What != tt.wantFail || last.Result != CheckFail {
					t.Errorf("Attach() checks = %+v, want the last to be %s failing", res.Checks, tt.wantFail)
				}
				if store.writes != 0 || res.Written != nil {
					t.Errorf("a refused attach wrote %d times: %v", store.writes, store.items)
				}
				if res.Redeploy != tt.wantRedeploy {
					t.Errorf("Attach() redeploy = %q, want %q", res.Redeploy, tt.wantRedeploy)
				}
				if tt.wantRedeploy != "" && (!strings.Contains(b.String(), "\n  "+tt.wantRedeploy+"\n") || !strings.Contains(b.String(), "then run attach again.")) {
					t.Errorf("WriteTable() lacks the redeploy line:\n%s", b.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := store.items[tt.give.Type]; !reflect.DeepEqual(got, tt.want) || store.writes != 1 {
				t.Errorf("stored override = %+v after %d writes, want %+v after 1", got, store.writes, tt.want)
			}
			results := map[string]string{}
			for _, c := range res.Checks {
				results[c.What] = c.Result
				if c.Result == CheckFail {
					t.Errorf("Attach() wrote with a failed check: %+v", c)
				}
			}
			for what, want := range tt.wantChecks {
				if results[what] != want {
					t.Errorf("check %q = %q, want %q (checks %+v)", what, results[what], want, res.Checks)
				}
			}
			for _, w := range tt.wantDetail {
				if !strings.Contains(b.String(), w) {
					t.Errorf("WriteTable() lacks %q:\n%s", w, b.String())
				}
			}
			if res.Set == nil || res.Set.After.Limit != tt.want.Limit || res.Set.After.StateMachineArn != tt.want.StateMachineArn || res.Set.After.Release != tt.want.Release || res.Set.After.ReleaseSource != ReleaseFromOverride {
				t.Errorf("Attach() set = %+v, want the type's configuration after", res.Set)
			}
			if !strings.Contains(b.String(), "wrote the live override of type "+tt.give.Type+": limit=") {
				t.Errorf("WriteTable() does not say what it wrote:\n%s", b.String())
			}
		})
	}
}

// The redeploy lines keep the stack as it runs but for ExtraStateMachineArns, quoted for a POSIX
// shell.
func TestRedeployCommands(t *testing.T) {
	extra := []string{mineArn, expressArn}
	tests := []struct {
		name string
		got  string
		want string
	}{
		{
			name: "sam deploy", got: SamDeploy{Stack: "sfnlimit", Region: "eu-west-1"}.Command(extra),
			want: "sam deploy --stack-name sfnlimit --region eu-west-1 --parameter-overrides 'ExtraStateMachineArns=" + mineArn + "," + expressArn + "'",
		},
		{
			name: "sam deploy with a profile and an environment", got: SamDeploy{Stack: "prod limiter", Region: "eu-west-1", Profile: "ops", ConfigEnv: "prod"}.Command(extra[:1]),
			want: "sam deploy --config-env prod --stack-name 'prod limiter' --region eu-west-1 --profile ops --parameter-overrides 'ExtraStateMachineArns=" + mineArn + "'",
		},
		{
			name: "local up", got: LocalUp{Info: "local.json", Params: map[string]string{"TypeLimits": "a=1,b=2", "SweepSchedule": "rate(5 minutes)", "ExtraStateMachineArns": "x"}}.Command(extra[:1]),
			want: "sfnlimit local up --info local.json --param 'SweepSchedule=rate(5 minutes)' --param TypeLimits=a=1,b=2 --param 'ExtraStateMachineArns=" + mineArn + "'",
		},
		{name: "a quote in a value", got: ShellQuote("it's"), want: `'it'\''s'`},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, tt.got, tt.want)
		}
	}
	if got := ParseArnList(" a, ,b,"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("ParseArnList() = %q, want a and b", got)
	}
	if got := appendNew([]string{"a"}, "a"); len(got) != 1 {
		t.Errorf("appendNew() of a listed ARN = %q", got)
	}
}
