// Package pool keeps the slots of shared pools in DynamoDB: a pool of cap N has slots 1..N, and a
// bind of a member type's job takes one (a conditional write naming the lane and job that hold it)
// after writing its lane's lease. A slot is never freed by a write of its own: it is free once its
// holder's lease is gone (released, taken back or moved), which every reader checks against the
// member types' leases. So a release frees a pool slot with the one delete it already makes, and a
// slot cannot leak past its lease.
package pool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
)

// ErrTaken means the slot changed since it was read: another bind took it.
var ErrTaken = errors.New("pool slot taken since it was read")

// Holder is the lane and job a slot counts: the slot is held while that lane's lease holds that job.
type Holder struct {
	Type    string `dynamodbav:"type"`
	Lane    int    `dynamodbav:"lane"`
	JobID   string `dynamodbav:"jobId"`
	Key     string `dynamodbav:"key,omitempty"`
	Sender  string `dynamodbav:"sender,omitempty"`
	Redrive int    `dynamodbav:"redrive,omitempty"`
}

// HolderOf is the holder a lease's slots name.
func HolderOf(l lease.Lease) Holder {
	return Holder{Type: l.Type, Lane: l.Lane, JobID: l.JobID, Key: l.JobKey, Sender: l.JobSender, Redrive: l.Redrive}
}

// heldBy reports whether lease l holds the slot of h. A moving lease holds none: its job runs no
// execution in the lane and never starts from it (it binds again elsewhere, with a slot of its own).
// Nor does one being dead-lettered: its job ended for good and never starts again. Either may
// outlive its job by the sweep's stale limit (a move's delete failed, a release stopped).
func (h Holder) heldBy(l lease.Lease) bool {
	return l.Type == h.Type && l.Lane == h.Lane && l.Status != lease.Moving && l.Status != lease.DeadLettering &&
		l.Holds(h.Sender, h.Key, h.JobID, h.Redrive)
}

// Slot is one slot of a pool as stored: its number, its last holder and the token of the write
// that named it (a take over it is conditional on that token).
type Slot struct {
	N      int    `dynamodbav:"n"`
	Token  string `dynamodbav:"token"`
	Holder Holder `dynamodbav:"holder"`
	// At is when the holder took it.
	At time.Time `dynamodbav:"at"`
}

// dynamoAPI is the part of the DynamoDB client the store uses.
type dynamoAPI interface {
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// Store reads and takes pool slots, items (pk "POOL#{pool}", sk "SLOT#{n, 6 digits}").
type Store struct {
	db    dynamoAPI
	table string
	now   func() time.Time
}

// NewStore returns a slot store on table.
func NewStore(db dynamoAPI, table string) *Store { return &Store{db: db, table: table, now: time.Now} }

// SetClock replaces the clock, for tests and simulations.
func (s *Store) SetClock(now func() time.Time) { s.now = now }

func pk(name string) string { return "POOL#" + name }
func sk(n int) string       { return fmt.Sprintf("SLOT#%06d", n) }

// Slots returns every slot of pool name ever taken (a strongly consistent Query: a slot taken a
// moment ago must be seen), in slot order.
func (s *Store) Slots(ctx context.Context, name string) ([]Slot, error) {
	var out []Slot
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk(name)}},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list slots of pool %s: %w", name, err)
		}
		for _, it := range page.Items {
			var sl Slot
			if err := attributevalue.UnmarshalMap(it, &sl); err != nil {
				return nil, fmt.Errorf("decode slot %v of pool %s: %w", it["sk"], name, err)
			}
			out = append(out, sl)
		}
	}
	return out, nil
}

// Take makes slot n of pool name h's: over prev, the slot as read (its token must be unchanged), or
// over nothing (the slot must never have been taken) when prev is nil. ErrTaken: changed since.
//
// A take that DynamoDB applied and answered as failed (the SDK's retry fails its own condition) is
// told by its token, which the failed condition returns: it is a success.
func (s *Store) Take(ctx context.Context, name string, n int, h Holder, prev *Slot) (Slot, error) {
	next := Slot{N: n, Token: strconv.FormatUint(rand.Uint64(), 36), Holder: h, At: s.now().UTC()}
	item, err := attributevalue.MarshalMap(next)
	if err != nil {
		return Slot{}, fmt.Errorf("encode slot %d of pool %s: %w", n, name, err)
	}
	item["pk"] = &types.AttributeValueMemberS{Value: pk(name)}
	item["sk"] = &types.AttributeValueMemberS{Value: sk(n)}
	in := &dynamodb.PutItemInput{TableName: &s.table, Item: item,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	if prev == nil {
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		in.ConditionExpression = aws.String("#t = :t")
		in.ExpressionAttributeNames = map[string]string{"#t": "token"}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: prev.Token}}
	}
	if _, err := s.db.PutItem(ctx, in); err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if own, ok := ccf.Item["token"].(*types.AttributeValueMemberS); ok && own.Value == next.Token {
				return next, nil
			}
			return Slot{}, fmt.Errorf("take slot %d of pool %s: %w", n, name, ErrTaken)
		}
		return Slot{}, fmt.Errorf("take slot %d of pool %s: %w", n, name, err)
	}
	return next, nil
}

// View is a pool's occupancy: its slots, each live (its holder's lease holds it) or not.
type View struct {
	Name string
	Cap  int
	// Live are the slots whose holders' leases hold them; Free the slot numbers in 1..Cap a take
	// may go for, with the slot as read (nil: never taken).
	Live []Slot
	Free []Candidate
	// Unslotted are the claims of the member types looked at that hold no slot of the pool: jobs
	// that ran when their type joined it (the sweep gives them slots). They count as live.
	Unslotted []lease.Lease
	// Left are the slots still held by jobs of types that left the pool (not among the members
	// looked at). They count for nothing: Free may offer them.
	Left []Slot
	// stored are the slots read, by number.
	stored map[int]*Slot
}

// Candidate is a slot a take may go for: Prev is the slot as read (nil: never taken).
type Candidate struct {
	N    int
	Prev *Slot
}

// Running counts the live slots of each member type.
func (v View) Running() map[string]int {
	out := map[string]int{}
	for _, sl := range v.Live {
		out[sl.Holder.Type]++
	}
	return out
}

// Holds reports whether a live slot of the view is l's, and which.
func (v View) Holds(l lease.Lease) (Slot, bool) {
	h := HolderOf(l)
	for _, sl := range v.Live {
		if sl.Holder == h {
			return sl, true
		}
	}
	return Slot{}, false
}

// Named is the lowest slot as read, live or not, that names l's job in l's lane. A slot freed by an
// earlier lease of that job in that lane (a bind given back, a lease taken back) is live again once
// l is written, whatever slot l takes: so l's bind takes that one over, on its token, and no other,
// or the one job counts twice in the pool for as long as it runs.
func (v View) Named(l lease.Lease) (Slot, bool) {
	h, n := HolderOf(l), 0
	for _, sl := range v.stored {
		if sl.Holder == h && (n == 0 || sl.N < n) {
			n = sl.N
		}
	}
	if n == 0 {
		return Slot{}, false
	}
	return *v.stored[n], true
}

// Stored is slot n as read (nil: never taken), live or not: a take over it is conditional on it.
func (v View) Stored(n int) *Slot { return v.stored[n] }

// Room reports how many more jobs the pool may start (0: at or over its cap).
func (v View) Room() int { return max(v.Cap-len(v.Live)-len(v.Unslotted), 0) }

// Look reads pool name (cap slots) and the leases of the types its slots name, in that order: a
// slot is written after its holder's lease, so a holder whose lease is missing from leases read
// after the slot has released it. Leases of types in have are read again all the same (a view
// read before the slots may miss a lease written since).
//
// With live slots above a lowered cap, only the lowest free slots that leave room for them are
// offered, so two takes reading the same slots cannot both take the last place. The claims of
// members (the pool's member types) that hold no slot count the same way: a type that joined the
// pool under running jobs cannot let the pool start its whole cap beside them. A slot whose holder's
// type is not among members (when they are given) is free: a type that left the pool takes its jobs
// out of it, running or retrying, or the pool would read full under its members for as long as those
// jobs run and are retried.
func Look(ctx context.Context, s SlotReader, leases LeaseLister, name string, cap int, members ...string) (View, error) {
	slots, err := s.Slots(ctx, name)
	if err != nil {
		return View{}, err
	}
	byType := map[string][]lease.Lease{}
	for _, sl := range slots {
		t := sl.Holder.Type
		if _, ok := byType[t]; ok || t == "" {
			continue
		}
		ls, err := leases.ListType(ctx, t)
		if err != nil && !counts(t, members) {
			continue // its slots count for nothing: only View.Left misses them
		}
		if err != nil {
			return View{}, fmt.Errorf("read leases of %s, a holder of pool %s: %w", t, name, err)
		}
		byType[t] = ls
	}
	stored := map[int]*Slot{}
	v := View{Name: name, Cap: cap, stored: stored}
	for i, sl := range slots {
		stored[sl.N] = &slots[i]
		switch {
		case !held(sl, byType[sl.Holder.Type]):
		case counts(sl.Holder.Type, members):
			v.Live = append(v.Live, sl)
		default: // its type left the pool: its jobs count no more, as a joining type's count at once
			v.Left = append(v.Left, sl)
		}
	}
	for _, t := range members {
		ls, ok := byType[t]
		if !ok {
			if ls, err = leases.ListType(ctx, t); err != nil {
				return View{}, fmt.Errorf("read leases of %s, a member of pool %s: %w", t, name, err)
			}
		}
		for _, l := range ls {
			if _, slotted := v.Holds(l); !slotted && l.Status == lease.Starting {
				v.Unslotted = append(v.Unslotted, l)
			}
		}
	}
	v.offer()
	return v, nil
}

// counts reports whether the slots of type t count in a pool of members (any type, when none are
// given: a reader that cannot list them counts every holder).
func counts(t string, members []string) bool {
	return len(members) == 0 || slices.Contains(members, t)
}

// offer sets the free slots a take may go for: the lowest free slots of 1..Cap that leave room for
// the live slots above the cap and the claims without a slot.
func (v *View) offer() {
	liveAt, above := map[int]bool{}, 0
	for _, sl := range v.Live {
		liveAt[sl.N] = true
		if sl.N > v.Cap {
			above++
		}
	}
	free := 0
	for n := 1; n <= v.Cap; n++ {
		if !liveAt[n] {
			free++
		}
	}
	v.Free = nil
	for n := 1; n <= v.Cap && len(v.Free) < free-above-len(v.Unslotted); n++ {
		if !liveAt[n] {
			v.Free = append(v.Free, Candidate{N: n, Prev: v.stored[n]})
		}
	}
}

// Without is v without l among the claims that hold no slot: a look on behalf of l's own job does
// not count it against itself.
func (v View) Without(l lease.Lease) View {
	h := HolderOf(l)
	v.Unslotted = slices.DeleteFunc(slices.Clone(v.Unslotted), func(u lease.Lease) bool { return HolderOf(u) == h })
	v.offer()
	return v
}

// Unheld is v as read before l was written: l's live slots free (offered as read, when the lowest
// free slots leave room for them). A bind's look after its lease counts the slots it finds naming
// the lease's job as the lease's, whether its bind took them or an earlier lease of that job in
// that lane did; judged by Unheld, the bind keeps only a place a bind that read before its lease
// would go for too.
func (v View) Unheld(l lease.Lease) View {
	h := HolderOf(l)
	v.Live = slices.DeleteFunc(slices.Clone(v.Live), func(sl Slot) bool { return sl.Holder == h })
	v.offer()
	return v
}

// SlotReader reads a pool's slots.
type SlotReader interface {
	Slots(ctx context.Context, name string) ([]Slot, error)
}

// LeaseLister reads a type's leases.
type LeaseLister interface {
	ListType(ctx context.Context, typ string) ([]lease.Lease, error)
}

func held(sl Slot, leases []lease.Lease) bool {
	for _, l := range leases {
		if sl.Holder.heldBy(l) {
			return true
		}
	}
	return false
}
