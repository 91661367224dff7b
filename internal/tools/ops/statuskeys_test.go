package ops

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// waitRoom is a wait room holding parked groups, written through waitroom.Store as the starter
// parks them; it counts the types read.
type waitRoom struct {
	*waitroom.Store
	mu   sync.Mutex
	read []string
}

func parkedTable(t *testing.T, ws ...waitroom.Waiter) *waitRoom {
	t.Helper()
	store := waitroom.NewStore(fakes.NewDynamoDB("table"), "table")
	for _, w := range ws {
		if err := store.Park(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	return &waitRoom{Store: store}
}

func (r *waitRoom) List(ctx context.Context, typ string) ([]waitroom.Waiter, error) {
	r.mu.Lock()
	r.read = append(r.read, typ)
	r.mu.Unlock()
	return r.Store.List(ctx, typ)
}

// status shows, per type with keyed work, the keys that hold lanes (with their cap) and the keys
// whose waiting group is parked (for a lane, or at their cap), from the leases and the parked
// records alone.
func TestStatusKeys(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	held := func(typ string, ln int, key string) lease.Lease {
		return lease.Lease{Type: typ, Lane: ln, JobID: typ + "-" + string(rune('a'+ln)), JobKey: key, Attempt: 1, Status: lease.Starting, StartedAt: now.Add(-time.Minute)}
	}
	parked := func(typ, group, key, head string, ago time.Duration, atCap bool) waitroom.Waiter {
		return waitroom.Waiter{Type: typ, Group: group, MessageID: "m-" + head, ReceiptHandle: "h-" + head, JobID: head, Key: key, AtKeyCap: atCap,
			SubmittedAt: now.Add(-time.Hour), ParkedAt: now.Add(-ago)}
	}
	leases := leaseTable(t,
		// llm: acme at its own cap of 3, globex at the key limit of 2, the default key under it.
		held("llm", 1, "acme"), held("llm", 2, "acme"), held("llm", 3, "acme"),
		held("llm", 4, "globex"), held("llm", 5, "globex"), held("llm", 6, ""),
		// chat caps no key: a key and the default key.
		held("chat", 1, "t1"), held("chat", 2, ""),
		// payments has no key at all.
		held("payments", 1, ""),
	)
	room := parkedTable(t,
		parked("llm", "llm#globex", "globex", "g-9", 2*time.Minute+3*time.Second, true),
		parked("llm", "llm#initech", "initech", "i-1", 45*time.Second, false),
		parked("llm", "llm#umbrella", "umbrella", "u-1", 5*time.Second, false),
		parked("chat", "chat-w0", "", "c-1", 30*time.Second, false),
		parked("chat", "chat-w1", "", "c-2", 90*time.Second, false),
		parked("chat", "chat#t2", "t2", "c-3", 10*time.Second, false),
		parked("payments", "payments-w0", "", "p-1", 5*time.Second, false),
	)
	ovs := staticStore{
		// configured random: runs first-free for its key caps, so its parked groups are read.
		{Type: "llm", Limit: 6, Strategy: "random", KeyLimit: 2, KeyLimits: map[string]int{"acme": 3}},
		{Type: "chat", Limit: 4},
		{Type: "reports", Strategy: "random"},
	}
	st, err := StatusReader{
		SQS: noQueues, Leases: leases, Parked: room, Defaults: defaults(), Overrides: ovs, Now: func() time.Time { return now },
	}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(room.read)
	if want := []string{"chat", "llm", "payments"}; !slices.Equal(room.read, want) {
		t.Errorf("parked groups read of %v, want %v (first-free types only: random ones never park)", room.read, want)
	}
	byType := map[string]TypeStatus{}
	for _, ts := range st.Types {
		byType[ts.Type] = ts
	}
	tests := []struct {
		typ  string
		want *KeysStatus
	}{
		{typ: "llm", want: &KeysStatus{
			KeyLimit: 2, OwnCaps: 1, AtCap: 2,
			Running: []KeyRunning{{Key: "acme", Running: 3, Cap: 3, AtCap: true}, {Key: "globex", Running: 2, Cap: 2, AtCap: true}, {Key: "", Running: 1, Cap: 2}},
			Waiting: []KeyWaiting{
				{Key: "globex", Groups: 1, HeadJobID: "g-9", ParkedAt: now.Add(-123 * time.Second), AgeSeconds: 123, AtCap: true},
				{Key: "initech", Groups: 1, HeadJobID: "i-1", ParkedAt: now.Add(-45 * time.Second), AgeSeconds: 45},
				{Key: "umbrella", Groups: 1, HeadJobID: "u-1", ParkedAt: now.Add(-5 * time.Second), AgeSeconds: 5},
			},
		}},
		{typ: "chat", want: &KeysStatus{
			Running: []KeyRunning{{Key: "", Running: 1}, {Key: "t1", Running: 1}},
			Waiting: []KeyWaiting{
				{Key: "", Groups: 2, HeadJobID: "c-2", ParkedAt: now.Add(-90 * time.Second), AgeSeconds: 90},
				{Key: "t2", Groups: 1, HeadJobID: "c-3", ParkedAt: now.Add(-10 * time.Second), AgeSeconds: 10},
			},
		}},
		// No key caps and no keyed job: no keys view, whatever waits.
		{typ: "payments"},
		{typ: "reports"},
	}
	for _, tt := range tests {
		got := byType[tt.typ].Keys
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s keys = %+v, want %+v", tt.typ, got, tt.want)
		}
	}
	if l := byType["llm"].Leases[0]; l.Key != "acme" {
		t.Errorf("llm lane 1 = %+v, want acme's lease", l)
	}

	var b strings.Builder
	if err := st.WriteTableKeys(&b, 2); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"HELD  FREE  KEYS                            OLDEST LEASE\n",
		"llm       6      override  first-free  step     6     0     3 running, 2 at cap, 3 waiting  llm-b (lane 1, attempt 1, started, 1m00s)\n",
		"chat      4      override  first-free  step     2     2     2 running, 2 waiting            chat-b",
		"payments  2      default   first-free  step     1     1     -                               payments-b",
		"reports   5      default   random      step     0     5     -                               -\n",
		"Keys of llm (cap 2 a key, 1 key with its own cap): 3 keys running, 2 at its cap; 3 keys waiting.\n" +
			"  KEY     RUNNING  CAP  \n" +
			"  acme    3        3    at its cap\n" +
			"  globex  2        2    at its cap\n" +
			"  and 1 key more, running 1\n" +
			"  KEY WAITING  PARKED FOR  WAITS FOR\n" +
			"  globex       2m03s       its key to fall under its cap (head job g-9)\n" +
			"  initech      45s         a free lane (head job i-1)\n" +
			"  and 1 key more waiting\n",
		"Keys of chat (keys not capped): 2 keys running; 2 keys waiting.\n" +
			"  KEY        RUNNING  CAP  \n" +
			"  (default)  1        -    \n" +
			"  t1         1        -    \n" +
			"  KEY WAITING  PARKED FOR  WAITS FOR\n" +
			"  (default)    1m30s       a free lane (head job c-2, 2 groups parked)\n" +
			"  t2           10s         a free lane (head job c-3)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteTableKeys(2) lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Keys of payments") || strings.Contains(out, "Keys of reports") {
		t.Errorf("WriteTableKeys() shows keys of a type without keyed work:\n%s", out)
	}
	// --keys 0: the KEYS column only.
	b.Reset()
	if err := st.WriteTableKeys(&b, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "3 running, 2 at cap, 3 waiting") || strings.Contains(b.String(), "Keys of") {
		t.Errorf("WriteTableKeys(0) = \n%s\nwant the KEYS column and no keys' sections", b.String())
	}
}

// A key that runs more jobs than its cap (lowered while they ran) is over its cap, not at it.
func TestStatusKeysOverCap(t *testing.T) {
	var held []lease.Lease
	for ln := 1; ln <= 6; ln++ {
		held = append(held, lease.Lease{Type: "llm", Lane: ln, JobID: fmt.Sprint("a-", ln), JobKey: "acme", Attempt: 1, Status: lease.Starting})
	}
	held = append(held,
		lease.Lease{Type: "llm", Lane: 7, JobID: "g-1", JobKey: "globex", Attempt: 1, Status: lease.Starting},
		lease.Lease{Type: "llm", Lane: 8, JobID: "g-2", JobKey: "globex", Attempt: 1, Status: lease.Starting},
		lease.Lease{Type: "llm", Lane: 9, JobID: "u-1", JobKey: "umbrella", Attempt: 1, Status: lease.Starting})
	st, err := StatusReader{
		SQS: noQueues, Leases: leaseTable(t, held...), Parked: parkedTable(t), Defaults: defaults(),
		Overrides: staticStore{{Type: "llm", Limit: 10, KeyLimit: 2, KeyLimits: map[string]int{"acme": 3}}},
	}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var llm TypeStatus
	for _, ts := range st.Types {
		if ts.Type == "llm" {
			llm = ts
		}
	}
	want := &KeysStatus{KeyLimit: 2, OwnCaps: 1, AtCap: 2, OverCap: 1, Running: []KeyRunning{
		{Key: "acme", Running: 6, Cap: 3, AtCap: true, OverCap: true}, {Key: "globex", Running: 2, Cap: 2, AtCap: true}, {Key: "umbrella", Running: 1, Cap: 2},
	}, Waiting: []KeyWaiting{}}
	if !reflect.DeepEqual(llm.Keys, want) {
		t.Errorf("llm keys = %+v, want %+v", llm.Keys, want)
	}
	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"3 running, 1 at cap, 1 over cap, 0 waiting",
		"Keys of llm (cap 2 a key, 1 key with its own cap): 3 keys running, 1 at its cap, 1 over it (lowered); 0 keys waiting.\n",
		"  acme      6        3    6/3 over cap (lowered)\n",
		"  globex    2        2    at its cap\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
}

// A type whose key caps come from TypeKeyLimits has a keys view even before any keyed job ran: the
// default key is capped too.
func TestStatusKeysFromDefaults(t *testing.T) {
	d := defaults()
	d.KeyLimits = map[string]int{"reports": 2, "payments": 1}
	st, err := StatusReader{
		SQS: noQueues, Leases: leaseTable(t, lease.Lease{Type: "reports", Lane: 4, JobID: "r-1", Status: lease.Bound}),
		Parked: parkedTable(t), Defaults: d, Overrides: staticStore(nil),
	}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var reports TypeStatus
	for _, ts := range st.Types {
		if ts.Type == "reports" {
			reports = ts
		}
	}
	want := &KeysStatus{KeyLimit: 2, Running: []KeyRunning{{Key: "", Running: 1, Cap: 2}}, Waiting: []KeyWaiting{}}
	if !reflect.DeepEqual(reports.Keys, want) {
		t.Errorf("reports keys = %+v, want %+v", reports.Keys, want)
	}
	// payments caps keys and has no work: its KEYS column says so, and it gets no section.
	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0 running, 0 at cap, 0 waiting", "1 running, 0 at cap, 0 waiting", "Keys of reports (cap 2 a key): 1 key running, 0 at its cap; 0 keys waiting.\n  KEY        RUNNING  CAP  \n  (default)  1        2    \n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "Keys of payments") {
		t.Errorf("WriteTable() has a keys section for a type with no keyed work running or waiting:\n%s", b.String())
	}
}
