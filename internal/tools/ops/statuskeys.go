package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// parkedLister reads a type's parked waiting groups (waitroom.Store: one Query of WAIT#{type}).
type parkedLister interface {
	List(ctx context.Context, typ string) ([]waitroom.Waiter, error)
}

// KeysShown is how many keys running and how many waiting status lists per type by default.
const KeysShown = 5

// DefaultKeyName is how people see the default key, that of jobs without a key.
const DefaultKeyName = "(default)"

// KeysStatus is a type's concurrency keys as its leases and parked waiting groups show them.
type KeysStatus struct {
	// KeyLimit is the cap of every key (0: none); OwnCaps counts the keys with their own cap.
	KeyLimit int `json:"keyLimit"`
	OwnCaps  int `json:"ownCaps"`
	// Running is every key that holds a lane, most lanes first.
	Running []KeyRunning `json:"running"`
	// Waiting is every key with a parked waiting group, the one parked longest first.
	Waiting []KeyWaiting `json:"waiting"`
	// AtCap counts the keys whose running jobs reach their cap (0 when the type caps no key), and
	// OverCap those of them above it: their cap was lowered while they ran.
	AtCap   int `json:"atCap"`
	OverCap int `json:"overCap,omitempty"`
}

// KeyRunning is a key that holds lanes.
type KeyRunning struct {
	// Key is "" for the default key (jobs without one).
	Key     string `json:"key"`
	Running int    `json:"running"`
	// Cap is the key's cap (config.TypeConfig.KeyCap: its own, else the key limit, never above the
	// type's limit); 0 when the type caps no key.
	Cap   int  `json:"cap,omitempty"`
	AtCap bool `json:"atCap,omitempty"`
	// OverCap says it runs more than its cap (which was lowered while they ran): AtCap too.
	OverCap bool `json:"overCap,omitempty"`
}

// KeyWaiting is a key whose jobs wait in a parked waiting group: its head is in flight, holding
// the group, until a release or the sweep wakes it (or its park passes).
type KeyWaiting struct {
	Key string `json:"key"`
	// Groups counts the key's parked groups: one for a key, several only for the default key of a
	// type that caps no key (its jobs spread over several waiting groups).
	Groups int `json:"groups"`
	// HeadJobID is the head job of the group parked longest, and ParkedAt when it parked.
	HeadJobID  string    `json:"headJobId"`
	ParkedAt   time.Time `json:"parkedAt"`
	AgeSeconds float64   `json:"ageSeconds"`
	// AtCap says the head parked because its key ran at its cap, not because every lane was taken.
	AtCap bool `json:"atCap"`
	// Paused says the head parked because its type was paused: it waits for the resume.
	Paused bool `json:"paused,omitempty"`
}

// capsKeys reports whether the type caps any key.
func (k *KeysStatus) capsKeys() bool { return k.KeyLimit > 0 || k.OwnCaps > 0 }

// readParked reads the parked groups of the types given, a Query per type, at most concurrency at
// once. Only first-free types park, so the others are not read.
func readParked(ctx context.Context, p parkedLister, types []string, concurrency int) (map[string][]waitroom.Waiter, error) {
	var (
		mu   sync.Mutex
		errs []error
		out  = map[string][]waitroom.Waiter{}
		wg   sync.WaitGroup
		sem  = make(chan struct{}, max(concurrency, 1))
	)
	for _, t := range types {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ws, err := p.List(ctx, t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out[t] = ws
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// parking lists the types whose jobs may park: those that run first-free, and paused ones (a
// paused type's jobs wait in its waiting groups, parked until the resume, whatever its strategy).
func parking(cfgs []config.TypeConfig) []string {
	var out []string
	for _, c := range cfgs {
		if c.Strategy == lane.FirstFree || c.Paused() {
			out = append(out, c.Type)
		}
	}
	return out
}

// keysOf builds a type's keys view from its leases and parked groups; c is its configuration (nil
// for a type with no limit). It is nil when the type has no keyed work: no key caps, and no lease
// or parked group of a job with a key.
func keysOf(c *config.TypeConfig, leases []lease.Lease, parked []waitroom.Waiter, at time.Time) *KeysStatus {
	caps := c != nil && c.CapsKeys()
	keyed := caps
	for _, l := range leases {
		keyed = keyed || l.JobKey != ""
	}
	for _, w := range parked {
		keyed = keyed || w.Key != ""
	}
	if !keyed {
		return nil
	}
	k := &KeysStatus{Running: []KeyRunning{}, Waiting: []KeyWaiting{}}
	if c != nil {
		k.KeyLimit, k.OwnCaps = c.KeyLimit, len(c.KeyLimits)
	}
	running := map[string]int{}
	for _, l := range leases {
		running[l.JobKey]++
	}
	for key, n := range running {
		r := KeyRunning{Key: key, Running: n}
		if caps {
			r.Cap = c.KeyCap(key)
			// As the starter counts it (bindFree): a key with this many leases binds no more.
			r.AtCap, r.OverCap = n >= r.Cap, n > r.Cap
		}
		if r.AtCap {
			k.AtCap++
		}
		if r.OverCap {
			k.OverCap++
		}
		k.Running = append(k.Running, r)
	}
	sort.Slice(k.Running, func(i, j int) bool {
		a, b := k.Running[i], k.Running[j]
		if a.Running != b.Running {
			return a.Running > b.Running
		}
		return a.Key < b.Key
	})
	waiting := map[string]*KeyWaiting{}
	for _, w := range parked {
		x := waiting[w.Key]
		if x == nil {
			x = &KeyWaiting{Key: w.Key}
			waiting[w.Key] = x
		}
		x.Groups++
		if x.Groups == 1 || w.ParkedAt.Before(x.ParkedAt) {
			x.HeadJobID, x.ParkedAt, x.AtCap, x.Paused = w.JobID, w.ParkedAt, w.AtKeyCap, w.Paused
			if !w.ParkedAt.IsZero() {
				x.AgeSeconds = roundSeconds(at.Sub(w.ParkedAt))
			}
		}
	}
	for _, x := range waiting {
		k.Waiting = append(k.Waiting, *x)
	}
	sort.Slice(k.Waiting, func(i, j int) bool {
		a, b := k.Waiting[i], k.Waiting[j]
		if !a.ParkedAt.Equal(b.ParkedAt) {
			return a.ParkedAt.Before(b.ParkedAt)
		}
		return a.Key < b.Key
	})
	return k
}

// keyName is a key for people: the default key by DefaultKeyName.
func keyName(key string) string {
	if key == "" {
		return DefaultKeyName
	}
	return key
}

// keysColumn is the KEYS column of status's main table: how many keys run, how many of them at
// their cap, how many wait.
func (ts TypeStatus) keysColumn() string {
	k := ts.Keys
	if k == nil {
		return "-"
	}
	parts := []string{fmt.Sprintf("%d running", len(k.Running))}
	if k.capsKeys() {
		parts = append(parts, fmt.Sprintf("%d at cap", k.AtCap-k.OverCap))
		if k.OverCap > 0 {
			parts = append(parts, fmt.Sprintf("%d over cap", k.OverCap))
		}
	}
	return strings.Join(append(parts, fmt.Sprintf("%d waiting", len(k.Waiting))), ", ")
}

// writeKeys prints a type's keys: the first n keys running, most lanes first, with their cap, and
// the first n waiting, longest parked first, with what they wait for.
func (ts TypeStatus) writeKeys(w io.Writer, n int) error {
	k := ts.Keys
	caps := "keys not capped"
	switch {
	case k.KeyLimit > 0 && k.OwnCaps > 0:
		caps = fmt.Sprintf("cap %d a key, %s", k.KeyLimit, plural(k.OwnCaps, "key with its own cap", "keys with their own cap"))
	case k.KeyLimit > 0:
		caps = fmt.Sprintf("cap %d a key", k.KeyLimit)
	case k.OwnCaps > 0:
		caps = fmt.Sprintf("%s, the others not capped", plural(k.OwnCaps, "key with its own cap", "keys with their own cap"))
	}
	atCap := ""
	if k.capsKeys() {
		atCap = fmt.Sprintf(", %d at its cap", k.AtCap-k.OverCap)
		if k.OverCap > 0 {
			atCap += fmt.Sprintf(", %d over it (lowered)", k.OverCap)
		}
	}
	fmt.Fprintf(w, "Keys of %s (%s): %s running%s; %s waiting.\n", ts.Type, caps,
		plural(len(k.Running), "key", "keys"), atCap, plural(len(k.Waiting), "key", "keys"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(k.Running) > 0 {
		fmt.Fprintln(tw, "  KEY\tRUNNING\tCAP\t")
		for _, r := range k.Running[:min(n, len(k.Running))] {
			cp, note := "-", ""
			if r.Cap > 0 {
				cp = fmt.Sprint(r.Cap)
			}
			switch {
			case r.OverCap:
				note = overCapText(r.Running, r.Cap)
			case r.AtCap:
				note = "at its cap"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", keyName(r.Key), r.Running, cp, note)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The counts of the keys not listed go below the table, not in its first column.
	if rest := k.Running[min(n, len(k.Running)):]; len(rest) > 0 {
		jobs := 0
		for _, r := range rest {
			jobs += r.Running
		}
		fmt.Fprintf(w, "  and %s more, running %d\n", plural(len(rest), "key", "keys"), jobs)
	}
	if len(k.Waiting) > 0 {
		fmt.Fprintln(tw, "  KEY WAITING\tPARKED FOR\tWAITS FOR")
		for _, x := range k.Waiting[:min(n, len(k.Waiting))] {
			age := "-"
			if !x.ParkedAt.IsZero() {
				age = Age(time.Duration(x.AgeSeconds * float64(time.Second)))
			}
			what := "a free lane"
			switch {
			case x.Paused:
				what = "the type's resume"
			case x.AtCap:
				what = "its key to fall under its cap"
			}
			groups := ""
			if x.Groups > 1 {
				groups = fmt.Sprintf(", %d groups parked", x.Groups)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s (head job %s%s)\n", keyName(x.Key), age, what, x.HeadJobID, groups)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rest := len(k.Waiting) - min(n, len(k.Waiting)); rest > 0 {
		fmt.Fprintf(w, "  and %s more waiting\n", plural(rest, "key", "keys"))
	}
	return nil
}
