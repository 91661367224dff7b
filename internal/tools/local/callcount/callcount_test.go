package callcount_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/callcount"
)

// server answers the JSON protocol of SQS, Step Functions and DynamoDB with minimal bodies, fails
// operations named in fail, and counts the requests it saw by X-Amz-Target.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int64
	fail map[string]bool
}

func newServer(t *testing.T, fail ...string) *server {
	t.Helper()
	s := &server{seen: map[string]int64{}, fail: map[string]bool{}}
	for _, f := range fail {
		s.fail[f] = true
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.Header.Get("X-Amz-Target") // e.g. AmazonSQS.DeleteMessage
		_, op, _ := strings.Cut(target, ".")
		s.mu.Lock()
		s.seen[target]++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if s.fail[op] {
			w.Header().Set("x-amzn-query-error", "AWS.SimpleQueueService.NonExistentQueue;Sender")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"no such queue"}`))
			return
		}
		switch op {
		case "GetQueueUrl":
			_, _ = w.Write([]byte(`{"QueueUrl":"http://127.0.0.1/123456789012/q"}`))
		case "ListExecutions":
			_, _ = w.Write([]byte(`{"executions":[]}`))
		default:
			_, _ = w.Write([]byte(`{}`))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for k, v := range s.seen {
		out[k] = v
	}
	return out
}

type clients struct {
	sqs *sqs.Client
	sfn *sfn.Client
	ddb *dynamodb.Client
}

// newClients builds real SDK clients for the server with c installed as aws.Config.APIOptions.
func newClients(s *server, c *callcount.Counter) clients {
	cfg := aws.Config{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(s.URL),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: 1,
	}
	cfg.APIOptions = append(cfg.APIOptions, c.Option)
	return clients{sqs: sqs.NewFromConfig(cfg), sfn: sfn.NewFromConfig(cfg), ddb: dynamodb.NewFromConfig(cfg)}
}

// call is one API call on the clients.
type call func(context.Context, clients) error

var (
	deleteMessage = func(ctx context.Context, c clients) error {
		_, err := c.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String("http://q"), ReceiptHandle: aws.String("rh")})
		return err
	}
	changeVisibility = func(ctx context.Context, c clients) error {
		_, err := c.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String("http://q"), ReceiptHandle: aws.String("rh")})
		return err
	}
	getQueueURL = func(ctx context.Context, c clients) error {
		_, err := c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("q")})
		return err
	}
	listExecutions = func(ctx context.Context, c clients) error {
		_, err := c.sfn.ListExecutions(ctx, &sfn.ListExecutionsInput{StateMachineArn: aws.String("arn:aws:states:us-east-1:123456789012:stateMachine:s")})
		return err
	}
	deleteItem = func(ctx context.Context, c clients) error {
		_, err := c.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String("t"), Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "LEASE#demo"}},
		})
		return err
	}
	transact = func(ctx context.Context, c clients) error {
		put := func(k string) ddbtypes.TransactWriteItem {
			return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: aws.String("t"), Item: map[string]ddbtypes.AttributeValue{
				"pk": &ddbtypes.AttributeValueMemberS{Value: k},
			}}}
		}
		_, err := c.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put("a"), put("b")}})
		return err
	}
)

func TestCounterCountsCalls(t *testing.T) {
	tests := []struct {
		name      string
		give      map[string]int // call name -> times, all made concurrently
		wantRows  []callcount.Row
		wantSeen  map[string]int64
		giveFails []string // operations the server fails
	}{
		{
			name:     "nothing called",
			give:     nil,
			wantRows: []callcount.Row{},
			wantSeen: map[string]int64{},
		},
		{
			name: "one service",
			give: map[string]int{"DeleteMessage": 3},
			wantRows: []callcount.Row{
				{Key: callcount.Key{Service: "SQS", Operation: "DeleteMessage"}, Calls: 3},
			},
			wantSeen: map[string]int64{"AmazonSQS.DeleteMessage": 3},
		},
		{
			name: "several services and operations, sorted",
			give: map[string]int{"ListExecutions": 2, "GetQueueUrl": 1, "DeleteMessage": 25, "ChangeMessageVisibility": 7, "DeleteItem": 4},
			wantRows: []callcount.Row{
				{Key: callcount.Key{Service: "DynamoDB", Operation: "DeleteItem"}, Calls: 4},
				{Key: callcount.Key{Service: "SFN", Operation: "ListExecutions"}, Calls: 2},
				{Key: callcount.Key{Service: "SQS", Operation: "ChangeMessageVisibility"}, Calls: 7},
				{Key: callcount.Key{Service: "SQS", Operation: "DeleteMessage"}, Calls: 25},
				{Key: callcount.Key{Service: "SQS", Operation: "GetQueueUrl"}, Calls: 1},
			},
			wantSeen: map[string]int64{
				"DynamoDB_20120810.DeleteItem": 4, "AWSStepFunctions.ListExecutions": 2, "AmazonSQS.ChangeMessageVisibility": 7,
				"AmazonSQS.DeleteMessage": 25, "AmazonSQS.GetQueueUrl": 1,
			},
		},
		{
			name: "transactions count their items",
			give: map[string]int{"TransactWriteItems": 3, "DeleteItem": 1},
			wantRows: []callcount.Row{
				{Key: callcount.Key{Service: "DynamoDB", Operation: "DeleteItem"}, Calls: 1},
				{Key: callcount.Key{Service: "DynamoDB", Operation: "TransactWriteItems"}, Calls: 3, Items: 6},
			},
			wantSeen: map[string]int64{"DynamoDB_20120810.DeleteItem": 1, "DynamoDB_20120810.TransactWriteItems": 3},
		},
		{
			name:      "failed calls count too",
			give:      map[string]int{"GetQueueUrl": 2, "DeleteMessage": 1},
			giveFails: []string{"GetQueueUrl"},
			wantRows: []callcount.Row{
				{Key: callcount.Key{Service: "SQS", Operation: "DeleteMessage"}, Calls: 1},
				{Key: callcount.Key{Service: "SQS", Operation: "GetQueueUrl"}, Calls: 2},
			},
			wantSeen: map[string]int64{"AmazonSQS.DeleteMessage": 1, "AmazonSQS.GetQueueUrl": 2},
		},
	}
	calls := map[string]call{
		"DeleteMessage": deleteMessage, "ChangeMessageVisibility": changeVisibility, "GetQueueUrl": getQueueURL,
		"ListExecutions": listExecutions, "DeleteItem": deleteItem, "TransactWriteItems": transact,
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.giveFails...)
			c := callcount.New()
			cl := newClients(srv, c)
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			for name, n := range tt.give {
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						err := calls[name](context.Background(), cl)
						if (err != nil) != slices.Contains(tt.giveFails, name) {
							errs <- err
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("unexpected call result: %v", err)
			}
			if got := c.Snapshot(); !slices.Equal(got, tt.wantRows) {
				t.Errorf("Snapshot() = %v, want %v", got, tt.wantRows)
			}
			// The counts are the requests the server saw: one per call, no more, no fewer.
			if got := srv.requests(); !mapsEqual(got, tt.wantSeen) {
				t.Errorf("requests at the server = %v, want %v", got, tt.wantSeen)
			}
		})
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestCallsRejectedBeforeSendingAreNotCounted(t *testing.T) {
	srv := newServer(t)
	c := callcount.New()
	cl := newClients(srv, c)
	// A required parameter is missing: the SDK refuses the call and sends nothing.
	if _, err := cl.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String("http://q")}); err == nil {
		t.Fatal("DeleteMessage without a receipt handle error = nil, want a validation error")
	}
	if got := c.Snapshot(); len(got) != 0 {
		t.Errorf("Snapshot() after a call refused by the SDK = %v, want none (nothing was sent)", got)
	}
	if got := srv.requests(); len(got) != 0 {
		t.Errorf("requests at the server = %v, want none", got)
	}
}

func TestResetClears(t *testing.T) {
	srv := newServer(t)
	c := callcount.New()
	cl := newClients(srv, c)
	ctx := context.Background()
	for _, f := range []call{deleteMessage, deleteMessage, listExecutions} {
		if err := f(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(c.Snapshot()); got != 2 {
		t.Fatalf("Snapshot() rows before Reset = %d, want 2", got)
	}
	c.Reset()
	if got := c.Snapshot(); len(got) != 0 {
		t.Errorf("Snapshot() after Reset = %v, want empty", got)
	}
	if err := deleteMessage(ctx, cl); err != nil {
		t.Fatal(err)
	}
	want := []callcount.Row{{Key: callcount.Key{Service: "SQS", Operation: "DeleteMessage"}, Calls: 1}}
	if got := c.Snapshot(); !slices.Equal(got, want) {
		t.Errorf("Snapshot() after Reset and one call = %v, want %v (counting from zero)", got, want)
	}
}

// TestCountersAreSeparate: the local stack gives each function its own counter; one function's
// calls never show in another's.
func TestCountersAreSeparate(t *testing.T) {
	srv := newServer(t)
	router, starter := callcount.New(), callcount.New()
	rc, sc := newClients(srv, router), newClients(srv, starter)
	ctx := context.Background()
	for _, f := range []call{deleteMessage, deleteMessage} {
		if err := f(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	if err := listExecutions(ctx, sc); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give *callcount.Counter
		want []callcount.Row
	}{
		{name: "router", give: router, want: []callcount.Row{{Key: callcount.Key{Service: "SQS", Operation: "DeleteMessage"}, Calls: 2}}},
		{name: "starter", give: starter, want: []callcount.Row{{Key: callcount.Key{Service: "SFN", Operation: "ListExecutions"}, Calls: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.Snapshot(); !slices.Equal(got, tt.want) {
				t.Errorf("%s Snapshot() = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
	// A snapshot is a copy: changing it changes no count.
	snap := router.Snapshot()
	snap[0].Calls = 99
	if got := router.Snapshot()[0].Calls; got != 2 {
		t.Errorf("count after editing a snapshot = %d, want 2", got)
	}
}
