package simworld

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

func apiError(code, msg string) error { return fakes.APIError(code, msg) }

// gate holds a handler's call until the world lets it through; it returns the call (with the
// world's decisions) or errKilled. Calls made outside any invocation (the world's own: operator
// actions, checks) pass at once.
func (w *World) gate(ctx context.Context, op, key string) (*call, error) {
	return w.gateUnits(ctx, op, key, nil)
}

// gateUnits is gate for a DynamoDB call that consumes u on its partition keys (nil without the
// AWS model).
func (w *World) gateUnits(ctx context.Context, op, key string, u *units) (*call, error) {
	p := procOf(ctx)
	if p == nil {
		return &call{}, nil
	}
	if p.dead {
		return nil, errKilled
	}
	c := &call{proc: p, op: op, key: key, ready: make(chan struct{}), units: u}
	w.sched.enter(c)
	if c.kill == killBefore {
		return nil, errKilled
	}
	return c, nil
}

// after ends a call that took effect: a kill after it loses the answer.
func after[T any](c *call, out T, err error) (T, error) {
	if c.kill == killAfter {
		var zero T
		return zero, errKilled
	}
	return out, err
}

// ---- SQS ----

type sqsClient struct{ w *World }

func (s sqsClient) q(url *string) (*queue, error) {
	q, ok := s.w.queues[aws.ToString(url)]
	if !ok {
		return nil, &sqstypes.QueueDoesNotExist{Message: aws.String("The specified queue does not exist")}
	}
	return q, nil
}

func (s sqsClient) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c, err := s.w.gate(ctx, "sqs.SendMessage", aws.ToString(in.QueueUrl)+" "+aws.ToString(in.MessageGroupId)+" "+aws.ToString(in.MessageDeduplicationId)+" "+aws.ToString(in.MessageBody))
	if err != nil {
		return nil, err
	}
	q, err := s.q(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := checkSend(q, in.MessageGroupId, in.MessageDeduplicationId, len(aws.ToString(in.MessageBody))); err != nil {
		return after(c, (*sqs.SendMessageOutput)(nil), err)
	}
	id, _ := q.send(aws.ToString(in.MessageBody), aws.ToString(in.MessageGroupId), aws.ToString(in.MessageDeduplicationId), in.MessageAttributes, time.Duration(in.DelaySeconds)*time.Second, s.w.senderOf(ctx))
	return after(c, &sqs.SendMessageOutput{MessageId: aws.String(id)}, nil)
}

func checkSend(q *queue, group, dedup *string, size int) error {
	if q.fifo && (aws.ToString(group) == "" || aws.ToString(dedup) == "") {
		return apiError("MissingParameter", "The request must contain the parameter MessageGroupId (and MessageDeduplicationId: the queue has no content-based deduplication)")
	}
	if len(aws.ToString(dedup)) > 128 || len(aws.ToString(group)) > 128 {
		return apiError("InvalidParameterValue", "MessageGroupId and MessageDeduplicationId are at most 128 characters")
	}
	if size > 1<<20 {
		return apiError("InvalidParameterValue", "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes.")
	}
	return nil
}

func (s sqsClient) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	var key strings.Builder
	key.WriteString(aws.ToString(in.QueueUrl))
	for _, e := range in.Entries {
		key.WriteString(" " + aws.ToString(e.MessageGroupId) + "/" + aws.ToString(e.MessageDeduplicationId) + "/" + aws.ToString(e.Id))
	}
	c, err := s.w.gate(ctx, "sqs.SendMessageBatch", key.String())
	if err != nil {
		return nil, err
	}
	q, err := s.q(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if len(in.Entries) == 0 || len(in.Entries) > 10 {
		return after(c, (*sqs.SendMessageBatchOutput)(nil), &sqstypes.TooManyEntriesInBatchRequest{Message: aws.String("a batch takes 1 to 10 entries")})
	}
	total := 0
	for _, e := range in.Entries {
		total += len(aws.ToString(e.MessageBody))
		for k, v := range e.MessageAttributes {
			total += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
		}
	}
	if total > 1<<20 {
		return after(c, (*sqs.SendMessageBatchOutput)(nil), &sqstypes.BatchRequestTooLong{Message: aws.String("Batch requests cannot be longer than 1048576 bytes")})
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		if err := checkSend(q, e.MessageGroupId, e.MessageDeduplicationId, len(aws.ToString(e.MessageBody))); err != nil {
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), Message: aws.String(err.Error()), SenderFault: true})
			continue
		}
		id, _ := q.send(aws.ToString(e.MessageBody), aws.ToString(e.MessageGroupId), aws.ToString(e.MessageDeduplicationId), e.MessageAttributes, time.Duration(e.DelaySeconds)*time.Second, s.w.senderOf(ctx))
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String(id)})
	}
	return after(c, out, nil)
}

func (s sqsClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	c, err := s.w.gate(ctx, "sqs.DeleteMessage", aws.ToString(in.QueueUrl)+" "+aws.ToString(in.ReceiptHandle))
	if err != nil {
		return nil, err
	}
	q, err := s.q(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	q.remove(aws.ToString(in.ReceiptHandle))
	return after(c, &sqs.DeleteMessageOutput{}, nil)
}

func (s sqsClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	c, err := s.w.gate(ctx, "sqs.ChangeMessageVisibility", aws.ToString(in.QueueUrl)+" "+aws.ToString(in.ReceiptHandle))
	if err != nil {
		return nil, err
	}
	q, err := s.q(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	err = q.changeVisibility(aws.ToString(in.ReceiptHandle), time.Duration(in.VisibilityTimeout)*time.Second)
	if err != nil {
		return after(c, (*sqs.ChangeMessageVisibilityOutput)(nil), err)
	}
	return after(c, &sqs.ChangeMessageVisibilityOutput{}, nil)
}

func (s sqsClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	var key strings.Builder
	key.WriteString(aws.ToString(in.QueueUrl))
	for _, e := range in.Entries {
		key.WriteString(" " + aws.ToString(e.ReceiptHandle))
	}
	c, err := s.w.gate(ctx, "sqs.ChangeMessageVisibilityBatch", key.String())
	if err != nil {
		return nil, err
	}
	q, err := s.q(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		if err := q.changeVisibility(aws.ToString(e.ReceiptHandle), time.Duration(e.VisibilityTimeout)*time.Second); err != nil {
			code := "ReceiptHandleIsInvalid"
			if _, ok := err.(*sqstypes.MessageNotInflight); ok {
				code = "MessageNotInflight"
			}
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String(code), Message: aws.String(err.Error()), SenderFault: true})
			continue
		}
		out.Successful = append(out.Successful, sqstypes.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return after(c, out, nil)
}

func (s sqsClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	c, err := s.w.gate(ctx, "sqs.GetQueueAttributes", aws.ToString(in.QueueUrl))
	if err != nil {
		return nil, err
	}
	q, err := s.q(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	now := s.w.now()
	vis, hidden := 0, 0
	for _, m := range q.live() {
		if m.visible(now) {
			vis++
		} else {
			hidden++
		}
	}
	return after(c, &sqs.GetQueueAttributesOutput{Attributes: map[string]string{
		"ApproximateNumberOfMessages": strconv.Itoa(vis), "ApproximateNumberOfMessagesNotVisible": strconv.Itoa(hidden),
		"ApproximateNumberOfMessagesDelayed": "0",
	}}, nil)
}

// ---- DynamoDB ----

// ddbClient puts the world's faults in front of an in-memory table (fakes.DynamoDB, which applies
// conditions and transactions as DynamoDB does). A write may be throttled (not applied), or
// applied with its answer lost: the SDK then sends the same request again, and the caller gets the
// second answer, typically ConditionalCheckFailed against its own first write.
type ddbClient struct {
	w *World
	t *fakes.DynamoDB
}

func keyString(item map[string]ddbtypes.AttributeValue) string {
	pk, _ := item["pk"].(*ddbtypes.AttributeValueMemberS)
	sk, _ := item["sk"].(*ddbtypes.AttributeValueMemberS)
	var a, b string
	if pk != nil {
		a = pk.Value
	}
	if sk != nil {
		b = sk.Value
	}
	return a + "|" + b
}

func exprValues(v map[string]ddbtypes.AttributeValue) string {
	var b strings.Builder
	for _, k := range []string{":pk", ":v", ":j", ":m", ":h", ":r", ":due", ":p", ":sk"} {
		if x, ok := v[k]; ok {
			switch x := x.(type) {
			case *ddbtypes.AttributeValueMemberS:
				b.WriteString(k + "=" + x.Value + " ")
			case *ddbtypes.AttributeValueMemberN:
				b.WriteString(k + "=" + x.Value + " ")
			}
		}
	}
	return b.String()
}

// read gates a read of partition key pk ("": not metered).
func (d ddbClient) read(ctx context.Context, op, key, pk string) (*call, error) {
	var u *units
	if d.w.aws != nil && pk != "" {
		u = &units{read: true, n: 1, pks: []string{pk}}
	}
	c, err := d.w.gateUnits(ctx, op, key, u)
	if err != nil {
		return nil, err
	}
	if c.fault == faultThrottle {
		d.w.trace(key, "ddb.throttled %s %s", op, key)
		return c, &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("Throughput exceeds the current capacity of your table or index (simulated, after the SDK's retries)")}
	}
	d.w.meterRead(c)
	return c, nil
}

// writeUnits is a write's units (n on each item, keyed "pk|sk") in the AWS model; nil without it.
func (w *World) writeUnits(n float64, keys ...string) *units {
	if w.aws == nil {
		return nil
	}
	return &units{n: n, pks: partitionKeys(keys...)}
}

// write applies do once, or per the call's fault.
func write[T any](c *call, w *World, key string, do func() (T, error)) (T, error) {
	switch c.fault {
	case faultThrottle:
		w.trace(key, "ddb.throttled %s %s", c.op, key)
		var zero T
		return zero, &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("Throughput exceeds the current capacity of your table or index (simulated, after the SDK's retries)")}
	case faultAmbiguous:
		// Applied; the answer is lost; the SDK retries the same request.
		_, err1 := do()
		out, err := do()
		w.trace(key, "ddb.ambiguous %s first=%v retry=%v", c.op, errCode(err1), errCode(err))
		return after(c, out, err)
	case faultLost:
		// Applied; the answer is lost and the SDK gives up (its retries throttled).
		_, err := do()
		w.trace(key, "ddb.lost %s applied=%v", c.op, errCode(err))
		var zero T
		return after(c, zero, apiError("InternalServerError", "Internal server error (simulated: the write was applied, its answer lost)"))
	}
	out, err := do()
	return after(c, out, err)
}

func errCode(err error) string {
	if err == nil {
		return "ok"
	}
	s := err.Error()
	if i := strings.Index(s, ":"); i > 0 && i < 60 {
		return s[:i]
	}
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

func (d ddbClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	k := keyString(in.Key)
	pk, _, _ := strings.Cut(k, "|")
	c, err := d.read(ctx, "ddb.GetItem", k, pk)
	if err != nil {
		return nil, err
	}
	out, err := d.t.GetItem(ctx, in)
	if err == nil && c.proc != nil && strings.HasPrefix(k, "BATCH#") {
		// The ledger's reads, by reader: a race between one's reads and another's writes (two
		// opens of a batch) shows in the batch's trace.
		d.w.trace(k, "ddb.get %s by %s -> %s", k, c.proc.name, map[bool]string{true: "found", false: "absent"}[out.Item != nil])
	}
	return after(c, out, err)
}

func (d ddbClient) Query(ctx context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	pk := ""
	if v, ok := in.ExpressionAttributeValues[":pk"].(*ddbtypes.AttributeValueMemberS); ok {
		pk = v.Value
	}
	c, err := d.read(ctx, "ddb.Query", exprValues(in.ExpressionAttributeValues)+keyString(in.ExclusiveStartKey), pk)
	if err != nil {
		return nil, err
	}
	out, err := d.t.Query(ctx, in)
	if err == nil {
		d.w.queryUnits(c, out.Items)
	}
	return after(c, out, err)
}

func (d ddbClient) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c, err := d.read(ctx, "ddb.Scan", exprValues(in.ExpressionAttributeValues)+keyString(in.ExclusiveStartKey), "")
	if err != nil {
		return nil, err
	}
	out, err := d.t.Scan(ctx, in)
	return after(c, out, err)
}

func (d ddbClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	k := keyString(in.Item)
	c, err := d.w.gateUnits(ctx, "ddb.PutItem", k+" "+aws.ToString(in.ConditionExpression), d.w.writeUnits(1, k))
	if err != nil {
		return nil, err
	}
	d.w.meterWrite(c, 1, k)
	return write(c, d.w, k, func() (*dynamodb.PutItemOutput, error) {
		out, err := d.t.PutItem(ctx, in)
		d.w.trace(k, "ddb.put %s cond=%q -> %s", k, aws.ToString(in.ConditionExpression), errCode(err))
		if err == nil {
			d.w.check.put(in.Item)
		}
		d.w.afterWrite(k)
		return out, err
	})
}

func (d ddbClient) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	k := keyString(in.Key)
	c, err := d.w.gateUnits(ctx, "ddb.DeleteItem", k+" "+aws.ToString(in.ConditionExpression), d.w.writeUnits(1, k))
	if err != nil {
		return nil, err
	}
	d.w.meterWrite(c, 1, k)
	return write(c, d.w, k, func() (*dynamodb.DeleteItemOutput, error) {
		out, err := d.t.DeleteItem(ctx, in)
		d.w.trace(k, "ddb.delete %s cond=%q -> %s", k, aws.ToString(in.ConditionExpression), errCode(err))
		d.w.afterWrite(k)
		return out, err
	})
}

func (d ddbClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var key strings.Builder
	for _, it := range in.TransactItems {
		if it.Put != nil {
			key.WriteString(keyString(it.Put.Item) + " ")
		}
	}
	var keys []string
	if d.w.aws != nil {
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				keys = append(keys, keyString(it.Put.Item))
			case it.Update != nil:
				keys = append(keys, keyString(it.Update.Key))
			case it.Delete != nil:
				keys = append(keys, keyString(it.Delete.Key))
			case it.ConditionCheck != nil:
				keys = append(keys, keyString(it.ConditionCheck.Key))
			}
		}
	}
	c, err := d.w.gateUnits(ctx, "ddb.TransactWriteItems", key.String(), d.w.writeUnits(2, keys...))
	if err != nil {
		return nil, err
	}
	if d.w.aws != nil {
		d.w.meterWrite(c, 2, keys...)
	}
	if c.fault == faultConflict {
		reasons := make([]ddbtypes.CancellationReason, len(in.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String("None")
		}
		reasons[0].Code = aws.String("TransactionConflict")
		return after(c, (*dynamodb.TransactWriteItemsOutput)(nil), error(&ddbtypes.TransactionCanceledException{
			Message: aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict]"), CancellationReasons: reasons,
		}))
	}
	return write(c, d.w, key.String(), func() (*dynamodb.TransactWriteItemsOutput, error) {
		out, err := d.t.TransactWriteItems(ctx, in)
		d.w.afterWrite(key.String())
		return out, err
	})
}

// ---- Step Functions ----

type sfnClient struct{ w *World }

func (s sfnClient) StartExecution(ctx context.Context, in *sfn.StartExecutionInput, _ ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error) {
	c, err := s.w.gate(ctx, "sfn.StartExecution", aws.ToString(in.StateMachineArn)+" "+aws.ToString(in.Name))
	if err != nil {
		return nil, err
	}
	if c.fault == faultThrottle {
		return nil, apiError("ThrottlingException", "Rate exceeded (simulated)")
	}
	out, err := s.w.sfn.start(aws.ToString(in.StateMachineArn), aws.ToString(in.Name), aws.ToString(in.Input))
	if c.fault == faultLost && err == nil {
		return after(c, (*sfn.StartExecutionOutput)(nil), apiError("InternalServerError", "simulated: the start went through, its answer was lost"))
	}
	return after(c, out, err)
}

func (s sfnClient) DescribeExecution(ctx context.Context, in *sfn.DescribeExecutionInput, _ ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error) {
	c, err := s.w.gate(ctx, "sfn.DescribeExecution", aws.ToString(in.ExecutionArn))
	if err != nil {
		return nil, err
	}
	if c.fault == faultThrottle {
		return nil, apiError("ThrottlingException", "Rate exceeded (simulated)")
	}
	out, err := s.w.sfn.describe(aws.ToString(in.ExecutionArn), c.fault == faultStale)
	return after(c, out, err)
}

func (s sfnClient) StopExecution(ctx context.Context, in *sfn.StopExecutionInput, _ ...func(*sfn.Options)) (*sfn.StopExecutionOutput, error) {
	c, err := s.w.gate(ctx, "sfn.StopExecution", aws.ToString(in.ExecutionArn))
	if err != nil {
		return nil, err
	}
	if c.fault == faultThrottle {
		return nil, apiError("ThrottlingException", "Rate exceeded (simulated)")
	}
	s.w.check.cancelMade(procOf(ctx), aws.ToString(in.ExecutionArn), aws.ToString(in.Error), aws.ToString(in.Cause))
	out, err := s.w.sfn.stopCall(aws.ToString(in.ExecutionArn), aws.ToString(in.Error), aws.ToString(in.Cause))
	if c.fault == faultLost && err == nil {
		return after(c, (*sfn.StopExecutionOutput)(nil), apiError("InternalServerError", "simulated: the stop went through, its answer was lost"))
	}
	return after(c, out, err)
}

func (s sfnClient) ListExecutions(ctx context.Context, in *sfn.ListExecutionsInput, _ ...func(*sfn.Options)) (*sfn.ListExecutionsOutput, error) {
	c, err := s.w.gate(ctx, "sfn.ListExecutions", aws.ToString(in.StateMachineArn)+" "+string(in.StatusFilter)+" "+aws.ToString(in.NextToken))
	if err != nil {
		return nil, err
	}
	if c.fault == faultThrottle {
		return nil, apiError("ThrottlingException", "Rate exceeded (simulated)")
	}
	out, err := s.w.sfn.list(in, c.fault == faultStale)
	return after(c, out, err)
}
