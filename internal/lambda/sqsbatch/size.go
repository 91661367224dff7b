package sqsbatch

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQS's limits on a SendMessageBatch request. Sources, checked in November 2026:
//
//   - SendMessageBatch API reference: "The maximum allowed individual message size and the maximum
//     total payload size (the sum of the individual lengths of all of the batched messages) are both
//     1 MiB 1,048,576 bytes." A request over it fails as a whole with BatchRequestTooLong (HTTP 400,
//     query-compatible code AWS.SimpleQueueService.BatchRequestTooLong): every entry, not only the
//     last one. https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
//   - "Amazon SQS increases maximum message payload size to 1 MiB" (August 2025; 256 KiB, 262,144
//     bytes, before): https://aws.amazon.com/about-aws/whats-new/2025/08/amazon-sqs-max-payload-size-1mib/
//     The queue attribute MaximumMessageSize now defaults to 1 MiB (CreateQueue API reference).
//   - MessageAttributeValue: "All parts of the message attribute, including Name, Type, and Value,
//     are part of the message size restriction (1 MiB or 1,048,576 bytes)."
//   - Amazon SQS message quotas: at most 10 messages per batch.
//     https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html
//
// A queue whose MaximumMessageSize is set lower, or a partition where the 256 KiB limit still holds,
// refuses batches these figures allow; Sender then sends the refused batch one message at a time.
const (
	// MaxBatch is the most entries one SendMessageBatch takes.
	MaxBatch = 10
	// MaxBatchBytes is the most one SendMessageBatch's messages may add up to.
	MaxBatchBytes = 1 << 20
	// MaxMessageBytes is the largest message SQS takes (body and message attributes).
	MaxMessageBytes = 1 << 20
)

// Size is what an entry counts toward a batch's total, counted conservatively: SQS counts the body
// and each message attribute's name, type and value; Size also counts the system attributes, the
// entry, group and deduplication ids, which SQS does not document either way. Strings count their
// UTF-8 bytes.
func Size(e types.SendMessageBatchRequestEntry) int {
	n := len(aws.ToString(e.MessageBody)) + len(aws.ToString(e.Id)) + len(aws.ToString(e.MessageGroupId)) + len(aws.ToString(e.MessageDeduplicationId))
	for name, v := range e.MessageAttributes {
		n += len(name) + valueSize(v.DataType, v.StringValue, v.BinaryValue, v.StringListValues, v.BinaryListValues)
	}
	for name, v := range e.MessageSystemAttributes {
		n += len(string(name)) + valueSize(v.DataType, v.StringValue, v.BinaryValue, v.StringListValues, v.BinaryListValues)
	}
	return n
}

func valueSize(dataType, s *string, b []byte, ss []string, bs [][]byte) int {
	n := len(aws.ToString(dataType)) + len(aws.ToString(s)) + len(b)
	for _, x := range ss {
		n += len(x)
	}
	for _, x := range bs {
		n += len(x)
	}
	return n
}

// Split groups entries, in order, into the batches of one SendMessageBatch each: at most MaxBatch
// entries whose Sizes add up to at most maxBytes (MaxBatchBytes when 0 or less). An entry larger
// than maxBytes goes in a batch of its own, so that if SQS refuses it, it fails alone.
func Split(entries []types.SendMessageBatchRequestEntry, maxBytes int) [][]types.SendMessageBatchRequestEntry {
	if maxBytes <= 0 {
		maxBytes = MaxBatchBytes
	}
	var out [][]types.SendMessageBatchRequestEntry
	start, size := 0, 0
	for i, e := range entries {
		n := Size(e)
		if i > start && (i-start == MaxBatch || size+n > maxBytes) {
			out = append(out, entries[start:i:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(entries) {
		out = append(out, entries[start:len(entries):len(entries)])
	}
	return out
}
