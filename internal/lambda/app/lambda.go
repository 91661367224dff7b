package app

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// Builder builds a function's handler from its environment (Router, Starter, Releaser).
type Builder[H any] func(env Env, c Clients, log *slog.Logger, opts ...Option) (H, error)

// StartLambda is a function's whole main: AWS configuration, clients and the handler built once per
// cold start, JSON logs that honour the function's log level, metrics to stdout, then lambda.Start
// with the handler's entry point. A configuration error ends the cold start with a clear log line.
func StartLambda[H any](name string, build Builder[H], entry func(H) any) {
	log := lambdacontext.NewLogger()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Error("load AWS configuration", "function", name, "error", err)
		os.Exit(1)
	}
	h, err := build(os.Getenv, NewClients(cfg), log, WithMetrics(os.Stdout))
	if err != nil {
		log.Error("configure "+name, "error", err)
		os.Exit(1)
	}
	lambda.Start(entry(h))
}
