package iampolicy

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Account says where the calls go: the partition, region and account of ARNs built from names
// (a table name, a queue URL), and the partition key attribute of every table (for the condition
// key dynamodb:LeadingKeys).
type Account struct {
	Partition, Region, ID string
	// PartitionKey is the name of the tables' partition key attribute ("pk").
	PartitionKey string
}

// Requests maps one SDK call (its input as the SDK's middleware sees it) to the authorizations IAM
// makes for it. Sources, from AWS's documentation:
//   - DynamoDB: "Permissions for Put, Update, Delete, and Get actions [of a transaction] are governed
//     by the permissions used for the underlying PutItem, UpdateItem, DeleteItem, and GetItem
//     operations. For the ConditionCheck action, you can use the dynamodb:ConditionCheckItem
//     permission" (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html).
//     dynamodb:LeadingKeys is the partition key value of the item(s) an operation reads or writes
//     (Using IAM policy conditions for fine-grained access control); a Scan has none.
//   - SQS: "You cannot set permissions explicitly for SendMessageBatch, DeleteMessageBatch, or
//     ChangeMessageVisibilityBatch. Instead, setting permissions for SendMessage, DeleteMessage, or
//     ChangeMessageVisibility sets permissions for the corresponding batch versions"
//     (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-batch-api.html).
//   - Step Functions: StartExecution is authorized on the state machine, DescribeExecution and
//     StopExecution on the execution (Service Authorization Reference, AWS Step Functions).
//   - EventBridge: PutEvents is authorized on the event bus each entry goes to (the account's
//     default bus when EventBusName is empty), once per entry, with the entry's source and detail
//     type as the condition keys events:source and events:detail-type ("Using IAM policy
//     conditions in Amazon EventBridge", EventBridge User Guide; an entry refused by them fails
//     alone, NotAuthorizedForSourceException or NotAuthorizedForDetailTypeException in
//     PutEventsResultEntry). Locally the whole call is refused, which a caller handles as it
//     handles a failed entry.
//
// A call this does not know is an error: a new SDK operation in the code must be mapped here before
// the check passes.
func Requests(a Account, input any) ([]Request, error) {
	switch in := input.(type) {
	// SQS
	case *sqs.SendMessageInput:
		return a.sqs("sqs:SendMessage", in.QueueUrl)
	case *sqs.SendMessageBatchInput:
		return a.sqs("sqs:SendMessage", in.QueueUrl)
	case *sqs.DeleteMessageInput:
		return a.sqs("sqs:DeleteMessage", in.QueueUrl)
	case *sqs.DeleteMessageBatchInput:
		return a.sqs("sqs:DeleteMessage", in.QueueUrl)
	case *sqs.ChangeMessageVisibilityInput:
		return a.sqs("sqs:ChangeMessageVisibility", in.QueueUrl)
	case *sqs.ChangeMessageVisibilityBatchInput:
		return a.sqs("sqs:ChangeMessageVisibility", in.QueueUrl)
	case *sqs.ReceiveMessageInput:
		return a.sqs("sqs:ReceiveMessage", in.QueueUrl)
	case *sqs.GetQueueAttributesInput:
		return a.sqs("sqs:GetQueueAttributes", in.QueueUrl)

	// Step Functions
	case *sfn.StartExecutionInput:
		return one("states:StartExecution", deref(in.StateMachineArn), nil)
	case *sfn.DescribeExecutionInput:
		return one("states:DescribeExecution", deref(in.ExecutionArn), nil)
	case *sfn.StopExecutionInput:
		return one("states:StopExecution", deref(in.ExecutionArn), nil)
	case *sfn.ListExecutionsInput:
		return one("states:ListExecutions", deref(in.StateMachineArn), nil)

	// EventBridge
	case *eventbridge.PutEventsInput:
		if len(in.Entries) == 0 {
			return nil, fmt.Errorf("PutEvents without entries (EventBridge refuses it)")
		}
		out := make([]Request, 0, len(in.Entries))
		for _, e := range in.Entries {
			ctx := map[string][]string{}
			if e.Source != nil {
				ctx["events:source"] = []string{*e.Source}
			}
			if e.DetailType != nil {
				ctx["events:detail-type"] = []string{*e.DetailType}
			}
			out = append(out, Request{Action: "events:PutEvents", Resource: a.eventBus(e.EventBusName), Context: ctx})
		}
		return out, nil

	// DynamoDB
	case *dynamodb.GetItemInput:
		return a.item("dynamodb:GetItem", in.TableName, in.Key)
	case *dynamodb.PutItemInput:
		return a.item("dynamodb:PutItem", in.TableName, in.Item)
	case *dynamodb.UpdateItemInput:
		return a.item("dynamodb:UpdateItem", in.TableName, in.Key)
	case *dynamodb.DeleteItemInput:
		return a.item("dynamodb:DeleteItem", in.TableName, in.Key)
	case *dynamodb.QueryInput:
		if in.IndexName != nil {
			return nil, fmt.Errorf("Query on index %s: iampolicy maps queries of the table only", *in.IndexName)
		}
		pk, err := a.queryPartition(in)
		if err != nil {
			return nil, err
		}
		return one("dynamodb:Query", a.table(in.TableName), map[string][]string{"dynamodb:LeadingKeys": {pk}})
	case *dynamodb.ScanInput:
		if in.IndexName != nil {
			return nil, fmt.Errorf("Scan of index %s: iampolicy maps scans of the table only", *in.IndexName)
		}
		return one("dynamodb:Scan", a.table(in.TableName), nil)
	case *dynamodb.TransactWriteItemsInput:
		var out []Request
		for i, it := range in.TransactItems {
			var rs []Request
			var err error
			switch {
			case it.Put != nil:
				rs, err = a.item("dynamodb:PutItem", it.Put.TableName, it.Put.Item)
			case it.Update != nil:
				rs, err = a.item("dynamodb:UpdateItem", it.Update.TableName, it.Update.Key)
			case it.Delete != nil:
				rs, err = a.item("dynamodb:DeleteItem", it.Delete.TableName, it.Delete.Key)
			case it.ConditionCheck != nil:
				rs, err = a.item("dynamodb:ConditionCheckItem", it.ConditionCheck.TableName, it.ConditionCheck.Key)
			default:
				err = fmt.Errorf("TransactItems[%d] has no action", i)
			}
			if err != nil {
				return nil, err
			}
			out = append(out, rs...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("iampolicy has no IAM mapping for %T: add it to Requests", input)
}

func one(action, resource string, ctx map[string][]string) ([]Request, error) {
	if resource == "" {
		return nil, fmt.Errorf("%s without a resource", action)
	}
	return []Request{{Action: action, Resource: resource, Context: ctx}}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// sqs authorizes action on the queue of a queue URL (https://host/ACCOUNT/NAME).
func (a Account) sqs(action string, queueURL *string) ([]Request, error) {
	u, err := url.Parse(deref(queueURL))
	if err != nil {
		return nil, fmt.Errorf("%s: queue URL %q: %w", action, deref(queueURL), err)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 2 {
		return nil, fmt.Errorf("%s: queue URL %q is not https://host/ACCOUNT/NAME", action, deref(queueURL))
	}
	return one(action, fmt.Sprintf("arn:%s:sqs:%s:%s:%s", a.Partition, a.Region, parts[0], parts[1]), nil)
}

// eventBus is the ARN of the bus a PutEvents entry names: the default bus when it names none, an
// ARN as given, a name in the account.
func (a Account) eventBus(name *string) string {
	n := deref(name)
	switch {
	case n == "":
		n = "default"
	case strings.HasPrefix(n, "arn:"):
		return n
	}
	return fmt.Sprintf("arn:%s:events:%s:%s:event-bus/%s", a.Partition, a.Region, a.ID, n)
}

func (a Account) table(name *string) string {
	n := deref(name)
	if strings.HasPrefix(n, "arn:") {
		return n
	}
	return fmt.Sprintf("arn:%s:dynamodb:%s:%s:table/%s", a.Partition, a.Region, a.ID, n)
}

func (a Account) item(action string, table *string, key map[string]ddbtypes.AttributeValue) ([]Request, error) {
	pk, err := a.partition(key)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", action, deref(table), err)
	}
	return one(action, a.table(table), map[string][]string{"dynamodb:LeadingKeys": {pk}})
}

func (a Account) partition(key map[string]ddbtypes.AttributeValue) (string, error) {
	switch v := key[a.PartitionKey].(type) {
	case *ddbtypes.AttributeValueMemberS:
		return v.Value, nil
	case *ddbtypes.AttributeValueMemberN:
		return v.Value, nil
	}
	return "", fmt.Errorf("no %s in the key", a.PartitionKey)
}

var equality = regexp.MustCompile(`^\s*(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)\s*$`)

// queryPartition reads the partition key value of a query's key condition ("pk = :pk AND ...").
func (a Account) queryPartition(in *dynamodb.QueryInput) (string, error) {
	cond := deref(in.KeyConditionExpression)
	for _, part := range regexp.MustCompile(`(?i)\s+AND\s+`).Split(cond, -1) {
		m := equality.FindStringSubmatch(part)
		if m == nil {
			continue
		}
		name := m[1]
		if strings.HasPrefix(name, "#") {
			name = in.ExpressionAttributeNames[name]
		}
		if name != a.PartitionKey {
			continue
		}
		return a.partition(map[string]ddbtypes.AttributeValue{a.PartitionKey: in.ExpressionAttributeValues[m[2]]})
	}
	return "", fmt.Errorf("Query key condition %q has no %s = :value", cond, a.PartitionKey)
}
