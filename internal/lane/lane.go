// Package lane chooses which of a type's lanes (1..limit) a job waits in. Each lane is one SQS FIFO
// message group, so a type's lanes are its concurrency limit.
package lane

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/sfnlimit/sfnlimit/internal/job"
)

// Chooser picks a lane in 1..limit for a job.
type Chooser interface {
	Choose(ctx context.Context, j job.Job, limit int) (int, error)
}

// Hashed spreads jobs uniformly over the lanes like a random choice, but derives the lane from the
// job's type and id: a job sent twice lands in the same lane, where SQS deduplicates it (the lanes
// queue deduplicates per message group in high-throughput mode).
type Hashed struct{}

// Choose returns 1 + hash(type, id) mod limit.
func (Hashed) Choose(_ context.Context, j job.Job, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("type %s has limit %d: no lane to choose", j.Type, limit)
	}
	h := fnv.New64a()
	h.Write([]byte(j.Type))
	h.Write([]byte{0})
	h.Write([]byte(j.ID))
	// Attempts differ when a job moves lanes; mixing them in sends a moved job to a fresh lane choice.
	if j.Attempts > 0 {
		fmt.Fprintf(h, "#%d", j.Attempts)
	}
	return 1 + int(mix(h.Sum64())%uint64(limit)), nil
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

// New returns the chooser named by a LANE_STRATEGY value.
func New(name string) (Chooser, error) {
	switch name {
	case "", "random", "hashed":
		return Hashed{}, nil
	}
	return nil, fmt.Errorf("unknown lane strategy %q (known: random)", name)
}
