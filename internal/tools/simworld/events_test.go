package simworld

import "testing"

// The events class carries EventBridge's PutEvents faults, so "all" has them and "all-events"
// turns them off with the status events' faults.
func TestEventsClassCoversPutEvents(t *testing.T) {
	all, err := Profile("all")
	if err != nil {
		t.Fatal(err)
	}
	if all.Bus.Throttle == 0 || all.Bus.EntryFailed == 0 || all.Bus.Outage == 0 {
		t.Errorf("Profile(all).Bus = %+v, want every PutEvents fault on", all.Bus)
	}
	off, err := Profile("all-events")
	if err != nil {
		t.Fatal(err)
	}
	if off.Bus != (BusFaults{}) || off.EventDrop != 0 {
		t.Errorf("Profile(all-events) = %+v, want the events class off, PutEvents included", off)
	}
	if off.Kill == 0 {
		t.Errorf("Profile(all-events) = %+v, want the other classes on", off)
	}
}
