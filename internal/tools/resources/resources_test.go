package resources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"
)

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStackNameIfPresent(t *testing.T) {
	tests := []struct {
		name    string
		give    string // samconfig.toml; "" for no file
		env     string
		want    string
		wantErr bool
	}{
		{name: "no file", want: "sfnlimit"},
		{name: "deploy", give: "version = 0.1\n[default.deploy.parameters]\nstack_name = \"prod-limiter\"\n", want: "prod-limiter"},
		{name: "global", give: "version = 0.1\n[default.global.parameters]\nstack_name = \"g\"\n", want: "g"},
		{name: "deploy wins", give: "version = 0.1\n[default.global.parameters]\nstack_name = \"g\"\n[default.deploy.parameters]\nstack_name = \"d\"\n", want: "d"},
		{name: "other environment", give: "version = 0.1\n[default.deploy.parameters]\nstack_name = \"d\"\n[staging.deploy.parameters]\nstack_name = \"s\"\n", env: "staging", want: "s"},
		{name: "no stack_name", give: "version = 0.1\n[default.deploy.parameters]\nresolve_s3 = true\n", want: "sfnlimit"},
		{name: "not a name", give: "version = 0.1\n[default.deploy.parameters]\nstack_name = 3\n", wantErr: true},
		{name: "not toml", give: "[[[", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "absent.toml")
			if tt.give != "" {
				path = write(t, "samconfig.toml", tt.give)
			}
			got, err := StackNameIfPresent(path, tt.env)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("StackNameIfPresent() = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	// The project's own samconfig.toml names the stack.
	if got, err := StackNameIfPresent("../../../samconfig.toml", "default"); err != nil || got != "sfnlimit" {
		t.Errorf("StackNameIfPresent(samconfig.toml) = %q, %v", got, err)
	}
}

const info = `{"endpoint": "http://127.0.0.1:4566", "region": "us-east-1", "outputs": {
  "GeneralQueueUrl": "http://127.0.0.1:4566/123456789012/g", "TableName": "t",
  "SampleStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample"}}`

func TestOpenLocal(t *testing.T) {
	ctx := context.Background()
	tg, err := Open(ctx, Options{LocalFile: write(t, "local.json", info), Values: map[string]string{TableName: "other"}})
	if err != nil {
		t.Fatal(err)
	}
	if tg.Kind != Local || tg.Config.Region != "us-east-1" || aws.ToString(tg.Config.BaseEndpoint) != "http://127.0.0.1:4566" {
		t.Errorf("Open() = %+v", tg)
	}
	if v, err := tg.Output(ctx, GeneralQueueURL); err != nil || v != "http://127.0.0.1:4566/123456789012/g" {
		t.Errorf("Output(GeneralQueueUrl) = %q, %v", v, err)
	}
	if v, _ := tg.Output(ctx, TableName); v != "other" {
		t.Errorf("Output(TableName) = %q, want the value given", v)
	}
	if _, err := tg.Output(ctx, LanesQueueURL); err == nil || !strings.Contains(err.Error(), "has no output LanesQueueUrl") {
		t.Errorf("Output(LanesQueueUrl) = %v, want no such output", err)
	}
	if !strings.HasPrefix(tg.String(), "local stack ") {
		t.Errorf("String() = %q", tg)
	}

	for name, tt := range map[string]struct{ file, want string }{
		"missing":    {file: filepath.Join(t.TempDir(), "gone.json"), want: "sfnlimit local up --info"},
		"not json":   {file: write(t, "bad.json", "{"), want: "is not what"},
		"no outputs": {file: write(t, "empty.json", `{"endpoint":"http://x"}`), want: "no endpoint or outputs"},
	} {
		if _, err := Open(ctx, Options{LocalFile: tt.file}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Open() = %v, want %q", name, err, tt.want)
		}
	}
}

// The local stack's defaults are the template's, with samconfig.toml's parameters, the info file's
// when it has them, and --param on top.
func TestLocalDefaults(t *testing.T) {
	ctx := context.Background()
	samcfg := write(t, "samconfig.toml", "version = 0.1\n[default.deploy.parameters]\nparameter_overrides = [\"TypeLimits=payments=3\", \"DefaultMaxAttempts=4\"]\n")
	withParams := strings.Replace(info, `"outputs"`, `"parameters": {"TypeLimits": "llm=9", "ConfigCacheSeconds": "5"}, "outputs"`, 1)
	tests := []struct {
		name      string
		opts      Options
		wantLimit map[string]int
		wantTries int
		wantCache string
	}{
		{name: "template defaults", opts: Options{LocalFile: write(t, "l.json", info)}, wantLimit: map[string]int{"demo": 5}, wantTries: 3, wantCache: "30s"},
		{name: "samconfig", opts: Options{LocalFile: write(t, "l.json", info), Samconfig: samcfg}, wantLimit: map[string]int{"payments": 3}, wantTries: 4, wantCache: "30s"},
		{name: "params", opts: Options{LocalFile: write(t, "l.json", info), Samconfig: samcfg, Params: map[string]string{"TypeLimits": "a=1,b=2", "DefaultLimit": "7"}}, wantLimit: map[string]int{"a": 1, "b": 2}, wantTries: 4, wantCache: "30s"},
		{name: "info file parameters", opts: Options{LocalFile: write(t, "l.json", withParams), Samconfig: samcfg}, wantLimit: map[string]int{"llm": 9}, wantTries: 3, wantCache: "5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Root = "../../.."
			tg, err := Open(ctx, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			d, age, err := tg.Defaults(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(d.Limits) != fmt.Sprint(tt.wantLimit) || d.DefaultMaxAttempts != tt.wantTries || age.String() != tt.wantCache {
				t.Errorf("Defaults() = %+v, %v; want limits %v, %d attempts, cache %s", d, age, tt.wantLimit, tt.wantTries, tt.wantCache)
			}
			if d.StateMachineArn != "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample" {
				t.Errorf("Defaults() state machine = %q, want the info file's", d.StateMachineArn)
			}
			if tt.name == "params" && d.FallbackLimit != 7 {
				t.Errorf("Defaults() fallback = %d, want 7", d.FallbackLimit)
			}
		})
	}
	for _, bad := range []map[string]string{{"NoSuchParameter": "1"}, {"TypeLimits": "a-b=1"}, {"DefaultMaxAttempts": "0"}, {"ReleaseMode": "status"}, {"TypeReleaseModes": "llm=event"}, {"TypeOverflow": "reindex=debounce"}} {
		tg, err := Open(ctx, Options{LocalFile: write(t, "l.json", info), Root: "../../..", Params: bad})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tg.Defaults(ctx); err == nil {
			t.Errorf("Defaults() with %v = nil, want an error", bad)
		}
	}
}

// The release modes reach the defaults the way the other parameters do: RELEASE_MODE and
// TYPE_RELEASE_MODES of the starter's environment, which the template sets from ReleaseMode and
// TypeReleaseModes.
func TestLocalDefaultsReleaseModes(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name         string
		params       map[string]string
		wantRelease  string
		wantReleases map[string]string
	}{
		{name: "template defaults", wantRelease: "step", wantReleases: map[string]string{}},
		{name: "deployment mode", params: map[string]string{"ReleaseMode": "events"}, wantRelease: "events", wantReleases: map[string]string{}},
		{name: "per type", params: map[string]string{"TypeReleaseModes": "llm=events,payments=step"}, wantRelease: "step", wantReleases: map[string]string{"llm": "events", "payments": "step"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := Open(ctx, Options{LocalFile: write(t, "l.json", info), Root: "../../..", Params: tt.params})
			if err != nil {
				t.Fatal(err)
			}
			d, _, err := tg.Defaults(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d.Release != tt.wantRelease || fmt.Sprint(d.Releases) != fmt.Sprint(tt.wantReleases) {
				t.Errorf("Defaults() release %q %v, want %q %v", d.Release, d.Releases, tt.wantRelease, tt.wantReleases)
			}
		})
	}
}

// The overflow rules reach the defaults as TYPE_OVERFLOW of the starter's environment, which the
// template sets from TypeOverflow.
func TestLocalDefaultsOverflows(t *testing.T) {
	ctx := context.Background()
	for params, want := range map[string]map[string]string{"": {}, "reindex=cancel,sync=queue": {"reindex": "cancel", "sync": "queue"}} {
		tg, err := Open(ctx, Options{LocalFile: write(t, "l.json", info), Root: "../../..", Params: map[string]string{"TypeOverflow": params}})
		if err != nil {
			t.Fatal(err)
		}
		d, _, err := tg.Defaults(ctx)
		if err != nil || fmt.Sprint(d.Overflows) != fmt.Sprint(want) {
			t.Errorf("Defaults() with TypeOverflow %q: overflows %v, %v; want %v", params, d.Overflows, err, want)
		}
	}
}

// The local stack's parameters are the info file's (else samconfig.toml's), with --param on top.
func TestLocalParameters(t *testing.T) {
	ctx := context.Background()
	samcfg := write(t, "samconfig.toml", "version = 0.1\n[default.deploy.parameters]\nparameter_overrides = [\"TypeLimits=payments=3\"]\n")
	withParams := strings.Replace(info, `"outputs"`, `"parameters": {"ExtraStateMachineArns": "arn:x"}, "outputs"`, 1)
	tests := []struct {
		name string
		opts Options
		want map[string]string
	}{
		{name: "samconfig", opts: Options{LocalFile: write(t, "l.json", info), Samconfig: samcfg}, want: map[string]string{"TypeLimits": "payments=3"}},
		{name: "info file", opts: Options{LocalFile: write(t, "l.json", withParams), Samconfig: samcfg}, want: map[string]string{ExtraStateMachineArns: "arn:x"}},
		{name: "param on top", opts: Options{LocalFile: write(t, "l.json", withParams), Params: map[string]string{ExtraStateMachineArns: "arn:y"}}, want: map[string]string{ExtraStateMachineArns: "arn:y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := Open(ctx, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tg.Parameters(ctx)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Parameters() = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

type stacksFunc func(name string) (*cloudformation.DescribeStacksOutput, error)

func (f stacksFunc) DescribeStacks(_ context.Context, in *cloudformation.DescribeStacksInput, _ ...func(*cloudformation.Options)) (*cloudformation.DescribeStacksOutput, error) {
	return f(aws.ToString(in.StackName))
}

func TestDescribeStack(t *testing.T) {
	api := stacksFunc(func(name string) (*cloudformation.DescribeStacksOutput, error) {
		switch name {
		case "sfnlimit":
			return &cloudformation.DescribeStacksOutput{Stacks: []cftypes.Stack{{StackStatus: cftypes.StackStatusUpdateComplete, Outputs: []cftypes.Output{
				{OutputKey: aws.String("TableName"), OutputValue: aws.String("t")},
			}, Parameters: []cftypes.Parameter{
				{ParameterKey: aws.String(ExtraStateMachineArns), ParameterValue: aws.String("arn:a,arn:b")},
			}}}}, nil
		case "denied":
			return nil, &smithy.GenericAPIError{Code: "AccessDenied", Message: "no"}
		}
		return nil, &smithy.GenericAPIError{Code: "ValidationError", Message: "Stack with id " + name + " does not exist"}
	})
	ctx := context.Background()
	d, err := describeStack(ctx, api, "sfnlimit")
	if err != nil || d.outputs["TableName"] != "t" || d.status != "UPDATE_COMPLETE" || d.parameters[ExtraStateMachineArns] != "arn:a,arn:b" {
		t.Errorf("describeStack(sfnlimit) = %+v, %v", d, err)
	}
	if _, err := describeStack(ctx, api, "nope"); !errors.Is(err, ErrStackNotFound) {
		t.Errorf("describeStack(nope) = %v, want ErrStackNotFound", err)
	}
	if _, err := describeStack(ctx, api, "denied"); err == nil || errors.Is(err, ErrStackNotFound) {
		t.Errorf("describeStack(denied) = %v, want the API error", err)
	}
}

type functionFunc func(name string) (*lambda.GetFunctionConfigurationOutput, error)

func (f functionFunc) GetFunctionConfiguration(_ context.Context, in *lambda.GetFunctionConfigurationInput, _ ...func(*lambda.Options)) (*lambda.GetFunctionConfigurationOutput, error) {
	return f(aws.ToString(in.FunctionName))
}

func TestFunctionEnv(t *testing.T) {
	api := functionFunc(func(name string) (*lambda.GetFunctionConfigurationOutput, error) {
		if name == "starter" {
			return &lambda.GetFunctionConfigurationOutput{Environment: &lambdatypes.EnvironmentResponse{Variables: map[string]string{"TYPE_LIMITS": "a=1"}}}, nil
		}
		return nil, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "no"}
	})
	env, err := functionEnv(context.Background(), api, "starter")
	if err != nil || env["TYPE_LIMITS"] != "a=1" {
		t.Errorf("functionEnv(starter) = %v, %v", env, err)
	}
	if _, err := functionEnv(context.Background(), api, "other"); err == nil || !strings.Contains(err.Error(), "lambda:GetFunctionConfiguration") {
		t.Errorf("functionEnv(other) = %v, want the permission named", err)
	}
}

func TestHint(t *testing.T) {
	stackT, localT := &Target{Kind: Stack, Name: "s"}, &Target{Kind: Local, Name: "l.json"}
	refused := fmt.Errorf("send: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED})
	tests := []struct {
		name string
		t    *Target
		err  error
		want string
	}{
		{name: "none", t: stackT, err: errors.New("x"), want: ""},
		{name: "expired", t: stackT, err: &smithy.GenericAPIError{Code: "ExpiredToken"}, want: "expired"},
		{name: "bad key", t: stackT, err: &smithy.GenericAPIError{Code: "InvalidClientTokenId"}, want: "did not accept"},
		{name: "denied", t: stackT, err: fmt.Errorf("x: %w", &smithy.GenericAPIError{Code: "AccessDeniedException"}), want: "not allowed"},
		{name: "queue missing", t: stackT, err: &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.NonExistentQueue"}, want: "--region"},
		{name: "local stopped", t: localT, err: refused, want: "still running"},
		{name: "endpoint down", t: stackT, err: refused, want: "AWS_ENDPOINT_URL"},
	}
	for _, tt := range tests {
		if got := tt.t.Hint(tt.err); !strings.Contains(got, tt.want) || (tt.want == "" && got != "") {
			t.Errorf("%s: Hint() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// On the local stack the caller is the SenderId its SQS emulator gives every message (the info
// file's senderId), up to its first ':'; an info file without it is an error that says to restart.
func TestLocalCaller(t *testing.T) {
	ctx := context.Background()
	withSender := strings.Replace(info, `"region": "us-east-1",`, `"region": "us-east-1", "senderId": "AIDAIT2UOQQY3AUEKVGXU",`, 1)
	tg, err := Open(ctx, Options{LocalFile: write(t, "local.json", withSender)})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := tg.Caller(ctx); err != nil || p != "AIDAIT2UOQQY3AUEKVGXU" {
		t.Errorf("Caller() = %q, %v; want the emulator's SenderId", p, err)
	}
	old, err := Open(ctx, Options{LocalFile: write(t, "old.json", info)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Caller(ctx); err == nil || !strings.Contains(err.Error(), "senderId") {
		t.Errorf("Caller() of an info file without senderId = %v, want an error naming it", err)
	}
}
