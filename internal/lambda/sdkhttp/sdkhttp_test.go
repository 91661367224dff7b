package sdkhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/sdkhttp"
)

// stall is how long the test waits for a step that should come at once: it bounds a hang, it is
// never waited out when the code under test is right.
const stall = 5 * time.Second

// A server that answers before net/http's write goroutine is done with the request body (moto on a
// busy machine) gets each conditional write once: net/http finishes writing without an error, keeps
// the connection, and the SDK reads the answer instead of retrying a write that took effect.
//
// The interleaving is forced, not hoped for: the client's connection holds the write goroutine just
// after it has sent the whole request, until the SDK starts reading the response body (by then the
// SDK has closed its request body); the server sends that body only once net/http reports the
// request written.
func TestAnswerBeforeTheWriteEnds(t *testing.T) {
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "WAIT#pay"}, "sk": &types.AttributeValueMemberS{Value: "pay-w1"},
	}
	for _, tc := range []struct {
		name string
		call func(context.Context, *dynamodb.Client) error
	}{
		{"conditional put", func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String("t"), Item: key, ConditionExpression: aws.String("attribute_not_exists(pk)"),
			})
			return err
		}},
		{"conditional delete", func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName: aws.String("t"), Key: key, ConditionExpression: aws.String("receiptHandle = :h"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":h": &types.AttributeValueMemberS{Value: "AQEB-b"}},
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wrote, written := make(chan error, 8), make(chan struct{}, 8)
			srv := newLateBodyServer(t, written)
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.Proxy = nil
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &holdingConn{Conn: c, bodyRead: make(chan struct{})}, nil
			}
			db := dynamodb.New(dynamodb.Options{
				Region: "us-east-1", BaseEndpoint: aws.String("http://" + srv.addr),
				Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
				HTTPClient:       sdkhttp.Client(&http.Client{Transport: traced{tr, wrote, written}}),
				RetryMaxAttempts: 2,
			})

			if err := tc.call(context.Background(), db); err != nil {
				t.Errorf("call = %v, want the server's answer", err)
			}
			close(wrote)
			for err := range wrote {
				if err != nil {
					t.Errorf("net/http wrote the request with error %v, want none (it closes the connection under the answer)", err)
				}
			}
			if n := srv.requests.Load(); n != 1 {
				t.Errorf("server got %d requests, want 1 (a retried conditional write fails its own condition)", n)
			}
		})
	}
}

// traced reports each request's write result from net/http on wrote, and that it is written on
// written (for the server).
type traced struct {
	base    http.RoundTripper
	wrote   chan<- error
	written chan<- struct{}
}

func (tr traced) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			tr.wrote <- i.Err
			tr.written <- struct{}{}
		},
	})
	return tr.base.RoundTrip(r.WithContext(ctx))
}

// holdingConn holds the write that completes a request until a second read starts: net/http's read
// goroutine makes the first (the response headers), the SDK's read of the response body the second.
type holdingConn struct {
	net.Conn
	mu       sync.Mutex
	written  []byte
	reads    int
	bodyRead chan struct{}
}

func (c *holdingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.written = append(c.written, p[:n]...)
	complete := wholeRequest(c.written)
	c.mu.Unlock()
	if err == nil && complete {
		select {
		case <-c.bodyRead:
		case <-time.After(stall):
		}
	}
	return n, err
}

func (c *holdingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.reads++
	if c.reads == 2 {
		close(c.bodyRead)
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// wholeRequest says whether b holds a request's headers and all of its body.
func wholeRequest(b []byte) bool {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return false
	}
	_, err = io.ReadAll(req.Body)
	return err == nil
}

// lateBodyServer answers each request with its headers at once and its body ({}, an empty
// DynamoDB answer) once the client reports the request written, then closes the connection, as
// moto's server does.
type lateBodyServer struct {
	addr     string
	requests atomic.Int64
}

func newLateBodyServer(t *testing.T, written <-chan struct{}) *lateBodyServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &lateBodyServer{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if err := s.serve(c, written); err != nil && !errors.Is(err, net.ErrClosed) {
					t.Errorf("server: %v", err)
				}
			}()
		}
	}()
	return s
}

func (s *lateBodyServer) serve(c net.Conn, written <-chan struct{}) error {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	if _, err := io.ReadAll(req.Body); err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	s.requests.Add(1)
	const body = "{}"
	if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body)); err != nil {
		return fmt.Errorf("write response headers: %w", err)
	}
	select {
	case <-written:
	case <-time.After(stall):
	}
	_, _ = io.WriteString(c, body) // the client may have closed the connection already
	return nil
}
