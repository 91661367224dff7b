package starter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

var (
	reports1 = lease.Key{Type: "reports", Lane: 1}
	reports2 = lease.Key{Type: "reports", Lane: 2}
)

func throttled(*sfn.StartExecutionInput) error {
	return fakes.APIError("ThrottlingException", "Rate exceeded")
}

func TestHandle(t *testing.T) {
	backoff := func(h string) visibility {
		return visibility{Handle: h, Min: int32(retryDelay / time.Second), Max: int32(2 * retryDelay / time.Second)}
	}
	tests := []struct {
		name    string
		limits  map[string]int
		leases  []lease.Lease
		execs   []fakes.Execution
		onStart func(*sfn.StartExecutionInput) error
		give    func(t *testing.T) []events.SQSMessage

		wantFailures   []string // message ids reported as batch item failures
		wantStarts     []string // StartExecution calls, by name
		wantExecutions int      // executions that exist afterwards
		wantLeases     map[lease.Key]wantLease
		wantDeleted    []string
		wantVisibility []visibility
		wantDLQ        []dead
	}{
		{
			name: "fresh job: claimed, started, held",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantFailures:   []string{"msg-r-1001"},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
			},
		},
		{
			name: "two jobs of one group in a batch: one start, the second back at once",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1), jobMessage(t, "reports", 1, "r-1002", 0, 1)}
			},
			wantFailures:   []string{"msg-r-1001", "msg-r-1002"},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
			},
			wantVisibility: []visibility{{handle("r-1002", 1), 0, 0}},
		},
		{
			name: "jobs of different groups each start",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1), jobMessage(t, "reports", 2, "r-1003", 0, 1)}
			},
			wantFailures:   []string{"msg-r-1001", "msg-r-1003"},
			wantStarts:     []string{"reports-r-1001-1", "reports-r-1003-1"},
			wantExecutions: 2,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
				reports2: {"r-1003", lease.Starting, 1, handle("r-1003", 1), execArn("reports", "r-1003", 1)},
			},
		},
		{
			name:   "redelivered while running: the same attempt started again finds it, lease takes the new handle, held",
			leases: []lease.Lease{leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1)},
			execs:  []fakes.Execution{execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}
			},
			wantStarts:     []string{"reports-r-1001-1"}, // the same attempt again: Step Functions answers with its execution
			wantFailures:   []string{"msg-r-1001"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
			},
		},
		{
			// An earlier version named a claim's execution on a version of its state machine with
			// the qualifier, which no execution has: the starter reads it as Step Functions names it.
			name:   "redelivered while running, its lease naming the execution with a version's qualifier: held",
			leases: []lease.Lease{qualifiedArn(leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1))},
			execs:  []fakes.Execution{execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}
			},
			wantStarts:     []string{"reports-r-1001-1"}, // the same attempt again: Step Functions answers with its execution
			wantFailures:   []string{"msg-r-1001"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
			},
		},
		{
			name:   "redelivered after its execution succeeded, its lease naming it with a version's qualifier: released",
			leases: []lease.Lease{qualifiedArn(leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1))},
			execs:  []fakes.Execution{execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusSucceeded, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}
			},
			wantStarts:     []string{"reports-r-1001-1"}, // the same attempt again: Step Functions answers with its execution
			wantExecutions: 1,
			wantDeleted:    []string{handle("r-1001", 2)},
			wantVisibility: []visibility{grace(handle("r-1001", 2))},
		},
		{
			name:   "redelivered after its execution succeeded: released with the new handle",
			leases: []lease.Lease{leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1)},
			execs:  []fakes.Execution{execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusSucceeded, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}
			},
			wantStarts:     []string{"reports-r-1001-1"}, // the same attempt again: Step Functions answers with its execution
			wantExecutions: 1,
			wantDeleted:    []string{handle("r-1001", 2)},
			wantVisibility: []visibility{grace(handle("r-1001", 2))},
		},
		{
			name:   "redelivered after its execution failed, attempts left: retrying, visible at once",
			leases: []lease.Lease{leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1)},
			execs:  []fakes.Execution{execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusFailed, "JobFailed", "boom")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}
			},
			wantStarts:     []string{"reports-r-1001-1"}, // the same attempt again: Step Functions answers with its execution
			wantFailures:   []string{"msg-r-1001"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Retrying, 1, handle("r-1001", 2), ""},
			},
			wantVisibility: []visibility{grace(handle("r-1001", 2)), {handle("r-1001", 2), 0, 0}},
		},
		{
			name:   "redelivered after its last attempt failed: dead-lettered and deleted",
			leases: []lease.Lease{leaseOf("reports", 1, "r-1001", 3, lease.Starting, 4)},
			execs:  []fakes.Execution{execution("reports", 1, "r-1001", 3, sfntypes.ExecutionStatusFailed, "JobFailed", "boom")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 5)}
			},
			wantStarts:     []string{"reports-r-1001-3"}, // the same attempt again: Step Functions answers with its execution
			wantExecutions: 1,
			wantDeleted:    []string{handle("r-1001", 5)},
			wantDLQ:        []dead{{deadletter.ReasonAttemptsExhausted, "r-1001"}},
			wantVisibility: []visibility{grace(handle("r-1001", 5))},
		},
		{
			name:   "lease retrying: next delivery starts attempt 2",
			leases: []lease.Lease{leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1)},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}
			},
			wantFailures:   []string{"msg-r-1001"},
			wantStarts:     []string{"reports-r-1001-2"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 2, handle("r-1001", 2), execArn("reports", "r-1001", 2)},
			},
		},
		{
			name:   "lease starting (start unconfirmed): same attempt started again",
			leases: []lease.Lease{leaseOf("reports", 1, "r-1001", 2, lease.Starting, 3)},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 4)}
			},
			wantFailures:   []string{"msg-r-1001"},
			wantStarts:     []string{"reports-r-1001-2"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 2, handle("r-1001", 4), execArn("reports", "r-1001", 2)},
			},
		},
		{
			// The claim stays: the same attempt is started again under the same name (the lane is
			// this group's head's anyway), as after a start whose outcome is unknown.
			name:    "start throttled, fresh job: claim kept, short backoff, held",
			onStart: throttled,
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantFailures: []string{"msg-r-1001"},
			wantStarts:   []string{"reports-r-1001-1"},
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
			},
			wantVisibility: []visibility{backoff(handle("r-1001", 1))},
		},
		{
			name:    "start throttled, retrying job: its next attempt's claim kept with the new handle",
			leases:  []lease.Lease{leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1)},
			onStart: throttled,
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}
			},
			wantFailures: []string{"msg-r-1001"},
			wantStarts:   []string{"reports-r-1001-2"},
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 2, handle("r-1001", 2), execArn("reports", "r-1001", 2)},
			},
			wantVisibility: []visibility{backoff(handle("r-1001", 2))},
		},
		{
			name:  "execution already exists and runs in this lane: adopted, held",
			execs: []fakes.Execution{withInput(execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", ""), `{"seconds":4}`)},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantFailures:   []string{"msg-r-1001"},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
			},
			wantVisibility: []visibility{grace(handle("r-1001", 1))},
		},
		{
			name:  "execution already exists in another lane: duplicate dropped",
			execs: []fakes.Execution{execution("reports", 2, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantVisibility: []visibility{grace(handle("r-1001", 1))},
		},
		{
			name:  "execution already exists and closed, no earlier claim: duplicate dropped",
			execs: []fakes.Execution{execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusSucceeded, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantVisibility: []visibility{grace(handle("r-1001", 1))},
		},
		{
			name:   "execution already exists and closed after this lane's unconfirmed claim: released",
			leases: []lease.Lease{leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1)},
			execs:  []fakes.Execution{execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusSucceeded, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}
			},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantDeleted:    []string{handle("r-1001", 2)},
			wantVisibility: []visibility{grace(handle("r-1001", 2))},
		},
		{
			name: "execution name taken by another job: dead-lettered, never dropped",
			execs: []fakes.Execution{{
				StateMachineArn: smArn, Name: "reports-r-1001-1", Status: sfntypes.ExecutionStatusRunning,
				Input: `{"job":{"id":"r-9999","type":"reports","lane":1,"attempt":1,"submittedAt":"2025-03-14T09:00:00Z"},"input":{}}`,
			}},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantDLQ:        []dead{{starter.ReasonNameTaken, "r-1001"}},
			wantVisibility: []visibility{grace(handle("r-1001", 1))},
		},
		{
			name: "unknown type: dead-lettered",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "videos", 1, "v-1", 0, 1)}
			},
			wantDLQ: []dead{{string(job.ReasonUnknownType), "v-1"}},
		},
		{
			name:   "another job holds the lane and runs: no start, backoff",
			leases: []lease.Lease{leaseOf("reports", 1, "r-0999", 1, lease.Starting, 1)},
			execs:  []fakes.Execution{execution("reports", 1, "r-0999", 1, sfntypes.ExecutionStatusRunning, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantFailures:   []string{"msg-r-1001"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-0999", lease.Starting, 1, handle("r-0999", 1), execArn("reports", "r-0999", 1)},
			},
			wantVisibility: []visibility{backoff(handle("r-1001", 1))},
		},
		{
			name:   "another job's lease outlived its closed execution: that job released, then this one starts",
			leases: []lease.Lease{leaseOf("reports", 1, "r-0999", 1, lease.Starting, 1)},
			execs:  []fakes.Execution{execution("reports", 1, "r-0999", 1, sfntypes.ExecutionStatusSucceeded, "", "")},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantFailures:   []string{"msg-r-1001"},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 2,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
			},
			wantDeleted: []string{handle("r-0999", 1)},
		},
		{
			name: "another job's unconfirmed lease gone stale: lane taken back",
			leases: []lease.Lease{func() lease.Lease {
				l := leaseOf("reports", 1, "r-0999", 1, lease.Starting, 1)
				l.UpdatedAt = t0.Add(-staleAfter - time.Minute)
				return l
			}()},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantFailures:   []string{"msg-r-1001"},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
			},
		},
		{
			name:   "another job's unconfirmed lease still fresh: backoff",
			leases: []lease.Lease{withUpdated(leaseOf("reports", 1, "r-0999", 1, lease.Starting, 1), t0.Add(-time.Minute))},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantFailures: []string{"msg-r-1001"},
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-0999", lease.Starting, 1, handle("r-0999", 1), execArn("reports", "r-0999", 1)},
			},
			wantVisibility: []visibility{backoff(handle("r-1001", 1))},
		},
		{
			name: "state machine does not exist: dead-lettered as start_refused",
			onStart: func(*sfn.StartExecutionInput) error {
				return &sfntypes.StateMachineDoesNotExist{Message: aws.String("State Machine Does Not Exist: '" + smArn + "'")}
			},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantStarts: []string{"reports-r-1001-1"},
			wantDLQ:    []dead{{starter.ReasonStartRefused, "r-1001"}},
		},
		{
			// Step Functions checks a request's fields (the input's length among them) with a
			// ValidationException: the same request is refused again on every delivery, so the job
			// is dead-lettered rather than retried forever with its lane blocked.
			name: "start refused by validation: dead-lettered as start_refused",
			onStart: func(*sfn.StartExecutionInput) error {
				return &smithy.GenericAPIError{Code: "ValidationException", Message: "1 validation error detected: Value at 'input' failed to satisfy constraint: Member must have length less than or equal to 262144", Fault: smithy.FaultClient}
			},
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantStarts: []string{"reports-r-1001-1"},
			wantDLQ:    []dead{{starter.ReasonStartRefused, "r-1001"}},
		},
		{
			name: "body not JSON: dead-lettered, acknowledged",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports-1", "r-1001", `reports r-1001`, 1)}
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, ""}},
		},
		{
			name: "body of another type than its group: dead-lettered",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports-1", "p-1", jobBody("payments", "p-1", 0), 1)}
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, "p-1"}},
		},
		{
			name: "group without a lane: dead-lettered",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports", "r-1001", jobBody("reports", "r-1001", 0), 1)}
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, "r-1001"}},
		},
		{
			// Only a hand-made message gets here (the router validates keys): a key SQS would
			// refuse as a group id must not send the job back and forth for ever.
			name: "body with an invalid key: dead-lettered",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports-1", "r-1001", `{"type":"reports","id":"r-1001","key":"a b","input":{}}`, 1)}
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, "r-1001"}},
		},
		{
			// Only a hand-made message gets here (the router names senders): a sender with a "/"
			// could share another job's execution names.
			name: "body with an invalid sender: dead-lettered",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports-1", "r-1001", `{"type":"reports","id":"r-1001","sender":"AROA/x","input":{}}`, 1)}
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, "r-1001"}},
		},
		{
			name: "body with a priority out of range: dead-lettered",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports-1", "r-1001", `{"type":"reports","id":"r-1001","priority":12,"input":{}}`, 1)}
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, "r-1001"}},
		},
		{
			name: "body with an invalid batch: dead-lettered",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports-1", "r-1001", `{"type":"reports","id":"r-1001","batch":"a/b","input":{}}`, 1)}
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, "r-1001"}},
		},
		{
			name: "body with a batch size but no batch: dead-lettered",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports-1", "r-1001", `{"type":"reports","id":"r-1001","batchSize":4,"input":{}}`, 1)}
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, "r-1001"}},
		},
		{
			name: "bad message beside a good one: the good one starts",
			give: func(t *testing.T) []events.SQSMessage {
				return []events.SQSMessage{message(t, "reports-2", "x", `{"type":"reports","id":""}`, 1), jobMessage(t, "reports", 1, "r-1001", 0, 1)}
			},
			wantFailures:   []string{"msg-r-1001"},
			wantStarts:     []string{"reports-r-1001-1"},
			wantExecutions: 1,
			wantLeases: map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
			},
			wantDLQ: []dead{{starter.ReasonBadMessage, ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.limits)
			for _, l := range tt.leases {
				r.leases.Set(l)
			}
			for _, e := range tt.execs {
				r.sfn.Put(e)
			}
			r.sfn.OnStart = tt.onStart
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: tt.give(t)})
			if err != nil {
				t.Fatalf("Handle() error = %v, want nil (failures are reported per message)", err)
			}
			if got, want := failures(resp), sorted(tt.wantFailures...); !equal(got, want) {
				t.Errorf("batch item failures = %q, want %q", got, want)
			}
			if got, want := startNames(r.sfn), sorted(tt.wantStarts...); !equal(got, want) {
				t.Errorf("StartExecution calls = %q, want %q", got, want)
			}
			if got := len(r.sfn.Executions()); got != tt.wantExecutions {
				t.Errorf("executions = %d, want %d", got, tt.wantExecutions)
			}
			checkLeases(t, r.leases, tt.wantLeases)
			if got, want := deleted(r.sqs), sorted(tt.wantDeleted...); !equal(got, want) {
				t.Errorf("DeleteMessage handles = %q, want %q", got, want)
			}
			checkVisibility(t, r.sqs, tt.wantVisibility)
			checkDLQ(t, r.sqs, tt.wantDLQ)
			if sent := r.sqs.Sent(lanesURL); len(sent) != 0 {
				t.Errorf("messages sent to the lanes queue = %+v, want none", sent)
			}
		})
	}
}

// grace is the visibility change with which a delivery checks that it still holds its message before
// it acts on an attempt that ended.
func grace(h string) visibility { return visibility{h, 60, 60} }

func withInput(e fakes.Execution, input string) fakes.Execution {
	var in job.ExecutionInput
	_ = json.Unmarshal([]byte(e.Input), &in)
	in.Input = json.RawMessage(input)
	e.Input = string(in.MustJSON())
	return e
}

func withUpdated(l lease.Lease, at time.Time) lease.Lease { l.UpdatedAt = at; return l }

// TestHandleFixture runs the recorded single-message event unchanged: the execution is named
// deterministically and its input is the job's metadata and input, never the receipt handle.
// qualifiedArn is l as an earlier version wrote a claim on version 3 of its state machine: with the
// qualifier in its execution's ARN.
func qualifiedArn(l lease.Lease) lease.Lease {
	i := strings.LastIndex(l.ExecutionArn, ":")
	l.ExecutionArn = l.ExecutionArn[:i] + ":3" + l.ExecutionArn[i:]
	return l
}

func TestHandleFixture(t *testing.T) {
	r := newRig(t, nil)
	ev := loadEvent(t, "sqs_fifo_event.json")
	rec := ev.Records[0]
	resp, err := r.st.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, []string{rec.MessageId}) {
		t.Errorf("batch item failures = %q, want the message held", got)
	}
	starts := r.sfn.Starts()
	if len(starts) != 1 {
		t.Fatalf("StartExecution calls = %+v, want 1", starts)
	}
	s := starts[0]
	if s.Name != "reports-r-1001-1" || s.StateMachineArn != smArn {
		t.Errorf("StartExecution(name %q, state machine %q), want reports-r-1001-1 on %s", s.Name, s.StateMachineArn, smArn)
	}
	const wantInput = `{"job":{"id":"r-1001","type":"reports","lane":1,"attempt":1,"submittedAt":"2025-03-14T09:26:50.123Z","messageId":"4f1c7b9e-8e1a-4c4d-9a51-0d2f7c1b2a10","receive":1},"input":{"seconds":3}}`
	if s.Input != wantInput {
		t.Errorf("execution input = %s, want %s", s.Input, wantInput)
	}
	if strings.Contains(s.Input, rec.ReceiptHandle) || strings.Contains(strings.ToLower(s.Input), "receipt") {
		t.Errorf("execution input %s carries the receipt handle", s.Input)
	}
	l, ok := r.leases.Lease(reports1)
	if !ok {
		t.Fatal("no lease for lane reports-1")
	}
	// The claim is the start's only lease write: it names the execution, so it stays as written.
	if l.Status != lease.Starting || l.Attempt != 1 || l.ReceiptHandle != rec.ReceiptHandle || l.MessageID != rec.MessageId ||
		l.ExecutionArn != execArn("reports", "r-1001", 1) || l.StateMachineArn != smArn || l.JobID != "r-1001" ||
		!l.SubmittedAt.Equal(submitted) || !l.StartedAt.Equal(t0) || l.Version != 1 {
		t.Errorf("lease = %+v, want the claim (starting, version 1) of attempt 1 of r-1001 with the message's id and handle, started at %v", l, t0)
	}
}

// TestHandleBatchFixture runs the recorded batch: two jobs of reports-1 and one of reports-2.
func TestHandleBatchFixture(t *testing.T) {
	r := newRig(t, nil)
	ev := loadEvent(t, "sqs_fifo_batch.json")
	resp, err := r.st.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ev.Records {
		ids = append(ids, m.MessageId)
	}
	if got := failures(resp); !equal(got, sorted(ids...)) {
		t.Errorf("batch item failures = %q, want all three held", got)
	}
	if got := startNames(r.sfn); !equal(got, []string{"reports-r-1001-1", "reports-r-1003-1"}) {
		t.Errorf("StartExecution calls = %q, want one per group", got)
	}
	checkVisibility(t, r.sqs, []visibility{{ev.Records[1].ReceiptHandle, 0, 0}})
	checkLeases(t, r.leases, map[lease.Key]wantLease{
		reports1: {"r-1001", lease.Starting, 1, ev.Records[0].ReceiptHandle, execArn("reports", "r-1001", 1)},
		reports2: {"r-1003", lease.Starting, 1, ev.Records[2].ReceiptHandle, execArn("reports", "r-1003", 1)},
	})
}

func TestHandleTenGroupsAllStart(t *testing.T) {
	for _, concurrency := range []int{1, 3, 10} {
		t.Run(fmt.Sprintf("concurrency %d", concurrency), func(t *testing.T) {
			r := newRig(t, nil)
			r.st.Concurrency = concurrency
			var inflight, peak atomic.Int32
			r.sfn.OnStart = func(*sfn.StartExecutionInput) error {
				n := inflight.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(2 * time.Millisecond)
				inflight.Add(-1)
				return nil
			}
			var give []events.SQSMessage
			want := map[lease.Key]wantLease{}
			var wantNames, wantIDs []string
			for ln := 1; ln <= 10; ln++ {
				id := fmt.Sprintf("p-%02d", ln)
				give = append(give, jobMessage(t, "payments", ln, id, 0, 1))
				want[lease.Key{Type: "payments", Lane: ln}] = wantLease{id, lease.Starting, 1, handle(id, 1), execArn("payments", id, 1)}
				wantNames = append(wantNames, execName("payments", id, 1))
				wantIDs = append(wantIDs, "msg-"+id)
			}
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: give})
			if err != nil {
				t.Fatal(err)
			}
			if got := failures(resp); !equal(got, sorted(wantIDs...)) {
				t.Errorf("batch item failures = %q, want all ten held", got)
			}
			if got := startNames(r.sfn); !equal(got, sorted(wantNames...)) {
				t.Errorf("StartExecution calls = %q, want %q", got, wantNames)
			}
			checkLeases(t, r.leases, want)
			if p := peak.Load(); p > int32(concurrency) {
				t.Errorf("concurrent starts peaked at %d, want at most Concurrency=%d", p, concurrency)
			}
		})
	}
}

// TestHandleLaneAboveLimit: the type's limit was lowered; jobs waiting in lanes above it move into it
// (random) or back to a waiting group (first-free, TestLoweredLimitSendsFirstFreeJobsBackToWait).
func TestHandleLaneAboveLimit(t *testing.T) {
	tests := []struct {
		name         string
		lease        *lease.Lease
		give         func(t *testing.T) events.SQSMessage
		wantAttempts int
	}{
		{
			name: "new job",
			give: func(t *testing.T) events.SQSMessage { return jobMessage(t, "reports", 7, "r-1001", 0, 1) },
		},
		{
			name:         "job that already moved once carries its attempts",
			give:         func(t *testing.T) events.SQSMessage { return jobMessage(t, "reports", 7, "r-1001", 2, 1) },
			wantAttempts: 2,
		},
		{
			name:         "retrying job: attempts made travel with it, its lease goes",
			lease:        ptr(leaseOf("reports", 7, "r-1001", 1, lease.Retrying, 1)),
			give:         func(t *testing.T) events.SQSMessage { return jobMessage(t, "reports", 7, "r-1001", 0, 2) },
			wantAttempts: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRigStrategy(t, nil, lane.Random) // reports=3
			if tt.lease != nil {
				r.leases.Set(*tt.lease)
			}
			m := tt.give(t)
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}})
			if err != nil {
				t.Fatal(err)
			}
			if got := failures(resp); len(got) != 0 {
				t.Errorf("batch item failures = %q, want the moved original acknowledged", got)
			}
			if starts := r.sfn.Starts(); len(starts) != 0 {
				t.Errorf("StartExecution calls = %+v, want none in a lane above the limit", starts)
			}
			sent := r.sqs.Sent(lanesURL)
			if len(sent) != 1 {
				t.Fatalf("copies sent = %+v, want 1", sent)
			}
			c := sent[0]
			typ, ln, err := job.ParseGroupID(c.MessageGroupID)
			if err != nil || typ != "reports" || ln < 1 || ln > 3 {
				t.Errorf("copy's group = %q, want reports-{1..3}", c.MessageGroupID)
			}
			if c.MessageDeduplicationID == "" || c.MessageDeduplicationID == m.Attributes["MessageDeduplicationId"] {
				t.Errorf("copy's deduplication id = %q, want its own, not the original's", c.MessageDeduplicationID)
			}
			var j job.Job
			if err := json.Unmarshal([]byte(c.Body), &j); err != nil {
				t.Fatalf("copy's body %s: %v", c.Body, err)
			}
			if j.Type != "reports" || j.ID != "r-1001" || string(j.Input) != `{"seconds":3}` || !j.SubmittedAt.Equal(submitted) || j.Attempts != tt.wantAttempts {
				t.Errorf("copy's body = %s, want job r-1001 with its input, submittedAt and attempt %d", c.Body, tt.wantAttempts)
			}
			if got := deleted(r.sqs); !equal(got, []string{m.ReceiptHandle}) {
				t.Errorf("DeleteMessage handles = %q, want the original's", got)
			}
			checkLeases(t, r.leases, nil)
			checkDLQ(t, r.sqs, nil)
		})
	}
}

// TestHandleLoweredLimitBatch: ten lanes of a type whose limit is now 3: three start, seven move.
func TestHandleLoweredLimitBatch(t *testing.T) {
	r := newRig(t, nil)
	var give []events.SQSMessage
	for ln := 1; ln <= 10; ln++ {
		give = append(give, jobMessage(t, "reports", ln, fmt.Sprintf("r-%02d", ln), 0, 1))
	}
	if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: give}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); !equal(got, []string{"reports-r-01-1", "reports-r-02-1", "reports-r-03-1"}) {
		t.Errorf("StartExecution calls = %q, want lanes 1-3 only", got)
	}
	if n := len(r.sqs.Sent(lanesURL)); n != 7 {
		t.Errorf("moved = %d, want 7", n)
	}
	for _, l := range r.leases.Leases() {
		if l.Lane > 3 {
			t.Errorf("lease of lane %s above the limit 3", l.Key())
		}
	}
}

// TestHandleConcurrentInvocationsOneLane: two invocations get messages of one group at once (moto's
// concurrent long-poll bug, or a lease left by an interrupted release): the lease keeps the limit.
func TestHandleConcurrentInvocationsOneLane(t *testing.T) {
	for i := range 20 {
		r := newRig(t, nil)
		var wg sync.WaitGroup
		for _, id := range []string{"r-1001", "r-1002"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, id, 0, 1)}}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if n := len(r.sfn.Executions()); n != 1 {
			t.Fatalf("run %d: executions in one lane = %d, want 1", i, n)
		}
		if n := len(r.sfn.Starts()); n != 1 {
			t.Fatalf("run %d: StartExecution calls = %d, want 1", i, n)
		}
	}
}

// TestHandleRetryAfterThrottle: the throttled job starts on its next delivery, with the same name.
func TestHandleRetryAfterThrottle(t *testing.T) {
	r := newRig(t, nil)
	r.sfn.OnStart = throttled
	ctx := context.Background()
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	r.sfn.OnStart = nil
	r.clock.Advance(retryDelay)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
		t.Errorf("batch item failures = %q, want held", got)
	}
	if got := startNames(r.sfn); !equal(got, []string{"reports-r-1001-1", "reports-r-1001-1"}) {
		t.Errorf("StartExecution calls = %q, want the same name twice", got)
	}
	checkLeases(t, r.leases, map[lease.Key]wantLease{
		reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
	})
	checkDLQ(t, r.sqs, nil)
}

// TestHandleStartTimedOutThenRedelivered: the starter's invocation ended after StartExecution went
// through but before the lease said so; the batch comes back and the named start finds the execution.
func TestHandleStartTimedOutThenRedelivered(t *testing.T) {
	r := newRig(t, nil)
	r.leases.Set(leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1))
	r.sfn.Put(execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", ""))
	resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
		t.Errorf("batch item failures = %q, want held", got)
	}
	if n := len(r.sfn.Executions()); n != 1 {
		t.Errorf("executions = %d, want still 1", n)
	}
	checkLeases(t, r.leases, map[lease.Key]wantLease{
		reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
	})
}

func ptr[T any](v T) *T { return &v }

// A StartExecution that answers with a network error may still have started the execution. The
// claim must survive, so the attempt's end is acted on, never taken for a duplicate's.
func TestAmbiguousStartErrorKeepsTheJob(t *testing.T) {
	tests := []struct {
		name        string
		prev        *lease.Lease
		attempt     int
		receive     int
		closeAs     sfntypes.ExecutionStatus
		wantOutcome releaser.Outcome
	}{
		{name: "fresh job, execution failed", attempt: 1, receive: 1, closeAs: sfntypes.ExecutionStatusFailed, wantOutcome: releaser.Failed},
		{name: "fresh job, execution aborted", attempt: 1, receive: 1, closeAs: sfntypes.ExecutionStatusAborted, wantOutcome: releaser.Aborted},
		{name: "retrying job, execution failed", prev: ptr(leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1)), attempt: 2, receive: 2, closeAs: sfntypes.ExecutionStatusFailed, wantOutcome: releaser.Failed},
		{name: "retrying job, execution succeeded", prev: ptr(leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1)), attempt: 2, receive: 2, closeAs: sfntypes.ExecutionStatusSucceeded, wantOutcome: releaser.Succeeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			if tt.prev != nil {
				r.leases.Set(*tt.prev)
			}
			ctx := context.Background()
			r.sfn.AfterStart = func(*sfn.StartExecutionInput, string) error {
				return errors.New("request send failed: read tcp: connection reset by peer")
			}
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, tt.receive)}}); err != nil {
				t.Fatal(err)
			}
			r.sfn.AfterStart = nil
			r.sfn.Close(execArn("reports", "r-1001", tt.attempt), tt.closeAs, "JobFailed", "boom")
			r.clock.Advance(retryDelay * 2)
			resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, tt.receive+1)}})
			acked := len(resp.BatchItemFailures) == 0
			l, leased := r.leases.Lease(reports1)
			switch tt.wantOutcome {
			case releaser.Failed:
				if acked || !leased || l.Status != lease.Retrying {
					t.Errorf("failed attempt %d: acknowledged %v, lease %+v (leased %v); want held and retrying", tt.attempt, acked, l, leased)
				}
			case releaser.Aborted:
				if n := len(r.sqs.Sent(dlqURL)); n != 1 {
					t.Errorf("aborted job: dead letters = %d, want 1", n)
				}
			case releaser.Succeeded:
				if leased {
					t.Errorf("succeeded job's lane keeps lease %+v", l)
				}
			}
		})
	}
}

// When a batch holds several messages of one group and one of them is the job that holds the lane
// (being retried), that one runs: the lane's holder never waits behind the jobs it blocks, even if
// the queue hands the group out of order.
func TestLaneHolderRunsFirstInItsGroup(t *testing.T) {
	r := newRig(t, nil)
	r.leases.Set(leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1))
	ev := events.SQSEvent{Records: []events.SQSMessage{
		jobMessage(t, "reports", 1, "r-2002", 0, 1),
		jobMessage(t, "reports", 1, "r-1001", 0, 2),
	}}
	resp, err := r.st.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 2 {
		t.Errorf("batch item failures = %d, want 2 (the holder held, the other returned)", len(resp.BatchItemFailures))
	}
	l, _ := r.leases.Lease(reports1)
	if l.JobID != "r-1001" || l.Attempt != 2 || l.Status != lease.Starting {
		t.Errorf("lease = %s attempt %d %s, want r-1001 attempt 2 claimed (starting)", l.JobID, l.Attempt, l.Status)
	}
	checkVisibility(t, r.sqs, []visibility{{ev.Records[0].ReceiptHandle, 0, 0}})
}

// A version before claims recorded their state machine wrote status "running" with the execution's
// ARN only, once the start was confirmed. Read as a claim (starting), such a lease's redelivery starts
// "the same attempt again": on the state machine its execution runs on, where Step Functions answers
// with that execution, never on the type's state machine as configured now, where the same name would
// start the running job's attempt a second time.
func TestEarlierVersionsRunningLeaseIsNotStartedOnANewStateMachine(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, nil)
	const smNew = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample-v2"
	withLiveConfig(t, r, &liveConfig{}, config.Defaults{Limits: map[string]int{"reports": 3}, DefaultMaxAttempts: 3, StateMachineArn: smNew})
	old := leaseOf("reports", 1, "r-1001", 1, lease.Status("running"), 1)
	old.ExecutionArn = execArn("reports", "r-1001", 1) // on smArn, where it runs
	r.leases.Set(old)
	r.sfn.Put(execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", ""))
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}})
	if err != nil || !equal(failures(resp), []string{"msg-r-1001"}) {
		t.Fatalf("Handle = %+v, %v; want the running job held", resp, err)
	}
	if n := len(r.sfn.Executions()); n != 1 {
		t.Errorf("executions = %d (starts %v), want the running one only", n, startNames(r.sfn))
	}
	if l, ok := r.leases.Lease(reports1); !ok || l.Status != lease.Starting || l.ExecutionArn != execArn("reports", "r-1001", 1) {
		t.Errorf("lease = %+v (held %v), want the running execution's claim kept", l, ok)
	}
}

// The first version named the executions of some job ids otherwise than today (an id with "__" kept
// it, a hashed name had one "_"), and wrote status "running" once their start was confirmed. Read as
// a claim, such a lease's redelivery must find its running execution by the name the lease records,
// never start the attempt again under today's name: that would be a second execution of the job.
func TestEarlierVersionsRunningLeaseUnderAnOlderNameIsNotStartedAgain(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, nil)
	const id = "r__1001"
	const oldName = "reports-" + id + "-1" // today's RunName hashes an id with "__"
	if execName("reports", id, 1) == oldName {
		t.Fatalf("today's name of %s is still %s: the test needs an id named otherwise", id, oldName)
	}
	old := leaseOf("reports", 1, id, 1, lease.Status("running"), 1)
	old.ExecutionArn = fakes.ExecutionArn(smArn, oldName)
	r.leases.Set(old)
	x := execution("reports", 1, id, 1, sfntypes.ExecutionStatusRunning, "", "")
	x.Name = oldName
	r.sfn.Put(x)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, id, 0, 2)}})
	if err != nil || !equal(failures(resp), []string{"msg-" + id}) {
		t.Fatalf("Handle = %+v, %v; want the running job held", resp, err)
	}
	if n := len(r.sfn.Executions()); n != 1 {
		t.Errorf("executions = %d (starts %v), want the running one only", n, startNames(r.sfn))
	}
	if l, ok := r.leases.Lease(reports1); !ok || l.ExecutionArn != old.ExecutionArn {
		t.Errorf("lease = %+v (held %v), want it to name the running execution", l, ok)
	}
}
