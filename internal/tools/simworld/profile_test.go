package simworld

import (
	"testing"
	"time"
)

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

func TestProfileAllCoversOperatorActionsAndSkew(t *testing.T) {
	all, err := Profile("all")
	if err != nil {
		t.Fatal(err)
	}
	if all.Actions == 0 || all.Skew == 0 || all.LimitChanges == 0 {
		t.Errorf("Profile(all) = %+v, want limit changes, the operator's actions and clock skew on", all)
	}
	off, err := Profile("all-actions-skew")
	if err != nil {
		t.Fatal(err)
	}
	if off.Actions != 0 || off.Skew != 0 || off.LimitChanges == 0 {
		t.Errorf("Profile(all-actions-skew) = %+v, want actions and skew off, limit changes on", off)
	}
	both, err := Profile("actions+skew")
	if err != nil {
		t.Fatal(err)
	}
	if both.Actions == 0 || both.Skew != time.Second {
		t.Errorf("Profile(actions+skew) = %+v, want actions on and a skew of 1s", both)
	}
}
