package emulator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// What moto 5.2.1 enforces of IAM once its authorization is on (docs/emulators.md, "IAM"). Each
// case is a call that AWS would decide one way; the test pins what moto decides, so that an upgrade
// that changes it fails here and the documentation (and the choice not to run the local stack's
// roles on moto) is looked at again. Read from moto/core/authorization.py and
// moto/iam/access_control.py:
//   - the action is "<signing name>:<operation>", so batch and transaction calls need actions AWS
//     does not have (sqs:SendMessageBatch, dynamodb:TransactWriteItems) and are refused with the
//     actions AWS checks;
//   - only SQS (and IAM, STS) name the resource; DynamoDB and Step Functions are authorized against
//     "*", which a statement naming a table or state machine never matches;
//   - conditions other than StringEquals are ignored, and condition keys are never supplied.
func TestMotoIAMEnforcement(t *testing.T) {
	ctx := t.Context()
	p := startMoto(t, MotoOptions{})
	admin := loopbackConfig()
	db := dynamodb.NewFromConfig(admin, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(p.Endpoint()) })
	q := sqs.NewFromConfig(admin, func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.Endpoint()) })
	queues := map[string]string{}
	for _, name := range []string{"mine", "other"} {
		out, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		queues[name] = aws.ToString(out.QueueUrl)
		if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName: aws.String(name), BillingMode: ddbtypes.BillingModePayPerRequest,
			AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
			KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	sm := createStateMachine(t, sfnClient(p.Endpoint()), "probe", map[string]any{"StartAt": "Done", "States": map[string]any{"Done": map[string]any{"Type": "Succeed"}}})
	policy := `{"Version": "2012-10-17", "Statement": [
		{"Effect": "Allow", "Action": "states:StartExecution", "Resource": "` + sm + `"},
		{"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "arn:aws:sqs:us-east-1:123456789012:mine"},
		{"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": "arn:aws:dynamodb:us-east-1:123456789012:table/mine"},
		{"Effect": "Allow", "Action": ["dynamodb:UpdateItem", "dynamodb:DeleteItem"], "Resource": "*"},
		{"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": "*",
		 "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["CONFIG"]}}}]}`
	iam(t, p.Endpoint(), url.Values{"Action": {"CreateUser"}, "UserName": {"probe"}})
	iam(t, p.Endpoint(), url.Values{"Action": {"PutUserPolicy"}, "UserName": {"probe"}, "PolicyName": {"probe"}, "PolicyDocument": {policy}})
	keys := iam(t, p.Endpoint(), url.Values{"Action": {"CreateAccessKey"}, "UserName": {"probe"}})
	id, secret := between(keys, "AccessKeyId"), between(keys, "SecretAccessKey")
	if id == "" || secret == "" {
		t.Fatalf("CreateAccessKey answered %s", keys)
	}
	resetAuth(t, p.Endpoint(), "0") // every request from now on is authorized

	probe := loopbackConfig()
	probe.Credentials = credentials.NewStaticCredentialsProvider(id, secret, "")
	pdb := dynamodb.NewFromConfig(probe, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(p.Endpoint()) })
	pq := sqs.NewFromConfig(probe, func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.Endpoint()) })
	psfn := sfn.NewFromConfig(probe, func(o *sfn.Options) { o.BaseEndpoint = aws.String(p.Endpoint()) })
	key := func(pk string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: pk}}
	}
	cases := []struct {
		name      string
		aws, moto bool // allowed?
		call      func() error
	}{
		{"SendMessage to the granted queue", true, true, func() error {
			_, err := pq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queues["mine"]), MessageBody: aws.String("x")})
			return err
		}},
		{"SendMessage to another queue: SQS resources are checked", false, false, func() error {
			_, err := pq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queues["other"]), MessageBody: aws.String("x")})
			return err
		}},
		{"SendMessageBatch with sqs:SendMessage: moto wants sqs:SendMessageBatch", true, false, func() error {
			_, err := pq.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queues["mine"]),
				Entries: []sqstypes.SendMessageBatchRequestEntry{{Id: aws.String("1"), MessageBody: aws.String("x")}}})
			return err
		}},
		{"PutItem on the granted table: moto authorizes DynamoDB against *", true, false, func() error {
			_, err := pdb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("mine"), Item: key("a")})
			return err
		}},
		{"UpdateItem granted on *: any table passes", true, true, func() error {
			_, err := pdb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("other"), Key: key("a"),
				UpdateExpression: aws.String("SET v = :v"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":v": &ddbtypes.AttributeValueMemberS{Value: "1"}}})
			return err
		}},
		{"TransactWriteItems of an Update and a Delete: moto wants dynamodb:TransactWriteItems", true, false, func() error {
			_, err := pdb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
				{Delete: &ddbtypes.Delete{TableName: aws.String("other"), Key: key("b")}},
				{Update: &ddbtypes.Update{TableName: aws.String("other"), Key: key("a"), UpdateExpression: aws.String("SET v = :v"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":v": &ddbtypes.AttributeValueMemberS{Value: "2"}}}},
			}})
			return err
		}},
		{"GetItem outside the LeadingKeys condition: moto ignores the condition", false, true, func() error {
			_, err := pdb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("other"), Key: key("LEASE#x")})
			return err
		}},
		{"StartExecution of the granted state machine: moto authorizes Step Functions against *", true, false, func() error {
			_, err := psfn.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(sm)})
			return err
		}},
		{"Query, never granted: actions are checked", false, false, func() error {
			_, err := pdb.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("other"), KeyConditionExpression: aws.String("pk = :p"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": &ddbtypes.AttributeValueMemberS{Value: "a"}}})
			return err
		}},
	}
	for _, c := range cases {
		err := c.call()
		denied := isAccessDenied(err)
		if err != nil && !denied {
			t.Errorf("%s: unexpected error %v", c.name, err)
			continue
		}
		if !denied != c.moto {
			t.Errorf("%s: moto allowed = %v, want %v (AWS: %v); moto's IAM changed: update docs/emulators.md, IAM", c.name, !denied, c.moto, c.aws)
		}
	}
}

// isAccessDenied: moto answers a refused call with HTTP 403 and an XML AccessDenied body, also for
// DynamoDB and SQS's JSON protocol, whose SDK clients then fail to decode it: the status is what
// says "denied".
func isAccessDenied(err error) bool {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusForbidden {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && strings.Contains(ae.ErrorCode(), "AccessDenied")
}

// iam calls moto's IAM query API, signed with the test credentials (before authorization is on).
func iam(t *testing.T, endpoint string, v url.Values) string {
	t.Helper()
	v.Set("Version", "2010-05-08")
	body := v.Encode()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	sum := sha256.Sum256([]byte(body))
	creds, _ := loopbackConfig().Credentials.Retrieve(context.Background())
	if err := v4.NewSigner().SignHTTP(t.Context(), creds, req, hex.EncodeToString(sum[:]), "iam", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("IAM %s: %s %s", v.Get("Action"), resp.Status, out)
	}
	return string(out)
}

// resetAuth sets moto's INITIAL_NO_AUTH_ACTION_COUNT: n more requests pass unauthorized, then every
// request is authorized against the caller's IAM policies.
func resetAuth(t *testing.T, endpoint, n string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint+"/moto-api/reset-auth", strings.NewReader(n))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reset-auth: %s", resp.Status)
	}
}

func between(s, tag string) string {
	m := regexp.MustCompile("<" + tag + ">([^<]*)</" + tag + ">").FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	return m[1]
}
