package simworld

import "testing"

func TestProfileWithout(t *testing.T) {
	f, err := Profile("all-ambiguous-duplicate")
	if err != nil {
		t.Fatal(err)
	}
	if f.DDBAmbiguous != 0 || f.DDBLost != 0 || f.Duplicate != 0 {
		t.Errorf("Profile(all-ambiguous-duplicate) = %+v, want ambiguous writes and duplicates off", f)
	}
	if f.Kill == 0 || f.DDBThrottle == 0 || f.EventDrop == 0 {
		t.Errorf("Profile(all-ambiguous-duplicate) = %+v, want the other classes on", f)
	}
}
