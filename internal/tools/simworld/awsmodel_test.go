package simworld

import (
	"testing"
	"time"
)

// The Step Functions quotas are token buckets: a burst at once, then the refill rate, never more
// than the burst.
func TestBucketBurstThenRefill(t *testing.T) {
	cases := []struct {
		name    string
		calls   int           // calls at the start
		later   time.Duration // then calls this much later
		more    int
		wantOK  int // of the later calls, how many are taken
		refused int
	}{
		{"the burst at once, the next refused", 13, 0, 1, 0, 1},
		{"a token back after 1/refill", 13, 334 * time.Millisecond, 1, 1, 0},
		{"none before 1/refill", 13, 300 * time.Millisecond, 1, 0, 1},
		{"a full minute refills only the burst", 13, time.Minute, 20, 13, 7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBucket(13, 3)
			for range c.calls {
				if !b.take(epoch) {
					t.Fatalf("a call within the burst was refused")
				}
			}
			ok := 0
			for range c.more {
				if b.take(epoch.Add(c.later)) {
					ok++
				}
			}
			if ok != c.wantOK || b.Refused != c.refused {
				t.Errorf("later calls taken %d, refused %d; want %d, %d", ok, b.Refused, c.wantOK, c.refused)
			}
		})
	}
}
