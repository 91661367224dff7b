package simworld

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
)

// Senders (docs/design.md, "Producer trust model"): SQS gives each message the SenderId of the
// credentials that sent it, as AWS does: an IAM user's unique id ("AIDA…"), or for a role, the
// role's unique id, ':' and the session name (a Lambda function's role session is the function's
// name). The simulated SQS sets it from who calls: a function's invocation sends as its role, the
// workload and the operator (outside any invocation) as the producer, and the interloper as
// another tenant.
const (
	// ProducerSenderID is the workload's producer, which also opens batches as `sfnlimit batch
	// open` and acts as the operator.
	ProducerSenderID = "AIDASIMPRODUCER000001"
	// InterloperSenderID is another tenant, allowed to send to the general queue too.
	InterloperSenderID = "AROASIMTENANTB0000001:tenant-b"
	// RouterRoleID is the router's role's unique id (ROUTER_ROLE_ID).
	RouterRoleID = "AROASIMROUTERROLE0001"
)

// senderOf is the SenderId SQS gives a message sent by ctx's caller.
func (w *World) senderOf(ctx context.Context) string {
	p := procOf(ctx)
	if p == nil {
		return ProducerSenderID
	}
	switch name, _, _ := strings.Cut(p.name, "#"); { // a proc is named "{function}#{n}"
	case name == "router":
		return RouterRoleID + ":sim-RouterFunction"
	case name == "starter":
		return "AROASIMSTARTERROLE001:sim-StarterFunction"
	default:
		return "AROASIMRELEASERROLE01:sim-ReleaserFunction"
	}
}

// The interloper (Faults.Interlopers): another tenant sends jobs naming the workload's batches
// once they are open: junk (an unknown type), jobs giving the batch's size or another, and jobs
// that forge the attributes only the router may set (the first sender, an old submission time).
// None may change the batch: each is refused (batch_not_owned), dead-lettered and never counted,
// and never runs. Drawn from a stream of its own, so that a world without interlopers runs as
// before they were modelled.
const interloperStream = 0x1e7e4

// KindInterloper: another tenant's job changed a batch, ran, or was not refused as not the
// batch's.
const KindInterloper = "another tenant's job in a batch"

// interloperJob is one job the interloper sent naming a batch: k as the simulation names it
// (jobKeyOf), typ and id as the batch's ledger would.
type interloperJob struct {
	k, typ, id, batch string
}

// interloperReuseStream draws the interloper's jobs that reuse a workload job's type, key and id.
const interloperReuseStream = 0x1e7e5

// interloperReuses adds to the workload (Faults.Interlopers of them) jobs of the interloper's own
// that reuse a workload job's type, key and id, sent a few seconds to minutes after it (within
// SQS's five-minute deduplication window, often while it runs), without a batch. A job is its type,
// sender, key and id (docs/design.md, "Job identity across tenants"): both are jobs, and the
// invariants hold each to running and ending once, so the workload's job still runs and ends once
// however the interloper names its own. They draw from their own stream and are added after the
// batches are drawn, so the rest of a seed's world is as without them.
func (w *World) interloperReuses() {
	n := w.cfg.Faults.Interlopers
	var pool []*jobSpec
	for _, j := range w.order {
		if j.typ != "" && j.typ != "omega" && j.senderID == "" {
			pool = append(pool, j)
		}
	}
	if n <= 0 || len(pool) == 0 {
		return
	}
	r := rand.New(rand.NewPCG(w.seed, interloperReuseStream))
	tenant := job.Sender(batch.Principal(InterloperSenderID), "")
	for range n {
		o := pool[r.IntN(len(pool))]
		j := &jobSpec{typ: o.typ, id: o.id, key: o.key, senderID: InterloperSenderID,
			submitAt: o.submitAt + time.Duration(r.Int64N(int64(4*time.Minute))), duration: time.Duration(1+r.IntN(60)) * time.Second}
		j.k = jobKeyOf(j.typ, tenant, j.key, j.id)
		if w.jobs[j.k] != nil {
			continue // reused already: the same sender, type, key and id is one job
		}
		w.jobs[j.k] = j
		w.order = append(w.order, j)
		w.interloperReused = append(w.interloperReused, [2]string{o.k, j.k})
	}
}

// interlopers schedules the interloper's jobs.
func (w *World) interlopers(start time.Time) {
	n := w.cfg.Faults.Interlopers
	if n <= 0 || len(w.batches.batches) == 0 {
		return
	}
	r := rand.New(rand.NewPCG(w.seed, interloperStream))
	for i := range n {
		bs := w.batches.batches[r.IntN(len(w.batches.batches))]
		at := start.Add(time.Duration(r.Int64N(int64(30 * time.Minute))))
		kind := r.IntN(4)
		typ := bs.members[0].typ
		if typ == "" || typ == "omega" {
			typ = "omega"
		}
		id := fmt.Sprintf("x%03d", i)
		body := map[string]any{"type": typ, "id": id, "batch": bs.id, "input": map[string]any{"seconds": 1}}
		var attrs map[string]sqstypes.MessageAttributeValue
		switch kind {
		case 0:
			body["type"] = "omega" // junk: a type nobody configured
		case 1:
			body["batchSize"] = len(bs.members)
		case 2:
			body["batchSize"] = len(bs.members) + 3
		case 3:
			attrs = map[string]sqstypes.MessageAttributeValue{
				router.SenderAttribute:      {DataType: aws.String("String"), StringValue: aws.String(ProducerSenderID)},
				router.SubmittedAtAttribute: {DataType: aws.String("Number"), StringValue: aws.String("0")},
			}
		}
		b, _ := json.Marshal(body)
		named := ""
		if kind == 3 {
			named = ProducerSenderID
		}
		typName := body["type"].(string)
		ij := interloperJob{k: jobKeyOf(typName, job.Sender(batch.Principal(InterloperSenderID), named), "", id), typ: typName, id: id, batch: bs.id}
		var send func(tries int)
		send = func(tries int) {
			// Only once the batch is open: the first to open an id owns it, and a batch the
			// interloper opened first would refuse the workload's own jobs (documented, not a
			// defect of the router).
			if w.table.Item("BATCH#"+bs.id, "META") == nil {
				if tries < 60 {
					w.sched.after(time.Minute, func() { send(tries + 1) })
				}
				return
			}
			w.batches.interlopers = append(w.batches.interlopers, ij)
			w.trace(ij.k, "interloper: job naming batch %s (kind %d)", bs.id, kind)
			w.general.send(string(b), "", "", attrs, 0, InterloperSenderID)
		}
		w.sched.at(at, func() { send(0) })
	}
}

// checkInterlopers checks at quiescence that every interloper job was refused as not its batch's,
// never ran, and left no record in any batch.
func (c *checker) checkInterlopers() {
	w := c.w
	if len(w.batches.interlopers) == 0 {
		return
	}
	ran := map[string]bool{}
	for _, e := range w.sfn.order {
		ran[e.jk] = true
	}
	recorded := map[string]string{}
	out, err := w.table.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String("sim")})
	if err != nil {
		c.violate(KindInterloper, "table", "scan: %v", err)
		return
	}
	for _, it := range out.Items {
		pk, sk := strAttr(it, "pk"), strAttr(it, "sk")
		if !strings.HasPrefix(pk, "BATCH#") {
			continue
		}
		for _, p := range []string{"JOB#", "DEAD#"} {
			if rest, ok := strings.CutPrefix(sk, p); ok {
				recorded[rest] = pk
			}
		}
	}
	for _, ij := range w.batches.interlopers {
		if how := c.ops.ended[genKey(ij.k, 0)]; how != "dead-lettered ("+string(job.ReasonBatchNotOwned)+")" {
			c.violate(KindInterloper, ij.k, "another tenant's job naming batch %s ended %q, want refused as %s", ij.batch, how, job.ReasonBatchNotOwned)
		}
		if ran[ij.k] {
			c.violate(KindInterloper, ij.k, "another tenant's job naming batch %s ran", ij.batch)
		}
		for _, k := range []string{job.BatchJobID(ij.typ, "", ij.id), job.BatchJobID(batchend.InvalidType, "", ij.id)} {
			if pk, ok := recorded[k]; ok {
				c.violate(KindInterloper, ij.k, "another tenant's job is recorded in %s as %s", pk, k)
			}
		}
	}
}
