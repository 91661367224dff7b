package batch

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Show returns batch id's summary and, withJobs, every counted job's record (sorted by id).
func (l *Ledger) Show(ctx context.Context, id string, withJobs bool) (Summary, []Job, error) {
	sum, err := l.summary(ctx, id, withJobs)
	if err != nil || !withJobs {
		return sum, nil, err
	}
	var jobs []Job
	for k := range sum.Shards {
		its, err := l.query(ctx, shardPK(id, k), "JOB#", 0)
		if err != nil {
			return sum, nil, err
		}
		for _, it := range its {
			jobs = append(jobs, decodeJob(it))
		}
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	return sum, jobs, nil
}

// summary reads the batch item and every shard. It lists up to MaxListed dead-lettered jobs
// (allDead: all of them).
func (l *Ledger) summary(ctx context.Context, id string, allDead bool) (Summary, error) {
	m, err := l.readMeta(ctx, id)
	if err != nil {
		return Summary{}, err
	}
	sum := Summary{
		Batch: id, Expected: m.expected, Shards: m.shards, Counts: map[Outcome]int{},
		OpenedAt: m.openedAt, Closed: m.closed(), ClosedAt: m.closedAt, ClosedBy: m.closedBy, Announced: m.announced, Owner: m.owner,
		ExpiresAt:         m.expiresAt,
		DeadLetteredWhere: fmt.Sprintf("sfnlimit batch show %s --jobs (items DEAD#{job} under pk BATCH#%s#S{shard})", id, id),
	}
	if err := l.sumShards(ctx, &sum); err != nil {
		return Summary{}, err
	}
	limit := MaxListed
	if allDead {
		limit = 0
	}
	if err := l.listDead(ctx, &sum, limit); err != nil {
		return Summary{}, err
	}
	late, err := l.query(ctx, "BATCH#"+id, "LATE#", 0)
	if err != nil {
		return Summary{}, err
	}
	for _, it := range late {
		j := Job{ID: str(it, "jobId"), Outcome: Outcome(str(it, "outcome")), Redrive: int(integer(it, "redrive")), At: stamp(it, "at"), Shard: -1}
		sum.Late = append(sum.Late, j)
	}
	return sum, nil
}

// sumShards adds every shard's counts and end times to sum.
func (l *Ledger) sumShards(ctx context.Context, sum *Summary) error {
	var first, last int64
	for k := range sum.Shards {
		sh, err := l.readShard(ctx, sum.Batch, k)
		if err != nil {
			return err
		}
		if sh.n == 0 {
			continue
		}
		sum.Recorded += sh.n
		for o, c := range sh.counts {
			sum.Counts[o] += c
		}
		if first == 0 || sh.firstMs < first {
			first = sh.firstMs
		}
		last = max(last, sh.lastMs)
	}
	if sum.Recorded > 0 {
		sum.First, sum.Last = time.UnixMilli(first).UTC(), time.UnixMilli(last).UTC()
	}
	return nil
}

// listDead lists the dead-lettered and refused jobs of sum's batch, up to limit (all when 0).
func (l *Ledger) listDead(ctx context.Context, sum *Summary, limit int) error {
	dead := sum.Counts[DeadLettered] + sum.Counts[Refused]
	for k := 0; k < sum.Shards && dead > 0; k++ {
		its, err := l.query(ctx, shardPK(sum.Batch, k), "DEAD#", limit)
		if err != nil {
			return err
		}
		for _, it := range its {
			sum.DeadLetteredIDs = append(sum.DeadLetteredIDs, str(it, "sk")[len("DEAD#"):])
		}
		if limit > 0 && len(sum.DeadLetteredIDs) >= limit {
			break
		}
	}
	sort.Strings(sum.DeadLetteredIDs)
	if limit > 0 && len(sum.DeadLetteredIDs) > limit {
		sum.DeadLetteredIDs = sum.DeadLetteredIDs[:limit]
	}
	sum.DeadLetteredMore = len(sum.DeadLetteredIDs) < dead
	return nil
}

// query reads the items of pk whose sort key starts with prefix, up to limit (all when 0).
func (l *Ledger) query(ctx context.Context, pk, prefix string, limit int) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(l.db, &dynamodb.QueryInput{
		TableName:              &l.table,
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": s(pk), ":sk": s(prefix),
		},
		ConsistentRead: aws.Bool(true),
	})
	for p.HasMorePages() && (limit == 0 || len(out) < limit) {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("read %s* of %s: %w", prefix, pk, err)
		}
		out = append(out, page.Items...)
	}
	return out, nil
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func ts(t time.Time) types.AttributeValue { return s(t.UTC().Format(time.RFC3339Nano)) }

func metaKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s("BATCH#" + id), "sk": s("META")}
}
func shardPK(id string, k int) string { return fmt.Sprintf("BATCH#%s#S%03d", id, k) }
func shardKey(id string, k int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(shardPK(id, k)), "sk": s("COUNT")}
}
func jobKey(id, jobID string, shards int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(shardPK(id, Home(jobID, shards))), "sk": s("JOB#" + jobID)}
}

func decodeJob(it map[string]types.AttributeValue) Job {
	return Job{
		ID: str(it, "sk")[len("JOB#"):], Outcome: Outcome(str(it, "outcome")), Redrive: int(integer(it, "redrive")),
		At: stamp(it, "at"), Shard: int(integer(it, "shard")),
	}
}

func str(it map[string]types.AttributeValue, k string) string {
	if v, ok := it[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func integer(it map[string]types.AttributeValue, k string) int64 {
	if v, ok := it[k].(*types.AttributeValueMemberN); ok {
		x, _ := strconv.ParseInt(v.Value, 10, 64)
		return x
	}
	return 0
}

// epoch reads a number of seconds since the epoch (zero time when absent).
func epoch(it map[string]types.AttributeValue, k string) time.Time {
	if sec := integer(it, k); sec > 0 {
		return time.Unix(sec, 0).UTC()
	}
	return time.Time{}
}

func stamp(it map[string]types.AttributeValue, k string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, str(it, k))
	return t
}
