package simworld

import (
	"fmt"
	"sort"
	"strings"
	"time"
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
		"events":    {EventDrop: 0.1, EventDup: 0.1, EventDelay: 0.3, Bus: BusFaults{Throttle: 0.1, EntryFailed: 0.1, Outage: 0.5}},
		"operator":  {LimitChanges: 3},
		"slow":      {Slow: 0.02},
		"actions":   {Actions: 8},
		"skew":      {Skew: time.Second},
		// Not in "all" (yet): the gate's seeds and their open findings were drawn without it.
		"interloper": {Interlopers: 6},
		"shared":     {SharedIDs: 0.2},
		"pools":      {Pools: 3},
		// A type with the overflow rule cancel and its bursts of jobs (cancel.go): combine it with
		// the faults ("all+cancel", CancelProfile).
		"cancel": {Cancels: 8},
		// A type with the overflow rule skip and its bursts of jobs (skip.go): "all+skip",
		// SkipProfile.
		"skip": {Skips: 8},
		// all with four times the kills, duplicate deliveries and limit changes: the faults whose
		// coincidence the rarest recovery paths need (twin deliveries of a job leaving its lane,
		// a stale copy binding again), for holds tests and the mutation check.
		"races": Amplified(all, 4),
	}
}

// Amplified is f with n times its kills, duplicate deliveries and limit changes.
func Amplified(f Faults, n int) Faults {
	f.Kill *= float64(n)
	f.Duplicate *= float64(n)
	f.LimitChanges *= n
	return f
}

// Profile returns the named profile; names may be joined with "+" ("ambiguous+kill"), and a
// "-name" turns that profile's classes off ("all-ambiguous-duplicate").
func Profile(name string) (Faults, error) {
	ps := Profiles()
	var f Faults
	var offs []Faults
	for _, part := range strings.Split(name, "+") {
		subs := strings.Split(part, "-")
		n := subs[0]
		for _, off := range subs[1:] {
			o, ok := ps[off]
			if !ok {
				return Faults{}, fmt.Errorf("no fault profile %q", off)
			}
			offs = append(offs, o)
		}
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
	for _, o := range offs {
		f = without(f, o)
	}
	return f, nil
}

// without turns off in a every class that b has on.
func without(a, b Faults) Faults {
	z := func(x *float64, y float64) {
		if y != 0 {
			*x = 0
		}
	}
	z(&a.DDBAmbiguous, b.DDBAmbiguous)
	z(&a.DDBLost, b.DDBLost)
	z(&a.DDBThrottle, b.DDBThrottle)
	z(&a.DDBConflict, b.DDBConflict)
	z(&a.SFNThrottle, b.SFNThrottle)
	z(&a.SFNLost, b.SFNLost)
	z(&a.SFNStale, b.SFNStale)
	z(&a.Duplicate, b.Duplicate)
	z(&a.Kill, b.Kill)
	z(&a.EventDrop, b.EventDrop)
	z(&a.EventDup, b.EventDup)
	z(&a.EventDelay, b.EventDelay)
	z(&a.Slow, b.Slow)
	if b.LimitChanges != 0 {
		a.LimitChanges = 0
	}
	if b.Actions != 0 {
		a.Actions = 0
	}
	if b.Skew != 0 {
		a.Skew = 0
	}
	if b.Interlopers != 0 {
		a.Interlopers = 0
	}
	if b.Pools != 0 {
		a.Pools = 0
	}
	if b.Cancels != 0 {
		a.Cancels = 0
	}
	if b.Skips != 0 {
		a.Skips = 0
	}
	z(&a.SharedIDs, b.SharedIDs)
	a.Bus = a.Bus.without(b.Bus)
	return a
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
	a.Slow += b.Slow
	a.LimitChanges += b.LimitChanges
	a.Actions += b.Actions
	a.Skew = max(a.Skew, b.Skew)
	a.Interlopers += b.Interlopers
	a.Pools += b.Pools
	a.Cancels += b.Cancels
	a.Skips += b.Skips
	a.SharedIDs = max(a.SharedIDs, b.SharedIDs)
	a.Bus = a.Bus.merge(b.Bus)
	return a
}
