package ops

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// Status shows each pool's cap and, per member type, its share, its jobs running and its waiting
// groups parked at the pool's cap; a deployment without pools shows no pool table.
func TestStatusPools(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	held := func(typ string, ln int) lease.Lease {
		return lease.Lease{Type: typ, Lane: ln, JobID: typ + "-" + string(rune('a'+ln)), Attempt: 1, Status: lease.Starting, StartedAt: now.Add(-time.Minute)}
	}
	leases := leaseTable(t, held("summarize", 1), held("summarize", 2), held("summarize", 3), held("classify", 1))
	room := parkedTable(t,
		waitroom.Waiter{Type: "classify", Group: "classify-0", MessageID: "m-c", ReceiptHandle: "h-c", JobID: "c-9", AtPool: "llm", SubmittedAt: now, ParkedAt: now},
		waitroom.Waiter{Type: "summarize", Group: "summarize-0", MessageID: "m-s", ReceiptHandle: "h-s", JobID: "s-9", SubmittedAt: now, ParkedAt: now},
	)
	d := defaults()
	d.Limits = map[string]int{"summarize": 5, "classify": 5, "payments": 2}
	d.Pools = map[string]int{"llm": 4}
	d.TypePools = map[string][]string{"summarize": {"llm"}, "classify": {"llm"}}
	d.Shares = map[string]int{"summarize": 3}
	st, err := StatusReader{SQS: noQueues, Leases: leases, Parked: room, Defaults: d, Overrides: staticStore{{Pool: "llm", Limit: 5}},
		Now: func() time.Time { return now }}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []PoolStatus{{Name: "llm", Cap: 5, Running: 4, Members: []PoolMember{
		{Type: "classify", Share: 1, Running: 1, Parked: 1},
		{Type: "summarize", Share: 3, Running: 3},
	}}}
	if !reflect.DeepEqual(st.Pools, want) {
		t.Errorf("pools = %+v, want %+v", st.Pools, want)
	}
	var out bytes.Buffer
	if err := st.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "classify (1) 1, 1 parked; summarize (3) 3, 0 parked") {
		t.Errorf("table:\n%s\nwant the pool's members with their shares, running and parked", out.String())
	}
	st.Pools = nil
	out.Reset()
	if err := st.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "POOL") {
		t.Errorf("table without pools:\n%s\nwant no pool table", out.String())
	}
}
