package ops_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// BenchmarkSubmit sends jobs, parsed and validated from JSON Lines as `sfnlimit submit FILE` does,
// to the general queue of a fresh local stack whose runtime is stopped, so the figure is the tool
// and the emulator's SQS, not the router: 100,000 jobs on fauxqs, and SFNLIMIT_BENCH_MOTO_JOBS
// (default 2,000) on moto, whose SendMessageBatch slows down as the queue grows (about 70 jobs/s on
// an empty queue, 11 jobs/s at 6,000 messages):
//
//	go test ./internal/tools/ops -run '^$' -bench Submit/fauxqs -benchtime 1x
//	go test ./internal/tools/ops -run '^$' -bench Submit/moto -benchtime 1x
func BenchmarkSubmit(b *testing.B) {
	motoJobs := 2000
	if v, err := strconv.Atoi(os.Getenv("SFNLIMIT_BENCH_MOTO_JOBS")); err == nil && v > 0 {
		motoJobs = v
	}
	for _, bench := range []struct {
		backend  string
		jobs     int
		parallel []int
	}{{"fauxqs", 100000, []int{4, 16, 32}}, {"moto", motoJobs, []int{16}}} {
		backend, n := bench.backend, bench.jobs
		var lines bytes.Buffer
		for i := range n {
			fmt.Fprintf(&lines, `{"type":"demo","id":"bulk-%06d","input":{"seconds":1}}`+"\n", i)
		}
		for _, par := range bench.parallel {
			b.Run(fmt.Sprintf("%s/jobs%d/parallel%d", backend, n, par), func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					ctx := context.Background()
					s, err := stack.Start(ctx, stack.Options{Fauxqs: backend == "fauxqs"})
					if err != nil {
						b.Fatal(err)
					}
					client := sqs.NewFromConfig(s.AWSConfig(nil))
					b.StartTimer()
					p, err := ops.ParseJobs(ctx, bytes.NewReader(lines.Bytes()), nil)
					if err != nil || len(p.Jobs) != n {
						b.Fatal(err, len(p.Jobs))
					}
					res := ops.Submitter{SQS: client, QueueURL: s.Info().Output("GeneralQueueUrl"), Parallel: par}.Send(ctx, p.Jobs, nil)
					b.StopTimer()
					s.Close()
					if len(res.Failed) > 0 {
						b.Fatalf("%d failed: %+v", len(res.Failed), res.Failed[0])
					}
					b.ReportMetric(float64(res.Sent)/res.Elapsed.Seconds(), "jobs/s")
				}
			})
		}
	}
}
