package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

// target holds the flags that say which limiter a command talks to.
type target struct {
	stack, local, profile, region string
	samconfig, configEnv          string
	general, lanes, dlq, table    string
	starter                       string
	params                        []string
}

// targetHelp is the part of each operator command's help that says how the limiter is found.
const targetHelp = `
The limiter is found from, in order: --local FILE (the info file of "sfnlimit local up --info
FILE", or $SFNLIMIT_LOCAL); the queue, table and function flags, each on its own; the Outputs of
the CloudFormation stack --stack (or $SFNLIMIT_STACK, else samconfig.toml's stack_name, else
"sfnlimit"). AWS settings are the standard ones: --profile or AWS_PROFILE, --region or AWS_REGION,
AWS_ENDPOINT_URL, ~/.aws/config. Exit codes: 0 ok, 1 error, 2 a usage or validation error (also
a refusal that --force overrides), 130 interrupted (Ctrl-C).`

func (t *target) register(fs *pflag.FlagSet) {
	fs.StringVar(&t.stack, "stack", "", "CloudFormation stack name (default: $SFNLIMIT_STACK, samconfig.toml's stack_name, or sfnlimit)")
	fs.StringVar(&t.local, "local", "", "use the local stack described by `FILE`, the info file of \"sfnlimit local up --info\" (default: $SFNLIMIT_LOCAL)")
	fs.StringVar(&t.profile, "profile", "", "AWS profile (default: AWS_PROFILE or the default profile)")
	fs.StringVar(&t.region, "region", "", "AWS region (default: AWS_REGION or the profile's region)")
	fs.StringVar(&t.samconfig, "samconfig", "samconfig.toml", "samconfig file to read stack_name (and the local stack's parameters) from; skipped if absent")
	fs.StringVar(&t.configEnv, "config-env", "default", "samconfig environment to read")
	fs.StringVar(&t.general, "general-queue-url", "", "general queue URL (instead of the stack's GeneralQueueUrl)")
	fs.StringVar(&t.lanes, "lanes-queue-url", "", "lanes (FIFO) queue URL (instead of the stack's LanesQueueUrl)")
	fs.StringVar(&t.dlq, "dead-letter-queue-url", "", "dead-letter queue URL (instead of the stack's DeadLetterQueueUrl)")
	fs.StringVar(&t.table, "table", "", "leases and live-config table (instead of the stack's TableName)")
	fs.StringVar(&t.starter, "starter-function", "", "starter function, whose environment holds the defaults (instead of the stack's StarterFunctionName)")
	fs.StringArrayVar(&t.params, "param", nil, "local stack only: a template parameter it runs with, as given to \"local up --param\": `Name=Value` (repeatable)")
}

// flagArgs are the target flags given, as a command line names them (shell-quoted), so that a
// command the tool prints reaches the same limiter.
func (t *target) flagArgs() []string {
	var out []string
	for _, f := range []struct{ name, v, unset string }{
		{"--local", t.local, ""}, {"--stack", t.stack, ""}, {"--profile", t.profile, ""}, {"--region", t.region, ""},
		{"--samconfig", t.samconfig, "samconfig.toml"}, {"--config-env", t.configEnv, "default"},
		{"--general-queue-url", t.general, ""}, {"--lanes-queue-url", t.lanes, ""}, {"--dead-letter-queue-url", t.dlq, ""},
		{"--table", t.table, ""}, {"--starter-function", t.starter, ""},
	} {
		if f.v != f.unset {
			out = append(out, f.name, ops.ShellQuote(f.v))
		}
	}
	for _, p := range t.params {
		out = append(out, "--param", ops.ShellQuote(p))
	}
	return out
}

// registerTarget adds the target flags to cmd, for it and its subcommands, with completion.
func registerTarget(cmd *cobra.Command, t *target) {
	t.register(cmd.PersistentFlags())
	_ = cmd.MarkPersistentFlagFilename("local", "json")
	_ = cmd.MarkPersistentFlagFilename("samconfig", "toml")
}

// open finds the limiter.
func (t *target) open(ctx context.Context) (*resources.Target, error) {
	opts := resources.Options{
		Stack: t.stack, LocalFile: t.local, Profile: t.profile, Region: t.region,
		Samconfig: t.samconfig, ConfigEnv: t.configEnv,
		Values: map[string]string{
			resources.GeneralQueueURL: t.general, resources.LanesQueueURL: t.lanes,
			resources.DeadLetterQueueURL: t.dlq, resources.TableName: t.table,
			resources.StarterFunctionName: t.starter,
		},
	}
	if opts.LocalFile == "" && opts.Stack == "" {
		opts.LocalFile = os.Getenv("SFNLIMIT_LOCAL")
	}
	if opts.Stack == "" {
		opts.Stack = os.Getenv("SFNLIMIT_STACK")
	}
	if len(t.params) > 0 {
		opts.Params = map[string]string{}
		for _, kv := range t.params {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, usageError{fmt.Errorf("--param %q is not Name=Value", kv)}
			}
			opts.Params[k] = v
		}
	}
	return resources.Open(ctx, opts)
}

// session is an opened target with its clients, built once per command.
type session struct {
	t   *resources.Target
	sqs *sqs.Client
	ddb *dynamodb.Client
	sfn *sfn.Client
}

func (t *target) session(ctx context.Context) (*session, error) {
	rt, err := t.open(ctx)
	if err != nil {
		return nil, err
	}
	return &session{t: rt, sqs: sqs.NewFromConfig(rt.Config), ddb: dynamodb.NewFromConfig(rt.Config), sfn: sfn.NewFromConfig(rt.Config)}, nil
}

// resolver returns a config resolver of the limiter's defaults and live overrides, and the defaults.
func (s *session) resolver(ctx context.Context) (*config.Resolver, config.Defaults, time.Duration, error) {
	d, age, err := s.t.Defaults(ctx)
	if err != nil {
		return nil, config.Defaults{}, 0, err
	}
	table, err := s.t.Output(ctx, resources.TableName)
	if err != nil {
		return nil, config.Defaults{}, 0, err
	}
	r, err := config.NewResolver(d, config.NewDynamoStore(s.ddb, table), time.Second)
	if err != nil {
		return nil, config.Defaults{}, 0, err
	}
	return r, d, age, nil
}

// explain adds what to do about a failure, when the target knows.
func (s *session) explain(err error) error {
	if err == nil {
		return nil
	}
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	if h := s.t.Hint(err); h != "" {
		return hinted{err: err, hint: h}
	}
	return err
}

// hinted is an error with advice for the operator.
type hinted struct {
	err  error
	hint string
}

func (h hinted) Error() string { return h.err.Error() + "\n  hint: " + h.hint }
func (h hinted) Unwrap() error { return h.err }
