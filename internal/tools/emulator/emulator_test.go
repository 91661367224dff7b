package emulator

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

const testRole = "arn:aws:iam::123456789012:role/test"

// loopbackConfig is an SDK configuration for emulators: static credentials, one region, no shared
// files or environment (AWS_CA_BUNDLE would break nothing here, but nothing else is wanted either).
func loopbackConfig() aws.Config {
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
}

func sfnClient(endpoint string) *sfn.Client {
	return sfn.NewFromConfig(loopbackConfig(), func(o *sfn.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

func sqsClient(endpoint string) *sqs.Client {
	return sqs.NewFromConfig(loopbackConfig(), func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

func startMoto(t *testing.T, opts MotoOptions) *Process {
	t.Helper()
	p, err := StartMoto(context.Background(), opts)
	if err != nil {
		t.Fatalf("StartMoto() = %v (moto %s must be importable by python3; it is preinstalled on these machines)", err, MotoVersion)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("Stop() = %v", err)
		}
	})
	return p
}

func startFauxqs(t *testing.T) *Process {
	t.Helper()
	p, err := StartFauxqs(context.Background(), FauxqsOptions{})
	if err != nil {
		t.Fatalf("StartFauxqs() = %v (run `make tools` at the repository root for fauxqs %s and node 22)", err, FauxqsVersion)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("Stop() = %v", err)
		}
	})
	return p
}

func createStateMachine(t *testing.T, c *sfn.Client, name string, definition any) string {
	t.Helper()
	def, err := json.Marshal(definition)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.CreateStateMachine(context.Background(), &sfn.CreateStateMachineInput{
		Name: aws.String(name), Definition: aws.String(string(def)), RoleArn: aws.String(testRole),
	})
	if err != nil {
		t.Fatalf("CreateStateMachine(%s) = %v", name, err)
	}
	return aws.ToString(out.StateMachineArn)
}

func waitExecution(t *testing.T, c *sfn.Client, arn string, timeout time.Duration) *sfn.DescribeExecutionOutput {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := c.DescribeExecution(context.Background(), &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		if err != nil {
			t.Fatalf("DescribeExecution(%s) = %v", arn, err)
		}
		if out.Status != sfntypes.ExecutionStatusRunning {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s still RUNNING after %v", arn, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMoto(t *testing.T) {
	t.Parallel()
	moto := startMoto(t, MotoOptions{})
	c := sfnClient(moto.Endpoint())
	ctx := context.Background()

	t.Run("second StartExecution succeeds (moto issue 10077 worked around)", func(t *testing.T) {
		arn := createStateMachine(t, c, "twice", map[string]any{
			"StartAt": "P",
			"States":  map[string]any{"P": map[string]any{"Type": "Pass", "End": true}},
		})
		for i := range 3 {
			_, err := c.StartExecution(ctx, &sfn.StartExecutionInput{
				StateMachineArn: aws.String(arn), Name: aws.String(fmt.Sprintf("run-%d", i)), Input: aws.String(`{}`),
			})
			if err != nil {
				t.Fatalf("StartExecution #%d = %v, want success", i+1, err)
			}
		}
	})

	t.Run("Wait and Pass run to SUCCEEDED", func(t *testing.T) {
		arn := createStateMachine(t, c, "wait-pass", map[string]any{
			"StartAt": "Wait",
			"States": map[string]any{
				"Wait": map[string]any{"Type": "Wait", "Seconds": 1, "Next": "Pass"},
				"Pass": map[string]any{"Type": "Pass", "Parameters": map[string]any{"got.$": "$.x"}, "End": true},
			},
		})
		var arns []string
		for i := range 2 {
			out, err := c.StartExecution(ctx, &sfn.StartExecutionInput{
				StateMachineArn: aws.String(arn), Name: aws.String(fmt.Sprintf("wp-%d", i)),
				Input: aws.String(fmt.Sprintf(`{"x":%d}`, i)),
			})
			if err != nil {
				t.Fatalf("StartExecution = %v", err)
			}
			arns = append(arns, aws.ToString(out.ExecutionArn))
		}
		for i, a := range arns {
			d := waitExecution(t, c, a, 15*time.Second)
			if d.Status != sfntypes.ExecutionStatusSucceeded {
				t.Fatalf("execution %s status = %s, want SUCCEEDED (error %s, cause %s)", a, d.Status,
					aws.ToString(d.Error), aws.ToString(d.Cause))
			}
			if got, want := aws.ToString(d.Output), fmt.Sprintf(`{"got": %d}`, i); compactJSON(t, got) != compactJSON(t, want) {
				t.Errorf("execution %s output = %s, want %s", a, got, want)
			}
			if ran := d.StopDate.Sub(*d.StartDate); ran < time.Second {
				t.Errorf("execution %s ran %v, want at least the 1 s Wait", a, ran)
			}
		}
	})
}

// moto serves requests on threads, and a cancelled transaction restores the whole table from a copy
// taken when it began, erasing what other threads wrote meanwhile; the launcher serialises DynamoDB
// requests so racing transactions behave as on DynamoDB: one wins and its writes stay.
func TestMotoConditionalWritesAreAtomic(t *testing.T) {
	t.Parallel()
	moto := startMoto(t, MotoOptions{})
	c := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(moto.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	ctx := context.Background()
	if _, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String("race"), BillingMode: ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	// A cancelled transaction copies the table when it begins: a fuller table widens moto's window.
	for i := range 300 {
		if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("race"), Item: map[string]ddbtypes.AttributeValue{
			"pk": &ddbtypes.AttributeValueMemberS{Value: "filler-" + strconv.Itoa(i)},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 60 {
		var won atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := strconv.Itoa(round)
				_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
					{Put: &ddbtypes.Put{
						TableName:           aws.String("race"),
						Item:                map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: key}},
						ConditionExpression: aws.String("attribute_not_exists(pk)"),
					}},
					{Update: &ddbtypes.Update{
						TableName:                 aws.String("race"),
						Key:                       map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "count-" + key}},
						UpdateExpression:          aws.String("ADD n :one"),
						ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}},
					}},
				}})
				if err == nil {
					won.Add(1)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("round %d: %d of 8 racing transactions (Put attribute_not_exists + ADD) succeeded, want exactly 1", round, won.Load())
		}
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String("race"), ConsistentRead: aws.Bool(true),
			Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "count-" + strconv.Itoa(round)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := out.Item["n"].(*ddbtypes.AttributeValueMemberN); n == nil || n.Value != "1" {
			t.Fatalf("round %d: the winner's counter is %v after the losers were cancelled, want 1", round, out.Item["n"])
		}
	}
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON %q: %v", s, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestMotoInterpreterEndpoint(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    int
		wantErr bool
	}{
		{name: "localhost", give: "http://localhost:4000", want: 4000},
		{name: "loopback IP", give: "http://127.0.0.1:4001/", want: 4001},
		{name: "no port", give: "http://localhost", wantErr: true},
		{name: "other host", give: "http://10.0.0.1:4000", wantErr: true},
		{name: "https", give: "https://localhost:4000", wantErr: true},
		{name: "path", give: "http://localhost:4000/x", wantErr: true},
		{name: "bad port", give: "http://localhost:99999", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := interpreterPortOf(tt.give)
			if (err != nil) != tt.wantErr {
				t.Fatalf("interpreterPortOf(%q) error = %v, wantErr %v", tt.give, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("interpreterPortOf(%q) = %d, want %d", tt.give, got, tt.want)
			}
		})
	}
}

func TestFauxqsFIFOGroupBlocking(t *testing.T) {
	t.Parallel()
	fq := startFauxqs(t)
	c := sqsClient(fq.Endpoint())
	ctx := context.Background()

	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String("lanes.fifo"),
		Attributes: map[string]string{
			"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30",
		},
	})
	if err != nil {
		t.Fatalf("CreateQueue = %v", err)
	}
	url := q.QueueUrl
	for _, m := range []struct{ group, body string }{{"a", "a1"}, {"a", "a2"}, {"a", "a3"}, {"b", "b1"}} {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl: url, MessageBody: aws.String(m.body), MessageGroupId: aws.String(m.group),
		}); err != nil {
			t.Fatalf("SendMessage(%s) = %v", m.body, err)
		}
	}
	receive := func() []sqstypes.Message {
		t.Helper()
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatalf("ReceiveMessage = %v", err)
		}
		return out.Messages
	}
	bodies := func(ms []sqstypes.Message) string {
		var s []string
		for _, m := range ms {
			s = append(s, aws.ToString(m.Body))
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}

	first := receive()
	if got, want := bodies(first), "a1,b1"; got != want {
		t.Fatalf("first receive = %s, want %s (one message per group)", got, want)
	}
	if got := bodies(receive()); got != "" {
		t.Fatalf("receive while a1 and b1 are in flight = %s, want nothing (groups blocked)", got)
	}
	for _, m := range first {
		if aws.ToString(m.Body) != "a1" {
			continue
		}
		if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatalf("DeleteMessage(a1) = %v", err)
		}
	}
	if got, want := bodies(receive()), "a2"; got != want {
		t.Fatalf("receive after deleting a1 = %s, want %s", got, want)
	}
}

func TestStopLeavesNoProcess(t *testing.T) {
	t.Parallel()
	starts := []struct {
		name  string
		start func(t *testing.T) *Process
	}{
		{name: "moto", start: func(t *testing.T) *Process { return startMoto(t, MotoOptions{}) }},
		{name: "fauxqs", start: startFauxqs},
	}
	for _, s := range starts {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			p := s.start(t)
			pid := p.PID()
			if !alive(pid) {
				t.Fatalf("%s pid %d not running after start", s.name, pid)
			}
			if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
				t.Errorf("temporary directory %s still there once started (stat: %v); a killed parent would leave it", p.dir, err)
			}
			if err := p.Stop(); err != nil {
				t.Fatalf("Stop() = %v", err)
			}
			if alive(pid) {
				t.Errorf("%s pid %d still running after Stop", s.name, pid)
			}
			if left := groupMembers(pid); len(left) > 0 {
				t.Errorf("processes left in %s's group %d after Stop: %v", s.name, pid, left)
			}
			if err := p.Stop(); err != nil {
				t.Errorf("second Stop() = %v, want nil", err)
			}
		})
	}
}

// TestParentDeathKillsEmulators kills a process that started the emulators without stopping them, as a
// killed test binary would be, and checks that the emulators die with it.
func TestParentDeathKillsEmulators(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartsEmulators$", "-test.v")
	cmd.Env = append(os.Environ(), "SFNLIMIT_EMULATOR_HELPER=1", "TMPDIR="+t.TempDir())
	cmd.Dir, _ = os.Getwd()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	pids := map[string]int{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(45 * time.Second)
	for len(pids) < 2 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("helper ended before reporting its emulators (got %v)", pids)
			}
			if name, pid, found := strings.Cut(strings.TrimPrefix(line, "EMULATOR "), "="); found && strings.HasPrefix(line, "EMULATOR ") {
				n, _ := strconv.Atoi(pid)
				pids[name] = n
			}
		case <-timeout:
			t.Fatalf("helper did not report its emulators in time (got %v)", pids)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	for name, pid := range pids {
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) {
			if time.Now().After(deadline) {
				_ = syscallKillGroup(pid)
				t.Fatalf("%s (pid %d) still running 5 s after its parent was killed", name, pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestHelperStartsEmulators is run by TestParentDeathKillsEmulators in a child test binary.
func TestHelperStartsEmulators(t *testing.T) {
	if os.Getenv("SFNLIMIT_EMULATOR_HELPER") != "1" {
		t.Skip("helper for TestParentDeathKillsEmulators")
	}
	moto, err := StartMoto(context.Background(), MotoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fq, err := StartFauxqs(context.Background(), FauxqsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("EMULATOR moto=%d\nEMULATOR fauxqs=%d\n", moto.PID(), fq.PID())
	time.Sleep(time.Minute) // killed by the parent test before this ends
}

// alive reports whether pid is a process that is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, state, _ := procStat(string(b))
	return state != "Z" && state != "X"
}

// groupMembers lists the live processes whose process group is pgid.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		pgrp, state, ok := procStat(string(b))
		if ok && pgrp == pgid && state != "Z" && state != "X" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat parses the process group and state out of /proc/PID/stat ("pid (comm) state ppid pgrp ...").
func procStat(stat string) (pgrp int, state string, ok bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 3 {
		return 0, "", false
	}
	pgrp, err := strconv.Atoi(f[2])
	return pgrp, f[0], err == nil
}

func TestTailBuffer(t *testing.T) {
	b := newTailBuffer(14)
	fmt.Fprint(b, "one\ntwo\nthree\nfour\nfive\n")
	if got, want := b.Tail(2), "four\nfive"; got != want {
		t.Errorf("Tail(2) = %q, want %q", got, want)
	}
	if got, want := b.Tail(0), "ree\nfour\nfive"; got != want {
		t.Errorf("Tail(0) = %q, want %q (last 14 bytes)", got, want)
	}
}

// syscallKillGroup kills a process group this test started, when a check has failed.
func syscallKillGroup(pgid int) error { return syscall.Kill(-pgid, syscall.SIGKILL) }
