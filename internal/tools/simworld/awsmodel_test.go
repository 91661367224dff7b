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

// DynamoDB throttles each partition key at 1,000 write units and 3,000 read units a second, reads
// and writes apart, with no burst past one second's units; a transaction takes its units from
// every key it writes, or from none.
func TestPartitionBuckets(t *testing.T) {
	w := func(n float64, pks ...string) *units { return &units{n: n, pks: pks} }
	r := func(n float64, pks ...string) *units { return &units{read: true, n: n, pks: pks} }
	type req struct {
		at time.Duration
		u  *units
	}
	cases := []struct {
		name string
		reqs []req
		want []string // per request, the key refused ("" taken)
	}{
		{"a second's write units, then refused",
			[]req{{0, w(6, "A")}, {0, w(4, "A")}, {0, w(1, "A")}},
			[]string{"", "", "write A"}},
		{"refilled after a tenth of a second by a tenth",
			[]req{{0, w(10, "A")}, {100 * time.Millisecond, w(1, "A")}, {100 * time.Millisecond, w(1, "A")}},
			[]string{"", "", "write A"}},
		{"no burst past one second after a quiet minute",
			[]req{{0, w(1, "A")}, {time.Minute, w(10, "A")}, {time.Minute, w(1, "A")}},
			[]string{"", "", "write A"}},
		{"keys apart",
			[]req{{0, w(10, "A")}, {0, w(10, "B")}, {0, w(1, "A")}},
			[]string{"", "", "write A"}},
		{"a transaction refused on one key takes nothing from the other",
			[]req{{0, w(10, "B")}, {0, w(2, "A", "B")}, {0, w(10, "A")}},
			[]string{"", "write B", ""}},
		{"reads apart from writes, three times as many",
			[]req{{0, w(10, "A")}, {0, r(30, "A")}, {0, r(1, "A")}, {0, w(1, "A")}},
			[]string{"", "", "read A", "write A"}},
		{"a request above the burst passes on a full bucket and leaves it in debt",
			[]req{{0, w(15, "A")}, {400 * time.Millisecond, w(1, "A")}, {600 * time.Millisecond, w(1, "A")}},
			[]string{"", "write A", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAWSState(AWSModel{Scale: 100, Enforce: true}) // 10 write, 30 read units a second
			for i, q := range c.reqs {
				if got := a.partitionTake(epoch.Add(q.at), q.u); got != c.want[i] {
					t.Errorf("request %d at %s: refused on %q, want %q", i, q.at, got, c.want[i])
				}
			}
		})
	}
}

// A Query's page is charged as the page the same query would read at AWS's scale: a shape divided by
// the scale holds that many times fewer items in every collection the handlers query (a type's
// leases, a pool's slots, parked groups), against quotas divided by the same factor.
func TestQueryReadUnitsAtAWSScale(t *testing.T) {
	for _, c := range []struct {
		name  string
		size  int
		scale float64
		want  float64
	}{
		{"an empty page costs one unit", 0, 100, 1},
		{"4 KB at AWS's own scale is one unit", 4096, 1, 1},
		{"just past 4 KB is two", 4097, 1, 2},
		{"50 leases of 1 KB at scale 100 are read as 5,000", 50 * 1024, 100, 1250},
		{"a scale below 1 counts as 1", 8192, 0, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := queryReadUnits(c.size, c.scale); got != c.want {
				t.Errorf("queryReadUnits(%d, %v) = %v, want %v", c.size, c.scale, got, c.want)
			}
		})
	}
}
