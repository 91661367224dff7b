// Package lane chooses which of a type's lanes (1..limit) a job waits in. Each lane is one SQS FIFO
// message group, so a type's lanes are its concurrency limit.
package lane

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// Chooser picks a lane in 1..limit for a job.
type Chooser interface {
	Choose(ctx context.Context, j job.Job, limit int) (int, error)
}

// Hashed spreads jobs uniformly over the lanes like a random choice, but derives the lane from the
// job's type, id and redrive generation: a job sent twice lands in the same lane, where SQS
// deduplicates it (the lanes queue deduplicates per message group in high-throughput mode).
type Hashed struct{}

// Choose returns 1 + hash(type, id, attempts, redrive) mod limit.
func (Hashed) Choose(_ context.Context, j job.Job, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("type %s has limit %d: no lane to choose", j.Type, limit)
	}
	// Attempts differ when a job moves lanes; mixing them in sends a moved job to a fresh lane choice.
	return 1 + int(jobHash(j, true)%uint64(limit)), nil
}

// jobHash hashes a job's type, id and redrive generation (and its attempts, if asked): a redriven job
// is a new run, whose choice owes nothing to its earlier run's. Generation 0 hashes as it did before
// generations were part of it.
func jobHash(j job.Job, attempts bool) uint64 {
	h := fnv.New64a()
	h.Write([]byte(j.Type))
	h.Write([]byte{0})
	h.Write([]byte(j.ID))
	if attempts && j.Attempts > 0 {
		fmt.Fprintf(h, "#%d", j.Attempts)
	}
	if j.Redrive > 0 {
		fmt.Fprintf(h, "~g%d", j.Redrive)
	}
	return mix(h.Sum64())
}

// mix is MurmurHash3's 64-bit finalizer. FNV-1a's value alone is uneven modulo a few hundred lanes
// for ids that differ only in their last characters (order-1, order-2, ...); mixing spreads them.
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Lane strategies: how a type's jobs reach its lanes (LANE_STRATEGY, or a type's live override).
const (
	// FirstFree keeps each job in one of its type's waiting groups until a lane is free, then binds
	// it to that lane by writing the lane's lease (status bound): no job waits behind another while
	// a lane is idle. The starter binds; a release wakes a parked waiting group
	// (internal/lambda/waitroom).
	FirstFree = "first-free"
	// Random spreads jobs over the lanes like a random choice (Hashed): no state beyond the leases,
	// and a job may wait behind a long job while other lanes sit idle.
	Random = "random"
	// LeastLoaded is a retired strategy: it kept per-lane counters in DynamoDB. A type still
	// configured with it (a live item or the LaneStrategy parameter) runs as FirstFree.
	LeastLoaded = "least-loaded"
)

// DefaultStrategy is the strategy of a deployment that names none: first-free, whose p99 wait is
// an ideal semaphore's (make bench).
const DefaultStrategy = FirstFree

// Strategies lists the strategy names that can be chosen, the default first.
var Strategies = []string{FirstFree, Random}

// ParseStrategy reads a configured strategy name; "" is DefaultStrategy. The retired least-loaded
// reads as first-free, so a type configured before it was retired keeps running.
func ParseStrategy(name string) (string, error) {
	switch name {
	case "":
		return DefaultStrategy, nil
	case Random, FirstFree:
		return name, nil
	case LeastLoaded:
		return FirstFree, nil
	case "hashed":
		return Random, nil
	}
	return "", fmt.Errorf("unknown lane strategy %q (known: %s, %s)", name, FirstFree, Random)
}

// ErrRetired is returned by CheckChoosable for a strategy that can no longer be chosen.
var ErrRetired = fmt.Errorf("lane strategy %s is retired: it kept a counter per lane that a lost update "+
	"silently took a lane away from; %s waits less (p99 an ideal semaphore's against 1.6x-5.4x) with no counters, "+
	"and types still configured %s run as %s", LeastLoaded, FirstFree, LeastLoaded, FirstFree)

// CheckChoosable checks a strategy name someone is about to write (a CLI flag): like ParseStrategy,
// but the retired least-loaded is refused with ErrRetired rather than read as first-free.
func CheckChoosable(name string) (string, error) {
	if name == LeastLoaded {
		return "", ErrRetired
	}
	return ParseStrategy(name)
}

// New returns the chooser of the random strategy; first-free has none (the starter binds).
func New(name string) (Chooser, error) {
	s, err := ParseStrategy(name)
	if err != nil {
		return nil, err
	}
	if s != Random {
		return nil, fmt.Errorf("lane strategy %s has no chooser: the starter binds its jobs to free lanes", s)
	}
	return Hashed{}, nil
}

// JobsPerWaitingGroup is how many lanes one waiting group feeds: a type of limit N waits in
// ceil(N/JobsPerWaitingGroup) groups, so its binds are not serialised through one group (FIFO
// serves one batch of a group at a time, at most 10 messages).
const JobsPerWaitingGroup = 10

// WaitingGroups is how many waiting groups a type of limit limit has (at least 1).
func WaitingGroups(limit int) int { return max(1, (limit+JobsPerWaitingGroup-1)/JobsPerWaitingGroup) }

// WaitingGroup returns which of a type's WaitingGroups(limit) groups a job waits in (0-based): a
// hash of its type, id and redrive generation, so a job routed twice lands in the same group, where
// SQS deduplicates it.
func WaitingGroup(j job.Job, limit int) int {
	return int(jobHash(j, false) % uint64(WaitingGroups(limit)))
}

// Spread returns the lanes 1..limit in an order that starts at a lane chosen by a hash of the job and
// wraps around, so concurrent binders try different free lanes first.
func Spread(j job.Job, limit int) []int {
	if limit < 1 {
		return nil
	}
	first := int(jobHash(j, true) % uint64(limit))
	out := make([]int, limit)
	for i := range out {
		out[i] = 1 + (first+i)%limit
	}
	return out
}
