// Command starter is the sfnlimit starter Lambda function: configuration from the environment, clients, the
// handler from internal/app, lambda.Start.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/sfnlimit/sfnlimit/internal/app"
)

func main() {
	log := lambdacontext.NewLogger()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Error("load AWS configuration", "error", err)
		os.Exit(1)
	}
	h, err := app.Starter(os.Getenv, app.NewClients(cfg), log, app.WithMetrics(os.Stdout))
	if err != nil {
		log.Error("configure starter", "error", err)
		os.Exit(1)
	}
	lambda.Start(h.Handle)
}
