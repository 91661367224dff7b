// Package testmoto gives a package's tests a DynamoDB on moto (internal/tools/emulator): started
// once in TestMain, with a fresh table per test.
package testmoto

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/sdkhttp"
	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
)

// RunDynamoDB starts moto, points *client at it, runs the tests and stops moto. Call it from
// TestMain: os.Exit(testmoto.RunDynamoDB(m, &db)).
func RunDynamoDB(m *testing.M, client **dynamodb.Client) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	p, err := emulator.StartMoto(ctx, emulator.MotoOptions{})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "StartMoto() = %v (moto %s is preinstalled on these machines)\n", err, emulator.MotoVersion)
		return 1
	}
	defer func() { _ = p.Stop() }()
	*client = Client(p.Endpoint())
	return m.Run()
}

// Client is a DynamoDB client for a loopback endpoint, with dummy credentials. moto answers fast
// enough to meet the SDK's double send of a conditional write (sdkhttp): its HTTP client is the one
// the functions use.
func Client(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  sdkhttp.Client(nil),
	})
}

var tables atomic.Int64

// Table creates a table keyed like the limiter's (pk and sk, strings), named after prefix, and
// deletes it when the test ends.
func Table(t testing.TB, c *dynamodb.Client, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), tables.Add(1))
	_, err := c.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
	})
	if err != nil {
		t.Fatalf("CreateTable(%s) = %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}
