package simworld

import (
	"fmt"
	"sort"
	"strings"
)

// Profiles are named sets of fault classes. "all" is DefaultConfig's; the others turn one class
// on alone, to tell which class finds what.
func Profiles() map[string]Faults {
	all := DefaultConfig().Faults
	return map[string]Faults{
		"none":      {},
		"all":       all,
		"ambiguous": {DDBAmbiguous: 0.03, DDBLost: 0.01},
		"throttle":  {DDBThrottle: 0.02, SFNThrottle: 0.03, DDBConflict: 0.02},
		"sfn":       {SFNThrottle: 0.03, SFNLost: 0.02, SFNStale: 0.1},
		"duplicate": {Duplicate: 0.1},
		"kill":      {Kill: 0.005},
		"events":    {EventDrop: 0.1, EventDup: 0.1, EventDelay: 0.3},
		"operator":  {LimitChanges: 3},
	}
}

// Profile returns the named profile; names may be joined with "+" ("ambiguous+kill").
func Profile(name string) (Faults, error) {
	ps := Profiles()
	var f Faults
	for _, n := range strings.Split(name, "+") {
		p, ok := ps[n]
		if !ok {
			names := make([]string, 0, len(ps))
			for k := range ps {
				names = append(names, k)
			}
			sort.Strings(names)
			return Faults{}, fmt.Errorf("no fault profile %q (have %s)", n, strings.Join(names, ", "))
		}
		f = merge(f, p)
	}
	return f, nil
}

func merge(a, b Faults) Faults {
	a.DDBAmbiguous += b.DDBAmbiguous
	a.DDBLost += b.DDBLost
	a.DDBThrottle += b.DDBThrottle
	a.DDBConflict += b.DDBConflict
	a.SFNThrottle += b.SFNThrottle
	a.SFNLost += b.SFNLost
	a.SFNStale += b.SFNStale
	a.Duplicate += b.Duplicate
	a.Kill += b.Kill
	a.EventDrop += b.EventDrop
	a.EventDup += b.EventDup
	a.EventDelay += b.EventDelay
	a.LimitChanges += b.LimitChanges
	return a
}
