package iampolicy_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/sfnlimit/sfnlimit/internal/tools/iampolicy"
)

// A call the policies do not allow fails with AccessDeniedException and never leaves the client;
// an allowed one is sent.
func TestEnforcer(t *testing.T) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	e := &iampolicy.Enforcer{Principal: "RouterRole", Policies: routerPolicy(t, "dynamodb:PutItem", "dynamodb:UpdateItem"), Account: acct}
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), APIOptions: []func(*middleware.Stack) error{e.Option}})

	_, err := db.TransactWriteItems(t.Context(), &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
		{Delete: &ddbtypes.Delete{TableName: aws.String("t"), Key: map[string]ddbtypes.AttributeValue{"pk": s("OCC#a"), "sk": s("JOB#1")}}},
	}})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDeniedException" {
		t.Fatalf("TransactWriteItems(Delete) = %v, want AccessDeniedException", err)
	}
	if sent.Load() != 0 {
		t.Errorf("a denied call was sent")
	}
	if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]ddbtypes.AttributeValue{"pk": s("OCC#a")}}); err != nil {
		t.Fatalf("PutItem(OCC#a) = %v, want it allowed", err)
	}
	if sent.Load() != 1 {
		t.Errorf("allowed call sent %d times, want 1", sent.Load())
	}
}
