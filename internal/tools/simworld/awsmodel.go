package simworld

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AWSModel is AWS's own latencies and quotas (docs/scale.md has each figure with its source).
// Without it (Config.AWS nil) a call takes one 2-40 ms draw whatever it is, and nothing is
// throttled but by the seeded faults: the fixed seed set and every pinned seed draw as they do.
//
// Quotas are divided by Scale, so that a benchmark scaled down by that factor (limits and jobs
// divided by it) meets them at the same ratios: Scale 10 gives StartExecution a bucket of 130 and
// a refill of 30 a second. Durations are not scaled.
type AWSModel struct {
	// Scale divides every quota below (1: AWS's own figures).
	Scale float64
	// PartitionScale, when set, divides the per-partition-key quotas instead of Scale, and is what a
	// Query's page is scaled up by (queryReadUnits). A shape that divides each type's limit and
	// keys by Scale divides what each partition key holds and serves by it too; one that divides
	// only how many types there are, each as on AWS, keeps its partitions at AWS's size (1).
	PartitionScale float64
	// Enforce turns the quotas' buckets on: a Step Functions call finding its bucket empty answers
	// ThrottlingException; a DynamoDB call finding its partition key's bucket short is retried as
	// the SDK retries a throttle (partitionRetry), and answers ProvisionedThroughputExceededException
	// when its last attempt is refused too. Without it they are only counted.
	Enforce bool
}

// partitionScale is what the per-partition-key quotas are divided by, and Query pages scaled up by.
func (m AWSModel) partitionScale() float64 {
	if m.PartitionScale > 0 {
		return m.PartitionScale
	}
	return m.Scale
}

// The SDK's standard retryer (aws/retry: DefaultMaxAttempts, and ExponentialJitterBackoff's delay
// before retry k, uniform in [0, 2^k) seconds) as the handlers' clients use it: app.Lambda loads
// the default config, which sets no retryer of its own.
const sdkMaxAttempts = 3

// DynamoDB's per-partition throughput (docs/scale.md, "Quotas"): each partition key's reads and
// writes are throttled independently, and burst capacity does not lift them, so a key's bucket
// holds one second of its throughput.
const (
	partitionWriteUnits = 1000.0 // write units a second per partition key
	partitionReadUnits  = 3000.0 // read units a second per partition key
)

// units is what one DynamoDB call consumes in the AWS model: n units on each of its partition
// keys, of read or of write capacity.
type units struct {
	read bool
	n    float64
	pks  []string
}

// partitionKeys are the partition keys of items keyed "pk|sk".
func partitionKeys(keys ...string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		pk, _, _ := strings.Cut(k, "|")
		out = append(out, pk)
	}
	return out
}

// opLatency is one operation's round trip from Lambda: log-normal through its p50 and p99.
type opLatency struct{ p50, p99 float64 } // milliseconds

// awsLatencies are the per-operation figures of docs/scale.md ("Latencies").
var awsLatencies = map[string]opLatency{
	"ddb.PutItem":                      {7.6, 16},
	"ddb.DeleteItem":                   {7.6, 16},
	"ddb.TransactWriteItems":           {25, 93},
	"ddb.GetItem":                      {5, 12},
	"ddb.Query":                        {6, 15},
	"ddb.Scan":                         {10, 40},
	"sqs.SendMessage":                  {12, 40},
	"sqs.SendMessageBatch":             {15, 50},
	"sqs.DeleteMessage":                {10, 35},
	"sqs.DeleteMessageBatch":           {12, 40},
	"sqs.ChangeMessageVisibility":      {10, 35},
	"sqs.ChangeMessageVisibilityBatch": {12, 40},
	"sqs.GetQueueAttributes":           {8, 30},
	"sqs.ReceiveMessage":               {15, 50},
	"sfn.StartExecution":               {30, 100},
	"sfn.DescribeExecution":            {20, 60},
	"sfn.ListExecutions":               {40, 150},
	"events.PutEvents":                 {20, 80},
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263

// awsLatency draws op's round trip.
func (w *World) awsLatency(op string) time.Duration {
	l, ok := awsLatencies[op]
	if !ok {
		l = opLatency{10, 40}
	}
	mu, sigma := math.Log(l.p50), (math.Log(l.p99)-math.Log(l.p50))/z99
	ms := math.Exp(mu + sigma*w.rng.NormFloat64())
	return time.Duration(min(ms, 2000) * float64(time.Millisecond))
}

// bucket is a token bucket, as Step Functions throttles its API actions.
type bucket struct {
	burst, refill float64
	tokens        float64
	at            time.Time
	// Lowest is the fewest tokens left after a take; Refused counts the calls it throttled.
	Lowest  float64
	Taken   int
	Refused int
	// LastRefused is when it last refused a call.
	LastRefused time.Time
}

func newBucket(burst, refill float64) *bucket {
	return &bucket{burst: burst, refill: refill, tokens: burst, Lowest: burst}
}

// take takes a token at now; false when there is none.
func (b *bucket) take(now time.Time) bool {
	if !b.has(now, 1) {
		b.Refused++
		b.LastRefused = now
		return false
	}
	b.spend(1)
	return true
}

// has refills b to now and says whether it can take n: it holds n, or, for a request larger than
// the burst, a full burst (the request then leaves b in debt, which the refill repays).
func (b *bucket) has(now time.Time, n float64) bool {
	if b.at.IsZero() || now.After(b.at) {
		if !b.at.IsZero() {
			b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.refill)
		}
		b.at = now
	}
	return b.tokens >= min(n, b.burst)
}

// spend takes n tokens that has allowed.
func (b *bucket) spend(n float64) {
	b.tokens -= n
	b.Taken++
	b.Lowest = min(b.Lowest, b.tokens)
}

// meter counts per whole virtual second, per key, and keeps each key's busiest second.
type meter struct {
	sec   int64
	cur   map[string]float64
	peak  map[string]float64
	total map[string]float64
}

func newMeter() *meter {
	return &meter{sec: -1, cur: map[string]float64{}, peak: map[string]float64{}, total: map[string]float64{}}
}

func (m *meter) add(now time.Time, key string, n float64) {
	s := now.Unix()
	if s != m.sec {
		m.fold()
		m.sec = s
	}
	m.cur[key] += n
	m.total[key] += n
}

func (m *meter) fold() {
	for k, v := range m.cur {
		m.peak[k] = max(m.peak[k], v)
	}
	clear(m.cur)
}

// top is the key with the busiest second, and that second's count.
func (m *meter) top(prefix string) (string, float64) {
	m.fold()
	best, n := "", 0.0
	for _, k := range slices.Sorted(maps.Keys(m.peak)) {
		if strings.HasPrefix(k, prefix) && m.peak[k] > n {
			best, n = k, m.peak[k]
		}
	}
	return best, n
}

// hottest is the key with the most in all, and its busiest second.
func (m *meter) hottest() (string, float64) {
	m.fold()
	best := ""
	for _, k := range slices.Sorted(maps.Keys(m.total)) {
		if best == "" || m.total[k] > m.total[best] {
			best = k
		}
	}
	return best, m.peak[best]
}

// awsState is what the AWS model counts during a run.
type awsState struct {
	model                 AWSModel
	start, describe, list *bucket
	calls                 *meter // API calls per second, per "queue action"
	msgs                  *meter // messages per second per "queue action"
	wcu                   *meter // write units per second per partition key
	rcu                   *meter // read units per second per partition key
	WCU                   float64
	// span is the time from the first start to the last (the benchmark sets it), over which
	// Quotas gives the hottest key's mean write units a second.
	span                     time.Duration
	PeakInFlight             int // lanes queue messages in flight at once
	PeakStarters, PeakGroups int // concurrent starter invocations; message groups with a message in flight
	// reads and writes are each partition key's buckets (Enforce); refused counts, per "read pk"
	// or "write pk", the calls answered with a throttle after the SDK's last attempt, and
	// retried, per "read" or "write", the attempts refused that the SDK retried.
	reads, writes    map[string]*bucket
	refused, retried map[string]int
}

func newAWSState(m AWSModel) *awsState {
	s := max(m.Scale, 1)
	m.Scale = s
	return &awsState{
		model:    m,
		start:    newBucket(1300/s, 300/s),
		describe: newBucket(300/s, 15/s),
		list:     newBucket(200/s, 5/s),
		calls:    newMeter(), msgs: newMeter(), wcu: newMeter(), rcu: newMeter(),
		reads: map[string]*bucket{}, writes: map[string]*bucket{}, refused: map[string]int{}, retried: map[string]int{},
	}
}

// partitionTake takes u's units from each of its partition keys' buckets at now, all or none;
// it answers the first key short of them ("" when taken).
func (a *awsState) partitionTake(now time.Time, u *units) string {
	buckets, per, kind := a.writes, partitionWriteUnits, "write "
	if u.read {
		buckets, per, kind = a.reads, partitionReadUnits, "read "
	}
	bs := make([]*bucket, len(u.pks))
	for i, pk := range u.pks {
		b := buckets[pk]
		if b == nil {
			b = newBucket(per/a.model.partitionScale(), per/a.model.partitionScale())
			buckets[pk] = b
		}
		if !b.has(now, u.n) {
			return kind + pk
		}
		bs[i] = b
	}
	for _, b := range bs {
		b.spend(u.n)
	}
	return ""
}

// partitionRetry applies the partition buckets to a DynamoDB call as it takes effect: a call they
// refuse is sent again after the SDK's backoff and a new round trip (true: the call is not let
// through yet), and after the SDK's last attempt answers a throttle, as the throttle fault does.
func (w *World) partitionRetry(c *call) bool {
	a, u := w.aws, c.units
	if u == nil || !a.model.Enforce || c.fault != faultNone {
		return false
	}
	short := a.partitionTake(w.now(), u)
	if short == "" {
		return false
	}
	c.attempts++
	if c.attempts < sdkMaxAttempts {
		kind, _, _ := strings.Cut(short, " ")
		a.retried[kind]++
		d := time.Duration(w.rng.Float64()*float64(time.Second<<c.attempts)) + w.awsLatency(c.op)
		w.trace(c.key, "aws model: %s refused on %s, attempt %d; the SDK retries in %s", c.op, short, c.attempts, d)
		w.sched.afterCall(d, func() { w.let(c) })
		return true
	}
	a.refused[short]++
	c.fault = faultThrottle
	w.Stats.Faults++
	w.trace(c.key, "aws model: %s refused on %s after %d attempts: throttled", c.op, short, c.attempts)
	return false
}

// throttled takes a token for a Step Functions call; true when the model refuses it.
func (a *awsState) throttled(op string, now time.Time) bool {
	var b *bucket
	switch op {
	case "sfn.StartExecution":
		b = a.start
	case "sfn.DescribeExecution":
		b = a.describe
	case "sfn.ListExecutions":
		b = a.list
	default:
		return false
	}
	return !b.take(now) && a.model.Enforce
}

// sqsCall counts one SQS call on queue q carrying n messages.
func (a *awsState) sqsCall(now time.Time, q, action string, n int) {
	a.calls.add(now, q+" "+action, 1)
	if n > 0 {
		a.msgs.add(now, q+" "+action, float64(n))
	}
}

// write counts units write units on partition key pk (an item of up to 1 KB is one unit; a
// transaction's items two each).
func (a *awsState) write(now time.Time, pk string, units float64) {
	a.WCU += units
	a.wcu.add(now, pk, units)
}

// Quota is one quota's use in a run: its peak against its bound (both at the run's scale).
type Quota struct {
	Name     string
	Peak     float64
	Bound    float64
	Enforced bool
	// Refused counts the calls an enforced quota refused.
	Refused int
	Note    string
}

// Quotas reports each modelled quota's peak use in the run (nil without the AWS model).
func (w *World) Quotas() []Quota {
	a := w.aws
	if a == nil {
		return nil
	}
	s := a.model.Scale
	bucketUse := func(b *bucket) float64 { return b.burst - b.Lowest }
	out := []Quota{
		{Name: "sfn StartExecution bucket (tokens used of the burst)", Peak: bucketUse(a.start), Bound: a.start.burst, Enforced: a.model.Enforce, Refused: a.start.Refused},
		{Name: "sfn DescribeExecution bucket", Peak: bucketUse(a.describe), Bound: a.describe.burst, Enforced: a.model.Enforce, Refused: a.describe.Refused},
		{Name: "sfn ListExecutions bucket", Peak: bucketUse(a.list), Bound: a.list.burst, Enforced: a.model.Enforce, Refused: a.list.Refused},
	}
	k, n := a.calls.top("lanes.fifo ")
	out = append(out, Quota{Name: "sqs FIFO calls/s per action, high-throughput mode", Peak: n, Bound: 70000 / s,
		Note: fmt.Sprintf("%s; %.0f%% of the 300/s without high-throughput mode", k, 100*n/(300/s))})
	out = append(out, Quota{Name: "sqs FIFO in flight", Peak: float64(a.PeakInFlight), Bound: 120000 / s})
	for _, p := range []struct {
		kind string
		m    *meter
		per  float64
	}{{"write", a.wcu, partitionWriteUnits}, {"read", a.rcu, partitionReadUnits}} {
		k, n := p.m.hottest()
		mean := 0.0
		if a.span > 0 {
			mean = p.m.total[k] / a.span.Seconds()
		}
		refused, worst := 0, ""
		for _, key := range slices.Sorted(maps.Keys(a.refused)) {
			if strings.HasPrefix(key, p.kind+" ") {
				refused += a.refused[key]
				if worst == "" || a.refused[key] > a.refused[worst] {
					worst = key
				}
			}
		}
		note := fmt.Sprintf("%s; its busiest second %.0f", k, n)
		if refused > 0 {
			note += fmt.Sprintf("; most refused: %s, %d", strings.TrimPrefix(worst, p.kind+" "), a.refused[worst])
		}
		note += fmt.Sprintf("; %d attempts refused and retried by the SDK", a.retried[p.kind])
		out = append(out, Quota{Name: fmt.Sprintf("ddb %s units/s on the hottest partition key (mean over the starts' span)", p.kind),
			Peak: mean, Bound: p.per / a.model.partitionScale(), Enforced: a.model.Enforce, Refused: refused, Note: note})
	}
	out = append(out, Quota{Name: "starter invocations at once (MaximumConcurrency)", Peak: float64(a.PeakStarters), Bound: float64(w.lanesESM.maxConc), Enforced: true,
		Note: fmt.Sprintf("%d message groups in flight at most", a.PeakGroups)})
	return out
}

// meterSQS counts an SQS call a handler makes (its queue is its key's first word).
func (w *World) meterSQS(c *call) {
	if !strings.HasPrefix(c.op, "sqs.") {
		return
	}
	url, rest, _ := strings.Cut(c.key, " ")
	name := url[strings.LastIndex(url, "/")+1:]
	n := 0
	switch c.op {
	case "sqs.SendMessage":
		n = 1
	case "sqs.SendMessageBatch", "sqs.ChangeMessageVisibilityBatch", "sqs.DeleteMessageBatch":
		n = strings.Count(rest, " ") + 1
	}
	w.aws.sqsCall(w.now(), name, c.op, n)
}

// meterWrite counts a DynamoDB write's units on each item's partition key (keys: "pk|sk" each);
// a write applied twice (its answer lost, the SDK's retry) counts twice.
func (w *World) meterWrite(c *call, units float64, keys ...string) {
	if w.aws == nil || c.proc == nil || c.fault == faultThrottle {
		return
	}
	if c.fault == faultAmbiguous {
		units *= 2
	}
	for _, k := range keys {
		pk, _, _ := strings.Cut(k, "|")
		w.aws.write(w.now(), pk, units)
	}
}

// meterRead counts a DynamoDB read's units on its partition keys (Query and GetItem: one unit,
// a strongly consistent read of up to 4 KB; Scan is the operator's, not metered).
func (w *World) meterRead(c *call) {
	if w.aws == nil || c.proc == nil || c.fault == faultThrottle || c.units == nil {
		return
	}
	for _, pk := range c.units.pks {
		w.aws.rcu.add(w.now(), pk, c.units.n)
	}
}

// queryUnits charges a Query page's units past the one its admission took: the page's items'
// size in 4 KB units, as DynamoDB charges a strongly consistent query, to the partition key's
// bucket (left in debt when short: the read is done) and its meter.
//
// The size is the one the page would have at AWS's scale, PartitionScale times the items read:
// what a partition key holds (a type's leases with its limit, parked records with its keys, a
// pool's slots with its cap) shrinks with a shape that divides them, and a query reads that many
// times fewer items than it would at full size. Charged as read, against quotas divided by the
// same factor, a query would cost that many times less than its real share of its partition key,
// and a read-bound rate, scaled back up, would be as many times too high.
func (w *World) queryUnits(c *call, items []map[string]ddbtypes.AttributeValue) {
	if w.aws == nil || c.proc == nil || c.units == nil {
		return
	}
	size := 0
	for _, it := range items {
		size += itemSize(it)
	}
	extra := queryReadUnits(size, w.aws.model.partitionScale()) - 1
	if extra <= 0 {
		return
	}
	pk := c.units.pks[0]
	if b := w.aws.reads[pk]; b != nil && w.aws.model.Enforce {
		b.has(w.now(), 0)
		b.tokens -= extra
		b.Lowest = min(b.Lowest, b.tokens)
	}
	w.aws.rcu.add(w.now(), pk, extra)
}

// queryReadUnits is what a strongly consistent Query page of size bytes costs at AWS's scale: one
// read unit per 4 KB of the page as it would be there, scale times larger (at least one unit).
func queryReadUnits(size int, scale float64) float64 {
	return max(1, math.Ceil(float64(size)*max(scale, 1)/4096))
}

// itemSize is an item's size as DynamoDB counts it, about: names and values' bytes.
func itemSize(item map[string]ddbtypes.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k)
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			n += len(v.Value)
		case *ddbtypes.AttributeValueMemberN:
			n += len(v.Value)
		case *ddbtypes.AttributeValueMemberB:
			n += len(v.Value)
		case *ddbtypes.AttributeValueMemberL:
			for _, x := range v.Value {
				n += itemSize(map[string]ddbtypes.AttributeValue{"": x}) + 1
			}
		case *ddbtypes.AttributeValueMemberM:
			n += itemSize(v.Value)
		default:
			n++
		}
	}
	return n
}

// quotaHold is how long after the StartExecution bucket last refused a start work conservation
// holds every type as held back: the starter puts a throttled job back for a retry pause
// (START_RETRY_SECONDS, doubling), and the bucket is the account's, so any type's jobs may wait
// for tokens. It is the AWS quota doing what a start rate does.
const quotaHold = time.Minute

// quotaHeld says whether the AWS model's StartExecution bucket refused a start lately (quotaHold).
func (c *checker) quotaHeld() bool {
	a := c.w.aws
	return a != nil && a.model.Enforce && !a.start.LastRefused.IsZero() && c.w.now().Sub(a.start.LastRefused) < quotaHold
}
