// Package stack runs sfnlimit locally: emulators (moto, optionally fauxqs for SQS), a gateway that
// plays Lambda for the workflow's tasks, the resources of template.yaml created on the emulators, and
// a runtime that plays Lambda's event-source mappings and EventBridge for the same Go handlers the
// deployed functions run. template.yaml is read, never restated: a change there changes the stack.
package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sdkhttp"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/callcount"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/gateway"
)

// Region and account of the local stack (the emulators' defaults).
const (
	Region  = cfntemplate.DefaultRegion
	Account = cfntemplate.DefaultAccountID
)

// Options shape a local stack.
type Options struct {
	// Root is the repository root (template.yaml, statemachine/, node_modules/); default: found from
	// the working directory.
	Root string
	// Parameters override template parameters (TypeLimits, FifoVisibilityTimeout, ...).
	Parameters map[string]string
	// Fauxqs sends every SQS call (the functions', the pollers' and the workflow's) to fauxqs, the
	// stricter SQS emulator, instead of moto.
	Fauxqs bool
	// FunctionEnv overrides function environment variables on every function (for example
	// START_RETRY_SECONDS or SWEEP_MIN_AGE_SECONDS, to make a local run faster).
	FunctionEnv map[string]string
	// StatusEvery is how often executions are checked for status-change events (default 1 s).
	StatusEvery time.Duration
	// SweepEvery replaces the schedule's rate locally (default 10 s).
	SweepEvery time.Duration
	// EventDropRate is the share of status-change events never delivered (best effort, as on AWS).
	EventDropRate float64
	// EventDupRate is the share of status-change events delivered a second time, one poll
	// (StatusEvery) later (at least once, as on AWS).
	EventDupRate float64
	// Log receives the stack's and the handlers' logs; default: discarded.
	Log *slog.Logger
	// EmulatorLog receives the emulators' own output; default: discarded.
	EmulatorLog io.Writer
	// FunctionAWSConfig, if set, adjusts the SDK configuration each function's handler is built
	// with ("router", "starter", "releaser"): for example to record its calls
	// (internal/tools/iampolicy) or to give it its role's credentials.
	FunctionAWSConfig func(function string, cfg *aws.Config)
	// SkipIAM turns off the IAM check of the functions' calls: by default each function's calls are
	// refused with AccessDeniedException unless its role in template.yaml allows them, as on AWS
	// (the emulators do not check; docs/emulators.md, "IAM").
	SkipIAM bool
}

// Info is what a client needs to use the stack: the endpoint and the template's Outputs.
type Info struct {
	Endpoint string            `json:"endpoint"`
	Region   string            `json:"region"`
	Outputs  map[string]string `json:"outputs"`
	// Parameters are the template parameters the stack runs with, beyond the template's defaults.
	Parameters map[string]string `json:"parameters,omitempty"`
	// SenderID is the SenderId the stack's SQS emulator gives every message, whoever sends it: the
	// principal of every producer, of the router and of the command line here (MotoSenderID,
	// FauxqsSenderID). The command line opens batches as it.
	SenderID string `json:"senderId,omitempty"`
}

// The SenderId the emulators put on every message. Neither reads it from the caller's
// credentials, so locally all senders are one principal and batch ownership cannot tell two
// producers apart (the simulation and the unit tests do, with SenderIds like AWS's).
const (
	// MotoSenderID: moto 5.2.1, moto/sqs/models.py, DEFAULT_SENDER_ID (every Message's sender_id).
	MotoSenderID = "AIDAIT2UOQQY3AUEKVGXU"
	// FauxqsSenderID: fauxqs 2.4.1, dist/sqs/actions/receiveMessage.js (attrs.SenderId).
	FauxqsSenderID = "000000000000"
)

// Output returns one of the template's outputs.
func (i Info) Output(name string) string { return i.Outputs[name] }

// Stack is a running local stack.
type Stack struct {
	opts      Options
	tpl       *cfntemplate.Template
	resolver  *cfntemplate.Resolver
	attrs     cfntemplate.Attributes
	moto      *emulator.Process
	fauxqs    *emulator.Process
	gw        *gateway.Gateway
	info      Info
	counters  map[string]*callcount.Counter
	metrics   *metrics.Collector
	counterMu sync.Mutex
	log       *slog.Logger

	mu          sync.Mutex
	runtime     *Runtime
	lastRuntime *Runtime
}

// emulatorStarted is told of each emulator Start starts (tests check that a failed Start stops them).
var emulatorStarted = func(*emulator.Process) {}

// Start brings up the emulators and creates the template's resources on them. The runtime (pollers,
// events) is started separately with StartRuntime, so it can be stopped and restarted on the same
// state. When it fails, whatever it started is stopped.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Root == "" {
		var err error
		if opts.Root, err = emulator.RepoRoot(); err != nil {
			return nil, err
		}
	}
	s := &Stack{opts: opts, attrs: cfntemplate.Attributes{}, counters: map[string]*callcount.Counter{}, metrics: metrics.NewCollector(), log: opts.Log}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Stack) start(ctx context.Context) (err error) {
	opts := s.opts
	if s.tpl, err = cfntemplate.Load(filepath.Join(opts.Root, "template.yaml")); err != nil {
		return err
	}
	if s.resolver, err = s.tpl.Resolver(cfntemplate.Env{Parameters: opts.Parameters, Attr: s.attrs.Lookup}); err != nil {
		return err
	}

	if s.gw, err = gateway.New(gateway.Options{Logger: opts.Log}); err != nil {
		return err
	}
	if err = s.gw.Start(context.WithoutCancel(ctx), "127.0.0.1:0"); err != nil {
		return fmt.Errorf("start gateway: %w", err)
	}
	if s.moto, err = emulator.StartMoto(ctx, emulator.MotoOptions{InterpreterEndpoint: s.gw.URL(), LogWriter: opts.EmulatorLog}); err != nil {
		return err
	}
	emulatorStarted(s.moto)
	if err = s.gw.SetMotoURL(s.moto.Endpoint()); err != nil {
		return err
	}
	if opts.Fauxqs {
		if s.fauxqs, err = emulator.StartFauxqs(ctx, emulator.FauxqsOptions{RepoRoot: opts.Root, LogWriter: opts.EmulatorLog}); err != nil {
			return err
		}
		emulatorStarted(s.fauxqs)
		if err = s.gw.SetSQSURL(s.fauxqs.Endpoint()); err != nil {
			return err
		}
	}
	s.info = Info{Endpoint: s.gw.URL(), Region: Region, Parameters: map[string]string{}, SenderID: MotoSenderID}
	if opts.Fauxqs {
		s.info.SenderID = FauxqsSenderID
	}
	// The router trusts held-job attributes only on messages whose SenderId is its role's id
	// (template.yaml, ROUTER_ROLE_ID: !GetAtt RouterRole.RoleId); the emulator gives every message
	// the one SenderId, so that is the router role's id here.
	s.attrs.Set("RouterRole", "RoleId", s.info.SenderID)
	for k, v := range opts.Parameters {
		s.info.Parameters[k] = v
	}
	if err = s.createResources(ctx); err != nil {
		return err
	}
	return nil
}

// Info returns the endpoint and outputs.
func (s *Stack) Info() Info { return s.info }

// Metrics returns what the functions published in CloudWatch embedded metric format, added up as
// CloudWatch would, over the stack's life (runtime restarts included).
func (s *Stack) Metrics() *metrics.Collector { return s.metrics }

// Gateway gives access to fault injection and the gateway's call counts.
func (s *Stack) Gateway() *gateway.Gateway { return s.gw }

// Events returns the EventBridge events the functions (or anyone) sent to the stack, in the order
// they were accepted: the gateway answers PutEvents itself and keeps them (gateway.Event).
func (s *Stack) Events() []gateway.Event { return s.gw.Events() }

// AWSConfig returns an SDK configuration pointed at the stack; counter may be nil. Its HTTP client
// is the functions' (sdkhttp): moto answers fast enough to meet the SDK's double send of a write.
func (s *Stack) AWSConfig(counter *callcount.Counter) aws.Config {
	cfg := aws.Config{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(s.gw.URL()),
		HTTPClient:   sdkhttp.Client(nil),
	}
	if counter != nil {
		cfg.APIOptions = append(cfg.APIOptions, counter.Option)
	}
	return cfg
}

// Clients returns SDK clients pointed at the stack.
func (s *Stack) Clients() app.Clients { return app.NewClients(s.AWSConfig(nil)) }

// Counter returns the call counter of one function ("router", "starter", "releaser") or of the
// event-source pollers ("pollers"), created on first use.
func (s *Stack) Counter(name string) *callcount.Counter {
	s.counterMu.Lock()
	defer s.counterMu.Unlock()
	c, ok := s.counters[name]
	if !ok {
		c = callcount.New()
		s.counters[name] = c
	}
	return c
}

// CounterNames lists the counters in use, sorted.
func (s *Stack) CounterNames() []string {
	s.counterMu.Lock()
	defer s.counterMu.Unlock()
	var out []string
	for k := range s.counters {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Template returns the loaded template and its resolver.
func (s *Stack) Template() (*cfntemplate.Template, *cfntemplate.Resolver) { return s.tpl, s.resolver }

func (s *Stack) createResources(ctx context.Context) error {
	c := s.Clients()
	// Queues, dead-letter targets first.
	pending := s.tpl.Queues()
	for len(pending) > 0 {
		progressed := false
		var later []cfntemplate.Queue
		for _, q := range pending {
			if !s.known(q.DependsOn) {
				later = append(later, q)
				continue
			}
			cfg, err := s.resolver.Queue(q)
			if err != nil {
				return err
			}
			out, err := c.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &cfg.Name, Attributes: cfg.Attributes})
			if err != nil {
				return fmt.Errorf("create queue %s: %w", q.LogicalID, err)
			}
			url := aws.ToString(out.QueueUrl)
			arn := fmt.Sprintf("arn:aws:sqs:%s:%s:%s", Region, s.queueAccount(url), cfg.Name)
			s.attrs.Set(q.LogicalID, "Ref", url)
			s.attrs.Set(q.LogicalID, "QueueUrl", url)
			s.attrs.Set(q.LogicalID, "Arn", arn)
			s.attrs.Set(q.LogicalID, "QueueName", cfg.Name)
			progressed = true
		}
		if !progressed {
			return fmt.Errorf("queues depend on each other in a cycle: %v", later)
		}
		pending = later
	}

	tb, err := s.tpl.Table()
	if err != nil {
		return err
	}
	tname, err := s.resolver.Name(tb.LogicalID)
	if err != nil {
		return err
	}
	in := &dynamodb.CreateTableInput{TableName: &tname, BillingMode: ddbtypes.BillingModePayPerRequest}
	for _, k := range tb.KeySchema {
		in.KeySchema = append(in.KeySchema, ddbtypes.KeySchemaElement{AttributeName: aws.String(k.AttributeName), KeyType: ddbtypes.KeyType(k.KeyType)})
	}
	for _, a := range tb.AttributeDefinitions {
		in.AttributeDefinitions = append(in.AttributeDefinitions, ddbtypes.AttributeDefinition{AttributeName: aws.String(a.AttributeName), AttributeType: ddbtypes.ScalarAttributeType(a.AttributeType)})
	}
	if _, err := c.DDB.CreateTable(ctx, in); err != nil {
		return fmt.Errorf("create table %s: %w", tname, err)
	}
	s.attrs.Set(tb.LogicalID, "Ref", tname)
	s.attrs.Set(tb.LogicalID, "Arn", fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", Region, Account, tname))

	// Functions are played by the gateway: their ARNs are known before any state machine needs them.
	for _, f := range s.tpl.Functions() {
		name, err := s.resolver.Name(f.LogicalID)
		if err != nil {
			return err
		}
		s.attrs.Set(f.LogicalID, "Ref", name)
		s.attrs.Set(f.LogicalID, "Arn", gateway.FunctionARN(name))
	}
	for _, sm := range s.tpl.StateMachines() {
		cfg, err := s.resolver.StateMachine(sm)
		if err != nil {
			return err
		}
		typ := sfntypes.StateMachineTypeStandard
		if strings.EqualFold(cfg.Type, "EXPRESS") {
			typ = sfntypes.StateMachineTypeExpress
		}
		out, err := c.SFN.CreateStateMachine(ctx, &sfn.CreateStateMachineInput{
			Name: &cfg.Name, Definition: &cfg.Definition, Type: typ,
			RoleArn: aws.String(fmt.Sprintf("arn:aws:iam::%s:role/%s-local", Account, cfg.Name)),
		})
		if err != nil {
			return fmt.Errorf("create state machine %s: %w", sm.LogicalID, err)
		}
		s.attrs.Set(sm.LogicalID, "Ref", aws.ToString(out.StateMachineArn))
		s.attrs.Set(sm.LogicalID, "Arn", aws.ToString(out.StateMachineArn))
		s.attrs.Set(sm.LogicalID, "Name", cfg.Name)
	}
	outs, err := s.resolver.Outputs()
	if err != nil {
		return fmt.Errorf("resolve outputs: %w", err)
	}
	s.info.Outputs = outs
	return nil
}

func (s *Stack) known(ids []string) bool {
	for _, id := range ids {
		if _, ok := s.attrs.Lookup(id, "Arn"); !ok {
			return false
		}
	}
	return true
}

// queueAccount reads the account from a queue URL (moto and fauxqs use different ones).
func (s *Stack) queueAccount(url string) string {
	parts := strings.Split(strings.TrimRight(url, "/"), "/")
	if len(parts) >= 2 {
		return parts[len(parts)-2]
	}
	return Account
}

// Close stops the runtime and the emulators; safe to call more than once.
func (s *Stack) Close() {
	s.StopRuntime()
	var errs []error
	if s.gw != nil {
		errs = append(errs, s.gw.Close())
	}
	if s.fauxqs != nil {
		errs = append(errs, s.fauxqs.Stop())
	}
	if s.moto != nil {
		errs = append(errs, s.moto.Stop())
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Warn("stopping the local stack", "error", err)
	}
}

// WriteInfo encodes the stack's info as JSON.
func (i Info) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(i)
}
