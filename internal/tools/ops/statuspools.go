package ops

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// PoolStatus is one shared pool: its cap and, per member type, the jobs holding its slots and the
// waiting groups parked at its cap.
type PoolStatus struct {
	Name    string       `json:"name"`
	Cap     int          `json:"cap"`
	Running int          `json:"running"`
	Members []PoolMember `json:"members"`
}

// PoolMember is one member type of a pool. Running counts the type's leases: every lane a member's
// job holds holds a slot of each of its type's pools (a bind takes them before the job's copy goes).
type PoolMember struct {
	Type    string `json:"type"`
	Share   int    `json:"share"`
	Running int    `json:"running"`
	// Parked counts the type's waiting groups parked at the pool's cap (their heads wait for a slot,
	// and every job behind them in their groups).
	Parked int `json:"parked"`
}

// poolsOf builds the pools' status from the types' configs, their running jobs and parked groups.
func poolsOf(cfgs []config.TypeConfig, running map[string]int, parked map[string][]waitroom.Waiter) []PoolStatus {
	byName := map[string]*PoolStatus{}
	for _, c := range cfgs {
		for _, p := range c.Pools {
			ps := byName[p.Name]
			if ps == nil {
				ps = &PoolStatus{Name: p.Name, Cap: p.Cap}
				byName[p.Name] = ps
			}
			m := PoolMember{Type: c.Type, Share: p.Share, Running: running[c.Type]}
			for _, w := range parked[c.Type] {
				if w.AtPool == p.Name {
					m.Parked++
				}
			}
			ps.Members = append(ps.Members, m)
			ps.Running += m.Running
		}
	}
	out := make([]PoolStatus, 0, len(byName))
	for _, ps := range byName {
		slices.SortFunc(ps.Members, func(a, b PoolMember) int { return strings.Compare(a.Type, b.Type) })
		out = append(out, *ps)
	}
	slices.SortFunc(out, func(a, b PoolStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// writePools prints the pools' table (nothing when there are none).
func writePools(w io.Writer, pools []PoolStatus) error {
	if len(pools) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tCAP\tRUNNING\tMEMBERS: TYPE (SHARE) RUNNING, PARKED AT THE POOL'S CAP")
	for _, p := range pools {
		ms := make([]string, len(p.Members))
		for i, m := range p.Members {
			ms[i] = fmt.Sprintf("%s (%d) %d, %d parked", m.Type, m.Share, m.Running, m.Parked)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", p.Name, p.Cap, p.Running, strings.Join(ms, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w)
	return err
}
