package fakes

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
)

// LeaseStore is an in-memory lease.Store: Put with prev nil needs a free lane, Put with prev and
// Delete need the lane to hold exactly prev's version; both fail with an error wrapping
// lease.ErrConflict otherwise, and Put bumps the version and stamps UpdatedAt as lease.Store does.
type LeaseStore struct {
	// Now stamps UpdatedAt on writes (time.Now when nil).
	Now func() time.Time

	// Hooks run before an operation is applied, without the store's lock held, so they may change
	// the store (Update, Set, Remove) to simulate a racing writer. A non-nil error is returned as the
	// operation's error and the operation is not applied.
	BeforeGet    func(k lease.Key) error
	BeforePut    func(next lease.Lease, prev *lease.Lease) error
	BeforeDelete func(prev lease.Lease) error
	BeforeAll    func() error
	// BeforeListType runs before ListType, as the other hooks do.
	BeforeListType func(typ string) error

	mu    sync.Mutex
	items map[lease.Key]lease.Lease
	// last is the highest version each lane's leases have had: a new lease of a lane starts above
	// it, so successive leases never share a version (lease.Store draws it at random).
	last    map[lease.Key]int64
	types   map[string]bool // the type registry: every type that has held a lease (lease.Store.Types)
	gets    int
	writes  int
	deletes int
}

// NewLeaseStore returns an empty store stamping writes with now (time.Now when nil).
func NewLeaseStore(now func() time.Time) *LeaseStore {
	return &LeaseStore{Now: now, items: map[lease.Key]lease.Lease{}, types: map[string]bool{}, last: map[lease.Key]int64{}}
}

func (s *LeaseStore) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

// Get returns a copy of the lane's lease, or nil when the lane is free.
func (s *LeaseStore) Get(_ context.Context, k lease.Key) (*lease.Lease, error) {
	if s.BeforeGet != nil {
		if err := s.BeforeGet(k); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	l, ok := s.items[k]
	if !ok {
		return nil, nil
	}
	l = lease.AsRead(l)
	return &l, nil
}

// Put writes next in place of prev (prev nil: the lane must be free).
func (s *LeaseStore) Put(_ context.Context, next lease.Lease, prev *lease.Lease) (lease.Lease, error) {
	if s.BeforePut != nil {
		var p *lease.Lease
		if prev != nil {
			c := *prev
			p = &c
		}
		if err := s.BeforePut(next, p); err != nil {
			return lease.Lease{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next.UpdatedAt = s.now()
	cur, exists := s.items[next.Key()]
	if prev == nil {
		if exists {
			return lease.Lease{}, fmt.Errorf("write lease of lane %s: %w", next.Key(), lease.ErrConflict)
		}
		next.Version = s.last[next.Key()] + 1
		s.types[next.Type] = true
	} else {
		if prev.Key() != next.Key() {
			return lease.Lease{}, fmt.Errorf("lease of lane %s cannot replace lane %s", next.Key(), prev.Key())
		}
		if !exists || cur.Version != prev.Version || cur.JobID != prev.JobID {
			return lease.Lease{}, fmt.Errorf("write lease of lane %s: %w", next.Key(), lease.ErrConflict)
		}
		next.Version = prev.Version + 1
	}
	s.items[next.Key()] = next
	s.last[next.Key()] = max(s.last[next.Key()], next.Version)
	s.writes++
	return next, nil
}

// Delete removes prev if the lane still holds exactly its version of its job's lease.
func (s *LeaseStore) Delete(_ context.Context, prev lease.Lease) error {
	if s.BeforeDelete != nil {
		if err := s.BeforeDelete(prev); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.items[prev.Key()]
	if !exists || cur.Version != prev.Version || cur.JobID != prev.JobID {
		return fmt.Errorf("delete lease of lane %s: %w", prev.Key(), lease.ErrConflict)
	}
	delete(s.items, prev.Key())
	s.deletes++
	return nil
}

// All returns every lease, ordered by type and lane.
func (s *LeaseStore) All(_ context.Context) ([]lease.Lease, error) {
	if s.BeforeAll != nil {
		if err := s.BeforeAll(); err != nil {
			return nil, err
		}
	}
	var out []lease.Lease
	for _, l := range s.Leases() {
		out = append(out, lease.AsRead(l))
	}
	return out, nil
}

// Types returns every type that has held a lease (written by Put or Set), sorted, as
// lease.Store.Types does.
func (s *LeaseStore) Types(_ context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.types))
	for t := range s.types {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

// RegisterType adds typ to the types that have held a lease, as lease.Store.RegisterType does.
func (s *LeaseStore) RegisterType(_ context.Context, typ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.types == nil {
		s.types = map[string]bool{}
	}
	s.types[typ] = true
	return nil
}

// ListType returns the leases of one type in lane order.
func (s *LeaseStore) ListType(_ context.Context, typ string) ([]lease.Lease, error) {
	if s.BeforeListType != nil {
		if err := s.BeforeListType(typ); err != nil {
			return nil, err
		}
	}
	var out []lease.Lease
	for _, l := range s.Leases() {
		if l.Type == typ {
			out = append(out, lease.AsRead(l))
		}
	}
	return out, nil
}

// Leases returns a snapshot of every lease, ordered by type and lane.
func (s *LeaseStore) Leases() []lease.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]lease.Lease, 0, len(s.items))
	for _, l := range s.items {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].Lane < out[j].Lane
	})
	return out
}

// Lease returns the lane's lease and whether there is one.
func (s *LeaseStore) Lease(k lease.Key) (lease.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.items[k]
	return l, ok
}

// Set stores l unconditionally, as it is: a version of 0 becomes 1 and a zero UpdatedAt the clock's
// time. It seeds a test's table.
func (s *LeaseStore) Set(l lease.Lease) lease.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Version == 0 {
		l.Version = 1
	}
	if l.UpdatedAt.IsZero() {
		l.UpdatedAt = s.now()
	}
	s.items[l.Key()] = l
	s.last[l.Key()] = max(s.last[l.Key()], l.Version)
	s.types[l.Type] = true
	return l
}

// Update changes the lane's lease as another writer would (version + 1, UpdatedAt now) and returns
// the lease as written; ok is false when the lane is free.
func (s *LeaseStore) Update(k lease.Key, change func(*lease.Lease)) (lease.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.items[k]
	if !ok {
		return lease.Lease{}, false
	}
	change(&l)
	l.Version++
	l.UpdatedAt = s.now()
	s.items[k] = l
	s.last[k] = max(s.last[k], l.Version)
	return l, true
}

// Remove deletes the lane's lease unconditionally.
func (s *LeaseStore) Remove(k lease.Key) {
	s.mu.Lock()
	delete(s.items, k)
	s.mu.Unlock()
}

// Counts returns how many Get calls reached the store and how many Puts and Deletes were applied.
func (s *LeaseStore) Counts() (gets, writes, deletes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets, s.writes, s.deletes
}
