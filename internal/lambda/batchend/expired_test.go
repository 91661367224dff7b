package batchend_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A job that opens a batch whose id belonged to a batch that closed and expired is refused with a
// reason (invalid_batch), not retried: the id cannot be used again.
func TestAdmitRefusesTheIDOfAnExpiredBatch(t *testing.T) {
	ctx := context.Background()
	db := fakes.NewDynamoDB("t")
	l := batch.New(db, "t")
	if err := l.Open(ctx, "old", 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Record(ctx, "old", "j1", 0, batch.Succeeded, time.Now()); err != nil {
		t.Fatal(err)
	}
	key := map[string]ddbtypes.AttributeValue{
		"pk": &ddbtypes.AttributeValueMemberS{Value: "BATCH#old"}, "sk": &ddbtypes.AttributeValueMemberS{Value: "META"},
	}
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: key}); err != nil {
		t.Fatal(err)
	}
	tr := batchend.New(batch.New(db, "t"), &bus{}, "s", slog.New(slog.DiscardHandler))
	err := tr.Admit(ctx, job.Job{Type: "docs", ID: "2", Batch: "old", BatchSize: 1}, "")
	if job.ReasonOf(err) != job.ReasonInvalidBatch {
		t.Errorf("Admit of a job reopening an expired batch = %v, want reason %s", err, job.ReasonInvalidBatch)
	}
}
