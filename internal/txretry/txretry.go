// Package txretry sends a DynamoDB TransactWriteItems again, with jittered backoff, when DynamoDB
// cancelled it only because of contention.
//
// DynamoDB cancels a transaction that overlaps another one on the same item ("There is an ongoing
// TransactWriteItems operation that conflicts with a concurrent TransactWriteItems request. In this
// case the TransactWriteItems operation fails with a TransactionCanceledException": the API
// reference's TransactionCanceledException, and the developer guide's "Transaction conflict handling
// in DynamoDB"). The cancellation reason of the conflicting item is TransactionConflict. The AWS SDK
// for Go v2 does not retry it: its standard retryer retries TransactionInProgressException and
// throttling codes, not TransactionCanceledException (aws/retry DefaultRetryables,
// DefaultThrottleErrorCodes). A cancelled transaction changed nothing, so sending it again is safe.
//
// A cancellation with a ConditionalCheckFailed reason is never retried: the condition is an answer
// about the items' state (a job already counted, a lane already taken), and the caller acts on it.
package txretry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Writer is the one call of the DynamoDB client a transaction needs.
type Writer interface {
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Policy bounds the retries of one transaction.
type Policy struct {
	// Attempts is the most calls in all, the first included.
	Attempts int
	// Base and Max bound the backoff: before retry n (1, 2, ...) the wait is drawn uniformly from
	// [0, min(Max, Base*2^(n-1))) ("full jitter"), so that the transactions that conflicted do not
	// meet again.
	Base, Max time.Duration
	// Budget bounds the time from the first call: no retry starts after it (the caller is a Lambda
	// function with a timeout to keep).
	Budget time.Duration

	// sleep waits d or until ctx is done (tests replace it).
	sleep func(ctx context.Context, d time.Duration) error
	// jitter returns a duration in [0, d) (tests replace it).
	jitter func(d time.Duration) time.Duration
	now    func() time.Time
}

// Default is the policy of Write: up to 8 calls within 3 s, waits of at most 25, 50, 100, 200, 400,
// 500, 500 ms. Conflicts last as long as the other transaction, milliseconds.
var Default = Policy{Attempts: 8, Base: 25 * time.Millisecond, Max: 500 * time.Millisecond, Budget: 3 * time.Second}

// Write is Default.Write.
func Write(ctx context.Context, db Writer, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return Default.Write(ctx, db, in, optFns...)
}

// Write calls db.TransactWriteItems and, while DynamoDB cancels it for contention alone (Retryable),
// calls it again after a jittered backoff, within the policy's attempts and budget. It returns the
// last call's result; when the retries ran out the error says how many calls were made.
func (p Policy) Write(ctx context.Context, db Writer, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	p = p.withDefaults()
	began := p.now()
	for n := 1; ; n++ {
		out, err := db.TransactWriteItems(ctx, in, optFns...)
		if err == nil || !Retryable(err) {
			return out, err
		}
		wait := p.jitter(min(p.Max, p.Base<<min(n-1, 30)))
		if n >= p.Attempts || p.now().Add(wait).Sub(began) > p.Budget {
			return out, fmt.Errorf("transaction cancelled by contention %d times in %v: %w", n, p.now().Sub(began).Round(time.Millisecond), err)
		}
		if serr := p.sleep(ctx, wait); serr != nil {
			return out, fmt.Errorf("transaction cancelled by contention, not retried: %w", errors.Join(serr, err))
		}
	}
}

func (p Policy) withDefaults() Policy {
	if p.Attempts < 1 {
		p.Attempts = 1
	}
	if p.Base <= 0 {
		p.Base = Default.Base
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	if p.sleep == nil {
		p.sleep = sleep
	}
	if p.jitter == nil {
		p.jitter = func(d time.Duration) time.Duration {
			if d <= 0 {
				return 0
			}
			return rand.N(d)
		}
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p
}

// retryableReasons are the cancellation reasons that say nothing about the items' state, only that
// DynamoDB could not apply the transaction at that moment (the API reference's CancellationReason
// codes): another transaction on an item, or throughput.
var retryableReasons = map[string]bool{
	"TransactionConflict":           true,
	"ProvisionedThroughputExceeded": true,
	"ThrottlingError":               true,
}

// Retryable reports whether err is a TransactionCanceledException whose reasons are all "None" or
// contention (TransactionConflict, ProvisionedThroughputExceeded, ThrottlingError), with at least one
// of those. Any other reason, ConditionalCheckFailed above all, is an answer and is not retried.
func Retryable(err error) bool {
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) {
		return false
	}
	contention := false
	for _, r := range tc.CancellationReasons {
		switch code := aws.ToString(r.Code); {
		case code == "" || code == "None":
		case retryableReasons[code]:
			contention = true
		default:
			return false
		}
	}
	return contention
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
