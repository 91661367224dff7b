// Package resources finds a limiter's resources for the command line: from a deployed stack's
// CloudFormation Outputs (DescribeStacks), from the local stack's info file (`sfnlimit local up
// --info FILE`), or from values given one by one, together with the AWS configuration that reaches
// them. The names are the template's Outputs, the same on AWS and locally.
package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sdkhttp"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// Output names of template.yaml the command line reads.
const (
	GeneralQueueURL       = "GeneralQueueUrl"
	LanesQueueURL         = "LanesQueueUrl"
	DeadLetterQueueURL    = "DeadLetterQueueUrl"
	TableName             = "TableName"
	SampleStateMachineArn = "SampleStateMachineArn"
	StarterFunctionName   = "StarterFunctionName"
	// BareStateMachineArn is the second sample, a workflow with no release states (events mode);
	// a stack deployed before it has no such output.
	BareStateMachineArn  = "BareStateMachineArn"
	ReleaserFunctionName = "ReleaserFunctionName"
	// RouterRoleID is the router's role's unique id: the SenderId of the jobs it holds back to the
	// general queue. A stack deployed before it has no such output.
	RouterRoleID = "RouterRoleId"
)

// ExtraStateMachineArns is the template parameter that lists the user's own state machines: the
// starter may start them, and the status-change rules match their events.
const ExtraStateMachineArns = "ExtraStateMachineArns"

// DefaultStackName is the stack name when neither --stack nor samconfig.toml names one.
const DefaultStackName = "sfnlimit"

// Kind says where a target's resources come from.
type Kind string

// Kinds of target.
const (
	Stack Kind = "stack" // a deployed CloudFormation stack
	Local Kind = "local" // the local stack's info file
)

// Options say which limiter to talk to and how.
type Options struct {
	// Stack is the CloudFormation stack name; empty: stack_name of samconfig.toml, else "sfnlimit".
	Stack string
	// LocalFile is the info file `sfnlimit local up --info FILE` wrote; it wins over Stack.
	LocalFile string
	// Profile and Region are the standard AWS settings (empty: the SDK's usual sources, such as
	// AWS_PROFILE, AWS_REGION and ~/.aws/config). AWS_ENDPOINT_URL is honoured by the SDK.
	Profile, Region string
	// Samconfig is the samconfig.toml to read stack_name and (for the local stack) parameter
	// values from, and ConfigEnv its environment (default "default"). A missing file is skipped.
	Samconfig, ConfigEnv string
	// Values are resources given one by one, by output name; they win over the stack's Outputs or
	// the info file. When every value a command needs is here, the stack is not looked up.
	Values map[string]string
	// Params are template parameter values of the local stack (as given to `local up --param`).
	Params map[string]string
	// Root is the repository root holding template.yaml, for the local stack's defaults; empty:
	// found from the working directory.
	Root string
	// LoadOptions are passed to the SDK's configuration loading (tests use them).
	LoadOptions []func(*awsconfig.LoadOptions) error
}

// Target is one limiter: where its resources are and the AWS configuration to reach them.
type Target struct {
	// Config reaches the limiter's services.
	Config aws.Config
	// Kind and Name say which limiter: the stack name, or the info file.
	Kind Kind
	Name string

	opts   Options
	params map[string]string // local: parameters of the info file, if it has them

	mu         sync.Mutex
	outputs    map[string]string // nil until looked up (stack) or read (local)
	parameters map[string]string // stack: its Parameters, set with outputs
	status     string            // stack status, for messages
	sender     string            // local: the emulator's SenderId (Caller)
}

// ErrStackNotFound means the stack does not exist in the account and region.
var ErrStackNotFound = errors.New("stack not found")

// Open prepares a target. For a stack it loads the AWS configuration and checks that a region and
// credentials are there, so that a missing one is reported before any call; the stack itself is
// looked up on the first Output that needs it.
func Open(ctx context.Context, opts Options) (*Target, error) {
	if opts.ConfigEnv == "" {
		opts.ConfigEnv = "default"
	}
	if opts.LocalFile != "" {
		return openLocal(opts)
	}
	t := &Target{Kind: Stack, Name: opts.Stack, opts: opts}
	if t.Name == "" {
		name, err := StackNameIfPresent(opts.Samconfig, opts.ConfigEnv)
		if err != nil {
			return nil, err
		}
		t.Name = name
	}
	lo := append([]func(*awsconfig.LoadOptions) error{}, opts.LoadOptions...)
	if opts.Profile != "" {
		lo = append(lo, awsconfig.WithSharedConfigProfile(opts.Profile))
	}
	if opts.Region != "" {
		lo = append(lo, awsconfig.WithRegion(opts.Region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		var pe awsconfig.SharedConfigProfileNotExistError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("AWS profile %q is not in the shared config or credentials files (~/.aws/config, ~/.aws/credentials)", pe.Profile)
		}
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: give --region, set AWS_REGION, or set a region for the profile in ~/.aws/config")
	}
	if cfg.Credentials == nil {
		return nil, errors.New("no AWS credentials: give --profile, set AWS_PROFILE, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(cctx); err != nil {
		return nil, fmt.Errorf("no usable AWS credentials (give --profile, set AWS_PROFILE, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; for SSO run aws sso login): %w", err)
	}
	cfg.HTTPClient = sdkhttp.Client(cfg.HTTPClient) // a write the SDK retries after it took effect fails its condition
	t.Config = cfg
	return t, nil
}

// localInfo is the info file: stack.Info, and the template parameters the stack runs with when the
// file carries them.
type localInfo struct {
	stack.Info
	Parameters map[string]string `json:"parameters,omitempty"`
}

func openLocal(opts Options) (*Target, error) {
	b, err := os.ReadFile(opts.LocalFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("local stack info file %s does not exist: start the local stack with `sfnlimit local up --info %s` (it removes the file when it stops)", opts.LocalFile, opts.LocalFile)
	}
	if err != nil {
		return nil, fmt.Errorf("read local stack info: %w", err)
	}
	var info localInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("local stack info file %s is not what `sfnlimit local up --info` writes: %w", opts.LocalFile, err)
	}
	if info.Endpoint == "" || len(info.Outputs) == 0 {
		return nil, fmt.Errorf("local stack info file %s has no endpoint or outputs", opts.LocalFile)
	}
	region := info.Region
	if region == "" {
		region = stack.Region
	}
	t := &Target{
		Kind: Local,
		Name: opts.LocalFile,
		Config: aws.Config{
			Region:       region,
			Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
			BaseEndpoint: aws.String(info.Endpoint),
			HTTPClient:   sdkhttp.Client(nil),
		},
		opts:    opts,
		params:  info.Parameters,
		outputs: info.Outputs,
		sender:  info.SenderID,
	}
	return t, nil
}

// Caller is the principal (batch.Principal) the caller's credentials send SQS messages as: the
// owner of the batches the command line opens, whose jobs those batches count. On a stack it is
// STS GetCallerIdentity's UserId, which has the form of the SenderId SQS gives the caller's
// messages ("AIDA…" for an IAM user, "AROA…:session" for an assumed role). On the local stack it
// is the SenderId its SQS emulator gives every message (the info file's senderId): the emulators
// answer GetCallerIdentity with another id than they put in SenderId.
func (t *Target) Caller(ctx context.Context) (string, error) {
	if t.Kind == Local {
		if t.sender == "" {
			return "", fmt.Errorf("local stack info file %s has no senderId: restart the local stack with this sfnlimit (`sfnlimit local up`)", t.Name)
		}
		return batch.Principal(t.sender), nil
	}
	out, err := sts.NewFromConfig(t.Config).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", fmt.Errorf("who opens the batch (sts:GetCallerIdentity): %w", err)
	}
	p := batch.Principal(aws.ToString(out.UserId))
	if p == "" {
		return "", fmt.Errorf("who opens the batch: sts:GetCallerIdentity gave no UserId")
	}
	return p, nil
}

// String names the target for people: "stack sfnlimit (us-east-1)" or "local stack local.json".
func (t *Target) String() string {
	if t.Kind == Local {
		return "local stack " + t.Name
	}
	return fmt.Sprintf("stack %s (%s)", t.Name, t.Config.Region)
}

// Output returns one resource by output name: a value given in Options.Values, else the info file's
// or the stack's output (the stack is described once, on first need).
func (t *Target) Output(ctx context.Context, name string) (string, error) {
	if v := t.opts.Values[name]; v != "" {
		return v, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.describe(ctx); err != nil {
		return "", err
	}
	v, ok := t.outputs[name]
	if !ok || v == "" {
		what := "info file " + t.Name
		if t.Kind == Stack {
			what = fmt.Sprintf("stack %s (status %s)", t.Name, t.status)
		}
		return "", fmt.Errorf("%s has no output %s: is it an sfnlimit stack? (its outputs: %s)", what, name, strings.Join(sortedKeys(t.outputs), ", "))
	}
	return v, nil
}

// describe looks the stack up once (DescribeStacks), for its outputs, parameters and status; the
// local stack's outputs are the info file's. Called with t.mu held.
func (t *Target) describe(ctx context.Context) error {
	if t.outputs != nil {
		return nil
	}
	d, err := describeStack(ctx, cloudformation.NewFromConfig(t.Config), t.Name)
	if err != nil {
		if errors.Is(err, ErrStackNotFound) {
			return fmt.Errorf("%w: no stack %q in region %s: deploy it (sam deploy), or name another with --stack, --region or --profile, or use --local FILE for the local stack", err, t.Name, t.Config.Region)
		}
		return err
	}
	t.outputs, t.parameters, t.status = d.outputs, d.parameters, d.status
	return nil
}

// Parameters returns the template parameters the limiter runs with, as far as they were set: a
// stack's Parameters (DescribeStacks, even when every output was given by flag), or the local
// stack's (the info file's, else samconfig.toml's, then Options.Params). A parameter left at the
// template's default may be missing.
func (t *Target) Parameters(ctx context.Context) (map[string]string, error) {
	if t.Kind == Local {
		return t.localParams()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parameters == nil {
		// Outputs given by flag spare the lookup; parameters need it.
		if err := t.describe(ctx); err != nil {
			return nil, fmt.Errorf("read the parameters of stack %s (needs cloudformation:DescribeStacks): %w", t.Name, err)
		}
	}
	out := make(map[string]string, len(t.parameters))
	for k, v := range t.parameters {
		out[k] = v
	}
	return out, nil
}

// StackStatus is the deployed stack's status once it was described ("" for the local stack, or
// before).
func (t *Target) StackStatus() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status
}

// Outputs returns several resources at once (see Output).
func (t *Target) Outputs(ctx context.Context, names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	for _, n := range names {
		v, err := t.Output(ctx, n)
		if err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, nil
}

type describeStacksAPI interface {
	DescribeStacks(context.Context, *cloudformation.DescribeStacksInput, ...func(*cloudformation.Options)) (*cloudformation.DescribeStacksOutput, error)
}

// stackDesc is what the command line reads of a stack.
type stackDesc struct {
	outputs    map[string]string
	parameters map[string]string
	status     string
}

// describeStack returns a stack's Outputs and Parameters by name, and its status.
func describeStack(ctx context.Context, cf describeStacksAPI, name string) (stackDesc, error) {
	out, err := cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
	if err != nil {
		if code, msg := apiError(err); code == "ValidationError" && strings.Contains(msg, "does not exist") {
			return stackDesc{}, ErrStackNotFound
		}
		return stackDesc{}, fmt.Errorf("describe stack %s: %w", name, err)
	}
	if len(out.Stacks) == 0 {
		return stackDesc{}, ErrStackNotFound
	}
	s := out.Stacks[0]
	d := stackDesc{outputs: map[string]string{}, parameters: map[string]string{}, status: string(s.StackStatus)}
	for _, o := range s.Outputs {
		d.outputs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	for _, p := range s.Parameters {
		d.parameters[aws.ToString(p.ParameterKey)] = aws.ToString(p.ParameterValue)
	}
	return d, nil
}

type functionConfigAPI interface {
	GetFunctionConfiguration(context.Context, *lambda.GetFunctionConfigurationInput, ...func(*lambda.Options)) (*lambda.GetFunctionConfigurationOutput, error)
}

// Defaults returns the deployment defaults the limiter's functions run with, and how long they
// cache live overrides. For a stack they are the starter function's environment (the template sets
// it from the parameters; lambda:GetFunctionConfiguration); the local stack's are resolved from
// template.yaml with the parameters it runs with (see localDefaults).
func (t *Target) Defaults(ctx context.Context) (config.Defaults, time.Duration, error) {
	var env map[string]string
	if t.Kind == Local && t.opts.Values[StarterFunctionName] == "" {
		var err error
		if env, err = t.localEnv(); err != nil {
			return config.Defaults{}, 0, err
		}
	} else {
		fn, err := t.Output(ctx, StarterFunctionName)
		if err != nil {
			return config.Defaults{}, 0, err
		}
		if env, err = functionEnv(ctx, lambda.NewFromConfig(t.Config), fn); err != nil {
			return config.Defaults{}, 0, err
		}
	}
	d, age, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		return config.Defaults{}, 0, fmt.Errorf("the limiter's defaults (%s): %w", t, err)
	}
	return d, age, nil
}

func functionEnv(ctx context.Context, api functionConfigAPI, fn string) (map[string]string, error) {
	out, err := api.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(fn)})
	if err != nil {
		return nil, fmt.Errorf("read the limiter's defaults from function %s (needs lambda:GetFunctionConfiguration): %w", fn, err)
	}
	if out.Environment == nil {
		return map[string]string{}, nil
	}
	return out.Environment.Variables, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
