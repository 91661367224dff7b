package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The type registry: one item per job type that has ever held a lease, written before the type's
// first lease, so that the sweep can Query each type's leases (ListType) instead of scanning a
// table that also holds the lane counts of every recent job. A type whose config was removed while
// its leases live stays in the registry, so its lanes are still swept: never leak a lane.
//
// Registry items are never deleted (a process that registered a type does not write it again), so
// the registry holds every type ever leased: a few items, and one Query each per sweep.
//
// Leases written before the registry existed have no item: Types scans the table once, registers
// the types it finds, then writes typesScanned, after which no call scans again. That scan reads the
// whole table, which may not fit in one invocation: each page's types are registered and the key to
// go on from is written (typesScanFrom) before the next page, and a call stops after
// typesScanBudget, so every call moves the scan on and leaves the rest of its invocation to the
// sweep, and the next goes on where the last stopped.
const (
	typesPK       = "LEASETYPES"
	typesSKPre    = "TYPE#"
	typesScanned  = "SCANNED"  // not TYPE#...: a type cannot be mistaken for it
	typesScanFrom = "SCANFROM" // the scan's progress: attribute "from", the key the next page starts after

	typesScanBudget = 30 * time.Second // of the releaser's 120 s
)

func typeKey(sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: typesPK},
		"sk": &types.AttributeValueMemberS{Value: sk},
	}
}

// RegisterType adds typ to the registry of types the sweep looks at, as a type's first lease does:
// a type whose jobs park while it is paused may not have held a lease yet, and the sweep must find
// it to wake them once it is resumed.
func (s *Store) RegisterType(ctx context.Context, typ string) error { return s.registerType(ctx, typ) }

// registerType writes typ's registry item unless this store has written it already.
func (s *Store) registerType(ctx context.Context, typ string) error {
	if _, done := s.registered.Load(typ); done {
		return nil
	}
	if err := s.putRegistry(ctx, typesSKPre+typ, typ); err != nil {
		return fmt.Errorf("register lease type %s: %w", typ, err)
	}
	s.registered.Store(typ, true)
	return nil
}

func (s *Store) putRegistry(ctx context.Context, sk, typ string) error {
	item := typeKey(sk)
	item["at"] = &types.AttributeValueMemberS{Value: s.now().UTC().Format(time.RFC3339Nano)}
	if typ != "" {
		item["type"] = &types.AttributeValueMemberS{Value: typ}
	}
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item})
	return err
}

// Types returns every job type that has held a lease in the table (the registry), sorted. While the
// registry lacks its scanned marker, a call also scans the leases, from where the last call stopped
// and for at most typesScanBudget, to register the types of leases older than the registry.
func (s *Store) Types(ctx context.Context) ([]string, error) {
	out, scanned, from, err := s.readRegistry(ctx)
	if err != nil || scanned {
		return out, err
	}
	seen := map[string]bool{}
	for _, t := range out {
		seen[t] = true
	}
	began := s.now()
	for {
		page, err := s.db.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 &s.table,
			FilterExpression:          aws.String("begins_with(pk, :p)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: leasePrefix}},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         from,
		})
		if err != nil {
			return out, fmt.Errorf("register the types of existing leases (the next call goes on from here): %w", err)
		}
		ls, err := decodeAll(page.Items)
		if err != nil {
			return out, fmt.Errorf("register the types of existing leases: %w", err)
		}
		for _, l := range ls {
			if seen[l.Type] {
				continue
			}
			if err := s.registerType(ctx, l.Type); err != nil {
				return out, err
			}
			seen[l.Type] = true
			out = append(out, l.Type)
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		from = page.LastEvaluatedKey
		if err := s.putScanFrom(ctx, from); err != nil {
			return out, fmt.Errorf("record how far the lease types are registered: %w", err)
		}
		if s.now().Sub(began) >= typesScanBudget {
			return out, nil // the next call goes on from here
		}
	}
	if err := s.putRegistry(ctx, typesScanned, ""); err != nil {
		return nil, fmt.Errorf("mark the lease types registered: %w", err)
	}
	return out, nil
}

func (s *Store) putScanFrom(ctx context.Context, from map[string]types.AttributeValue) error {
	item := typeKey(typesScanFrom)
	item["at"] = &types.AttributeValueMemberS{Value: s.now().UTC().Format(time.RFC3339Nano)}
	item["from"] = &types.AttributeValueMemberM{Value: from}
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item})
	return err
}

func (s *Store) readRegistry(ctx context.Context) (out []string, scanned bool, from map[string]types.AttributeValue, err error) {
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: typesPK}},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, false, nil, fmt.Errorf("read the lease types: %w", err)
		}
		for _, it := range page.Items {
			sk, _ := it["sk"].(*types.AttributeValueMemberS)
			switch {
			case sk == nil:
			case sk.Value == typesScanned:
				scanned = true
			case sk.Value == typesScanFrom:
				if m, ok := it["from"].(*types.AttributeValueMemberM); ok {
					from = m.Value
				}
			case strings.HasPrefix(sk.Value, typesSKPre):
				out = append(out, strings.TrimPrefix(sk.Value, typesSKPre))
			}
		}
	}
	return out, scanned, from, nil
}

// TypeLister reads leases type by type (Store, fakes.LeaseStore).
type TypeLister interface {
	Types(ctx context.Context) ([]string, error)
	ListType(ctx context.Context, typ string) ([]Lease, error)
}

// ListTypes returns the leases of the types given (those of the config, say) and of every type in
// the registry: a Query per type, at most concurrency at once, never a Scan. A type that cannot be
// read is reported in the error and the others are still returned.
func ListTypes(ctx context.Context, l TypeLister, types []string, concurrency int) ([]Lease, error) {
	var errs []error
	want := map[string]bool{}
	for _, t := range types {
		want[t] = true
	}
	registered, err := l.Types(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, t := range registered {
		want[t] = true
	}
	var (
		mu  sync.Mutex
		out []Lease
		wg  sync.WaitGroup
		sem = make(chan struct{}, max(concurrency, 1))
	)
	for _, t := range slices.Sorted(maps.Keys(want)) {
		wg.Add(1)
		sem <- struct{}{}
		go func(t string) {
			defer func() { <-sem; wg.Done() }()
			ls, err := l.ListType(ctx, t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out = append(out, ls...)
		}(t)
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].Lane < out[j].Lane
	})
	return out, errors.Join(errs...)
}

// ReadOnly returns s as a TypeLister that never writes: its Types reads the registry and, while the
// registry is not complete (no sweep has run since the upgrade), the types of a scan. For the
// command line, whose reads must not need write permissions.
func ReadOnly(s *Store) TypeLister { return readOnly{s} }

type readOnly struct{ *Store }

func (r readOnly) Types(ctx context.Context) ([]string, error) {
	out, scanned, _, err := r.readRegistry(ctx)
	if err != nil || scanned {
		return out, err
	}
	all, err := r.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the types of existing leases: %w", err)
	}
	seen := map[string]bool{}
	for _, t := range out {
		seen[t] = true
	}
	for _, l := range all {
		if !seen[l.Type] {
			seen[l.Type] = true
			out = append(out, l.Type)
		}
	}
	return out, nil
}
