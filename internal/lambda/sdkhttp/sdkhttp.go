// Package sdkhttp keeps the AWS SDK from sending one conditional write twice.
//
// smithy-go (v1.28.8) hands net/http a request body wrapped in a closer that it closes as soon as
// Client.Do returns, that is as soon as the response headers arrive. net/http's write goroutine may
// not be done with the body by then: after copying ContentLength bytes it reads on to check that
// nothing is left, and the closed wrapper answers that read with io.EOF through WriteTo, which
// io.Copy reports as an error. net/http then closes the connection under the response, the SDK's
// read of the response body fails with "use of closed network connection", and the SDK retries it
// as a connection error: a PutItem or DeleteItem that took effect is sent again and fails its own
// condition (ConditionalCheckFailed), so the caller reads a success as a lost race. It takes a
// server that answers before the writing goroutine gets the CPU back: moto does, under the race
// detector, for up to one or two requests in 3,000, more often on a busy machine.
//
// Client gives net/http a copy of the body in memory, which the SDK never closes; the SDK's own
// body is read once, before the request goes out.
package sdkhttp

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Client wraps base (the SDK's default client when nil) so that each request's body is read into
// memory before base sends it.
func Client(base aws.HTTPClient) aws.HTTPClient {
	if base == nil {
		base = awshttp.NewBuildableClient()
	}
	if c, ok := base.(client); ok {
		return c // wrapped already: one copy is enough
	}
	return client{base: base}
}

type client struct{ base aws.HTTPClient }

func (c client) Do(req *http.Request) (*http.Response, error) {
	// A body of unknown length is a stream (event streams, uploads) that must not be held in
	// memory; the SDK does not wrap those in its closing reader.
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 {
		return c.base.Do(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("read the request body to send: %w", err)
	}
	out := req.WithContext(req.Context())
	// io.NopCloser of a bytes.Reader is a body net/http knows to be in memory: it writes it with
	// the headers, and its check for more bytes reads the reader, never the SDK's closed one.
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return c.base.Do(out)
}
