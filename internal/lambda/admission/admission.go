// Package admission decides, once, the fate of each job of a type with key caps, where the overflow
// rule skip acts: admitted (it may run) or skipped (it ends without running). Both are conditional writes of one item
// per submission of a job, and whichever is written first stands: a job the starter skipped is never
// sent to a lane by another copy of its message (Lambda may hand a batch over twice), and a job sent
// to a lane is never skipped afterwards.
//
// A write is idempotent: it succeeds when it finds the item it would write (a write that DynamoDB
// applied but answered as failed, retried by the SDK or by the message's next delivery). The item
// also tells job show how a skipped job ended, and which job it waited behind.
//
// Items live in the limiter's table: pk ADMIT#{type}, sk {sender}/{key}/{id}/{redrive}/{submitted},
// with submitted in Unix nanoseconds (a producer may send an id again once its job has ended: that is
// another submission, with its own fate). They expire (expiresAt) after Retention, when no message of
// the submission can be left: SQS keeps a message 14 days at most.
package admission

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Retention is how long a fate is kept: longer than any message of its job can live in SQS.
const Retention = 15 * 24 * time.Hour

// The fates.
const (
	Admitted = "admitted"
	Skipped  = "skipped"
)

// Job is the identity of one submission of a job: its type, sender, key, id, generation (redrive)
// and submission time.
type Job struct {
	Type, Sender, Key, ID string
	Redrive               int
	SubmittedAt           time.Time
}

// Fate is what was decided for a submission.
type Fate struct {
	Job
	// Outcome is Admitted or Skipped.
	Outcome string
	// Behind is the job of the same key and sender that held a lane when this one was skipped.
	Behind string
	// At is when it was decided.
	At time.Time
}

// ErrSkipped is returned by Admit for a submission that was skipped.
var ErrSkipped = errors.New("job was skipped (overflow rule skip)")

type dynamoAPI interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Store keeps fates in one DynamoDB table.
type Store struct {
	db    dynamoAPI
	table string
}

// NewStore returns a store on table.
func NewStore(db dynamoAPI, table string) *Store { return &Store{db: db, table: table} }

func pk(typ string) string { return "ADMIT#" + typ }

// prefix is the sort key's part that names a job of a generation, or every generation when redrive
// is negative.
func prefix(sender, key, id string, redrive int) string {
	p := sender + "/" + key + "/" + id + "/"
	if redrive >= 0 {
		p += strconv.Itoa(redrive) + "/"
	}
	return p
}

func sk(j Job) string {
	return prefix(j.Sender, j.Key, j.ID, j.Redrive) + strconv.FormatInt(j.SubmittedAt.UnixNano(), 10)
}

// Admit records that j may run. It fails with ErrSkipped when j was skipped: then it must not run.
func (s *Store) Admit(ctx context.Context, j Job, now time.Time) error {
	old, _, err := s.decide(ctx, Fate{Job: j, Outcome: Admitted, At: now})
	if err != nil {
		return err
	}
	if old != nil {
		return fmt.Errorf("admit job %s of type %s: %w", j.ID, j.Type, ErrSkipped)
	}
	return nil
}

// Skip records that j ends without running, behind job behind of its key. skipped is false when j
// was admitted already: then it must not be skipped. first says this call wrote the skip (not a
// copy of the message, or an earlier delivery; nor this call's own write answered as failed and
// made again by the SDK, which reads as an earlier one): the one to count it.
func (s *Store) Skip(ctx context.Context, j Job, behind string, now time.Time) (skipped, first bool, err error) {
	old, wrote, err := s.decide(ctx, Fate{Job: j, Outcome: Skipped, Behind: behind, At: now})
	return old == nil && err == nil, wrote, err
}

// decide writes f unless a fate was written first: wrote says it wrote it, and old is the other fate
// when that one was.
func (s *Store) decide(ctx context.Context, f Fate) (old *Fate, wrote bool, err error) {
	item := map[string]types.AttributeValue{
		"pk":        &types.AttributeValueMemberS{Value: pk(f.Type)},
		"sk":        &types.AttributeValueMemberS{Value: sk(f.Job)},
		"outcome":   &types.AttributeValueMemberS{Value: f.Outcome},
		"at":        &types.AttributeValueMemberN{Value: strconv.FormatInt(f.At.UnixMilli(), 10)},
		"expiresAt": &types.AttributeValueMemberN{Value: strconv.FormatInt(f.At.Add(Retention).Unix(), 10)},
	}
	if f.Behind != "" {
		item["behind"] = &types.AttributeValueMemberS{Value: f.Behind}
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table, Item: item,
		// Its own fate found is a write already made (answered as failed, or by another copy of
		// the message, or a later delivery's): kept as first written, with its first time and
		// reason, and no conflict.
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var cf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &cf) && len(cf.Item) == 0:
		return nil, false, fmt.Errorf("record job %s of type %s %s: its fate was written, and not returned: %w", f.ID, f.Type, f.Outcome, err)
	case errors.As(err, &cf):
		if old := decode(f.Type, cf.Item); old.Outcome != f.Outcome {
			return &old, false, nil
		}
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("record job %s of type %s %s: %w", f.ID, f.Type, f.Outcome, err)
	}
	return nil, true, nil
}

// Find returns the fates of the job of type typ, sender, key and id, every generation and
// submission, oldest first.
func (s *Store) Find(ctx context.Context, typ, sender, key, id string) ([]Fate, error) {
	in := &dynamodb.QueryInput{
		TableName:              &s.table,
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": &types.AttributeValueMemberS{Value: pk(typ)},
			":sk": &types.AttributeValueMemberS{Value: prefix(sender, key, id, -1)},
		},
	}
	var out []Fate
	p := dynamodb.NewQueryPaginator(s.db, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("read fates of job %s of type %s: %w", id, typ, err)
		}
		for _, it := range page.Items {
			out = append(out, decode(typ, it))
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].Redrive != out[b].Redrive {
			return out[a].Redrive < out[b].Redrive
		}
		return out[a].SubmittedAt.Before(out[b].SubmittedAt)
	})
	return out, nil
}

// item is a fate as stored.
type item struct {
	SK      string `dynamodbav:"sk"`
	Outcome string `dynamodbav:"outcome"`
	Behind  string `dynamodbav:"behind"`
	At      int64  `dynamodbav:"at"`
}

func decode(typ string, it map[string]types.AttributeValue) Fate {
	var v item
	_ = attributevalue.UnmarshalMap(it, &v) // a field of another type is left zero
	f := Fate{Job: Job{Type: typ}, Outcome: v.Outcome, Behind: v.Behind, At: time.UnixMilli(v.At)}
	// sender/key/id/redrive/submitted: the sender, key and id have no "/".
	if parts := strings.Split(v.SK, "/"); len(parts) == 5 {
		f.Sender, f.Key, f.ID = parts[0], parts[1], parts[2]
		f.Redrive, _ = strconv.Atoi(parts[3])
		ns, _ := strconv.ParseInt(parts[4], 10, 64)
		f.SubmittedAt = time.Unix(0, ns)
	}
	return f
}
