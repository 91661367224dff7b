// Package app wires the limiter's handlers from a function's environment and AWS clients. The Lambda
// mains and the local stack both build their handlers here, so they run the same code the same way.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/legacy"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sdkhttp"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/unlisted"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// Clients are the AWS clients the handlers use, built once per process.
type Clients struct {
	SQS *sqs.Client
	SFN *sfn.Client
	DDB *dynamodb.Client
	// Events sends batches' completion events to the default bus.
	Events *eventbridge.Client
}

// Services are the AWS calls the handlers make, as interfaces that *sqs.Client, *sfn.Client,
// *dynamodb.Client and *eventbridge.Client satisfy. The builders take them so that the deterministic
// simulation (internal/tools/simworld) can run the same wiring on in-memory services; Lambda and the
// local stack pass Clients.
type Services struct {
	SQS    SQSAPI
	SFN    SFNAPI
	DDB    DynamoDBAPI
	Events EventsAPI
}

// SQSAPI is the SQS calls of the handlers.
type SQSAPI interface {
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// SFNAPI is the Step Functions calls of the handlers.
type SFNAPI interface {
	StartExecution(context.Context, *sfn.StartExecutionInput, ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error)
	DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
	ListExecutions(context.Context, *sfn.ListExecutionsInput, ...func(*sfn.Options)) (*sfn.ListExecutionsOutput, error)
	StopExecution(context.Context, *sfn.StopExecutionInput, ...func(*sfn.Options)) (*sfn.StopExecutionOutput, error)
}

// DynamoDBAPI is the DynamoDB calls of the handlers.
type DynamoDBAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// EventsAPI is the EventBridge call of the handlers (batches' completion events).
type EventsAPI interface {
	PutEvents(context.Context, *eventbridge.PutEventsInput, ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// Services returns the clients as the builders take them.
func (c Clients) Services() Services {
	return Services{SQS: c.SQS, SFN: c.SFN, DDB: c.DDB, Events: c.Events}
}

// NewClients builds the clients from one AWS configuration. Their HTTP client reads each request
// body into memory first (sdkhttp): otherwise a quick answer can make the SDK send a conditional
// write that took effect a second time.
func NewClients(cfg aws.Config, opts ...func(*aws.Config)) Clients {
	for _, o := range opts {
		o(&cfg)
	}
	cfg.HTTPClient = sdkhttp.Client(cfg.HTTPClient)
	return Clients{SQS: sqs.NewFromConfig(cfg), SFN: sfn.NewFromConfig(cfg), DDB: dynamodb.NewFromConfig(cfg), Events: eventbridge.NewFromConfig(cfg)}
}

// Option adjusts how handlers are built.
type Option func(*options)

type options struct{ metrics io.Writer }

// WithMetrics sends the handlers' metrics (CloudWatch embedded metric format lines, namespace
// METRICS_NAMESPACE) to w: os.Stdout in Lambda, a collector in the local stack. Without it metrics
// are dropped.
func WithMetrics(w io.Writer) Option { return func(o *options) { o.metrics = w } }

// recorder returns the function's metrics recorder, its Type dimension bounded to the types with a
// limit of their own (res.Listed): producers choose types, and each dimension value is a billed
// custom metric.
func (e Env) recorder(opts []Option, res *config.Resolver) *metrics.Recorder {
	ns := e("METRICS_NAMESPACE")
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	if o.metrics == nil {
		return nil
	}
	rec := metrics.New(o.metrics, ns)
	rec.Listed(res.Listed)
	return rec
}

// Env reads a variable of the function's environment (os.Getenv, or a map for the local stack).
type Env func(string) string

func (e Env) require(name string) (string, error) {
	v := strings.TrimSpace(e(name))
	if v == "" {
		return "", fmt.Errorf("environment variable %s is not set (the template sets it)", name)
	}
	return v, nil
}

// seconds reads a whole number of seconds (config.Numbers names its bounds): def when unset.
func (e Env) seconds(name string, def int) (time.Duration, error) {
	n, err := config.NumberEnv(e, name, def)
	return time.Duration(n) * time.Second, err
}

func (e Env) number(name string, def int) (int, error) { return config.NumberEnv(e, name, def) }

func (e Env) resolver(c Services) (*config.Resolver, error) {
	table, err := e.require("TABLE_NAME")
	if err != nil {
		return nil, err
	}
	d, maxAge, err := config.FromEnv(e)
	if err != nil {
		return nil, fmt.Errorf("invalid limiter configuration: %w", err)
	}
	return config.NewResolver(d, config.NewDynamoStore(c.DDB, table), maxAge)
}

// DefaultBatchRetentionDays is how long a closed batch is kept when BATCH_RETENTION_DAYS is unset
// (the template's BatchRetentionDays default).
const DefaultBatchRetentionDays = 30

// tracker is the batch tracker of the function: batches live in the limiter's table, closed ones
// expire BATCH_RETENTION_DAYS after they closed, and the completion event names the stack (STACK_NAME).
func (e Env) tracker(c Services, log *slog.Logger) (*batchend.Tracker, error) {
	table, err := e.require("TABLE_NAME")
	if err != nil {
		return nil, err
	}
	days, err := e.number("BATCH_RETENTION_DAYS", DefaultBatchRetentionDays)
	if err != nil {
		return nil, err
	}
	l := batch.New(c.DDB, table)
	l.Retention = time.Duration(days) * 24 * time.Hour
	return batchend.New(l, c.Events, strings.TrimSpace(e("STACK_NAME")), log), nil
}

// Router builds the router from its environment.
func Router(env Env, c Clients, log *slog.Logger, opts ...Option) (*router.Router, error) {
	return RouterOn(env, c.Services(), log, opts...)
}

// RouterOn builds the router from its environment on any implementation of the AWS calls.
func RouterOn(env Env, c Services, log *slog.Logger, opts ...Option) (*router.Router, error) {
	fifo, err := env.require("FIFO_QUEUE_URL")
	if err != nil {
		return nil, err
	}
	dlq, err := env.require("DLQ_URL")
	if err != nil {
		return nil, err
	}
	res, err := env.resolver(c)
	if err != nil {
		return nil, err
	}
	// The router caps nothing (the starter checks every start on fresh config): it may route on
	// the last overrides it read while the table cannot be read.
	res.ServeStale()
	maxBacklog, err := env.number("MAX_LANES_BACKLOG", 0) // 0: no bound
	if err != nil {
		return nil, err
	}
	// LANE_STRATEGY is read (and checked) with the rest of the configuration: each type's strategy
	// is its override's, else the deployment's.
	batches, err := env.tracker(c, log)
	if err != nil {
		return nil, err
	}
	// The router's role's unique id (template.yaml: !GetAtt RouterRole.RoleId): the SenderId
	// principal of the held jobs it sends back, whose attributes it alone may set.
	self, err := env.require("ROUTER_ROLE_ID")
	if err != nil {
		return nil, err
	}
	r := &router.Router{Self: self,
		Config: res, Lanes: lane.Hashed{}, Batches: batches,
		Lanesq: sqsbatch.NewSender(c.SQS, fifo), DLQ: batchend.DeadLetters{Next: deadletter.New(c.SQS, dlq), Tracker: batches},
		Log: log, Metrics: env.recorder(opts, res),
	}
	if d := res.Defaults(); d.FallbackLimit > 0 {
		// Types on DEFAULT_LIMIT hold at most UNLISTED_TYPES_LIMIT slots, so at most that many
		// of them hold lanes, as the in-flight quota check counts them.
		table, err := env.require("TABLE_NAME")
		if err != nil {
			return nil, err
		}
		r.Unlisted = &unlisted.Slots{DB: c.DDB, Table: table, Limit: d.Unlisted()}
	}
	if maxBacklog > 0 {
		general, err := env.require("GENERAL_QUEUE_URL")
		if err != nil {
			return nil, err
		}
		hold, err := env.seconds("BACKLOG_HOLD_SECONDS", int(router.DefaultHoldFor.Seconds()))
		if err != nil {
			return nil, err
		}
		r.Backlog = &router.Backlog{Queue: c.SQS, URL: fifo, Max: maxBacklog, HoldFor: hold, Lanes: func(ctx context.Context) (int, error) {
			cs, err := res.All(ctx)
			sum := 0
			for _, c := range cs {
				sum += c.Limit
			}
			return sum, err
		}}
		r.Hold, r.HoldFor = sqsbatch.NewSender(c.SQS, general), hold
	}
	return r, nil
}

// Releaser builds the releaser (its service and event handler) from its environment.
func Releaser(env Env, c Clients, log *slog.Logger, opts ...Option) (*releaser.Handler, error) {
	return ReleaserOn(env, c.Services(), log, opts...)
}

// ReleaserOn builds the releaser from its environment on any implementation of the AWS calls.
func ReleaserOn(env Env, c Services, log *slog.Logger, opts ...Option) (*releaser.Handler, error) {
	res, err := env.resolver(c)
	if err != nil {
		return nil, err
	}
	return releaserWith(env, c, res, log, env.recorder(opts, res))
}

func releaserWith(env Env, c Services, res *config.Resolver, log *slog.Logger, rec *metrics.Recorder) (*releaser.Handler, error) {
	fifo, err := env.require("FIFO_QUEUE_URL")
	if err != nil {
		return nil, err
	}
	dlq, err := env.require("DLQ_URL")
	if err != nil {
		return nil, err
	}
	table, err := env.require("TABLE_NAME")
	if err != nil {
		return nil, err
	}
	minAge, err := env.seconds("SWEEP_MIN_AGE_SECONDS", 60)
	if err != nil {
		return nil, err
	}
	maxDescribes, err := env.number("SWEEP_MAX_DESCRIBES", 500)
	if err != nil {
		return nil, err
	}
	aging, err := env.seconds("PRIORITY_AGING_SECONDS", int(config.DefaultPriorityAging.Seconds()))
	if err != nil {
		return nil, err
	}
	if aging == 0 {
		return nil, fmt.Errorf("PRIORITY_AGING_SECONDS must be at least 1")
	}
	batches, err := env.tracker(c, log)
	if err != nil {
		return nil, err
	}
	leases := lease.NewStore(c.DDB, table)
	svc := &releaser.Service{
		Leases: leases, Queue: c.SQS, QueueURL: fifo, SFN: c.SFN, Config: res,
		DLQ:      batchend.DeadLetters{Next: deadletter.New(c.SQS, dlq), Tracker: batches},
		WaitRoom: waitroom.NewStore(c.DDB, table), Log: log, Metrics: rec, PriorityAging: aging, Batches: batches,
		Pools: pool.NewStore(c.DDB, table), Rates: ratelimit.New(c.DDB, table),
	}
	vis, err := env.seconds("FIFO_VISIBILITY_TIMEOUT", 900)
	if err != nil {
		return nil, err
	}
	return &releaser.Handler{
		Service: svc, Leases: leases, SweepMinAge: minAge, SweepMaxDescribes: maxDescribes, SweepConcurrency: 8,
		StaleAfter: staleAfter(vis), Probes: c.SQS, Running: c.SFN, Legacy: legacy.NewCleaner(c.DDB, table), Batches: batches, Log: log,
	}, nil
}

// staleAfter is how long a lease without a running execution may sit untouched before it is taken
// back: longer than the lanes queue's visibility timeout vis, after which its message, if it still
// existed, would have been delivered again and refreshed it.
func staleAfter(vis time.Duration) time.Duration { return vis + vis/2 }

// Starter builds the starter from its environment; it carries its own releaser service for jobs
// whose executions ended without a release.
func Starter(env Env, c Clients, log *slog.Logger, opts ...Option) (*starter.Starter, error) {
	return StarterOn(env, c.Services(), log, opts...)
}

// StarterOn builds the starter from its environment on any implementation of the AWS calls.
func StarterOn(env Env, c Services, log *slog.Logger, opts ...Option) (*starter.Starter, error) {
	res, err := env.resolver(c)
	if err != nil {
		return nil, err
	}
	rec := env.recorder(opts, res)
	rel, err := releaserWith(env, c, res, log, rec)
	if err != nil {
		return nil, err
	}
	if _, err := env.require("STATE_MACHINE_ARN"); err != nil {
		return nil, err
	}
	retry, err := env.seconds("START_RETRY_SECONDS", 5)
	if err != nil {
		return nil, err
	}
	vis, err := env.seconds("FIFO_VISIBILITY_TIMEOUT", 900)
	if err != nil {
		return nil, err
	}
	table, err := env.require("TABLE_NAME")
	if err != nil {
		return nil, err
	}
	svc := rel.Service
	return &starter.Starter{
		Config: res, Leases: lease.NewStore(c.DDB, table), SFN: c.SFN, Queue: c.SQS, QueueURL: svc.QueueURL,
		DLQ: svc.DLQ, Releaser: svc, Lanes: lane.Hashed{}, WaitRoom: waitroom.NewStore(c.DDB, table), Fates: admission.NewStore(c.DDB, table), RetryDelay: retry,
		StaleAfter: staleAfter(vis), Visibility: vis, HandoverWait: 500 * time.Millisecond, Concurrency: 10, Log: log, Metrics: rec,
		Rates: ratelimit.New(c.DDB, table), Sleep: starter.SleepContext, Pools: pool.NewStore(c.DDB, table),
	}, nil
}
