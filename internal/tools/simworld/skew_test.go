package simworld

import (
	"testing"
	"time"
)

func TestClockOffsetStaysWithinTheSkewBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Faults = Faults{Skew: time.Second}
	w := New(1, cfg)
	lo, hi := time.Duration(0), time.Duration(0)
	for range 1000 {
		off := w.clockOffset()
		if off < -time.Second || off > time.Second {
			t.Fatalf("clockOffset() = %s, want within ±1s", off)
		}
		lo, hi = min(lo, off), max(hi, off)
	}
	if lo > -500*time.Millisecond || hi < 500*time.Millisecond {
		t.Errorf("1000 offsets span [%s, %s], want both signs, spread over the bound", lo, hi)
	}
}

func TestClockOffsetWithoutSkewDrawsNothing(t *testing.T) {
	w := New(1, Config{})
	before := w.rng.Uint64()
	w2 := New(1, Config{})
	if off := w2.clockOffset(); off != 0 {
		t.Errorf("clockOffset() without skew = %s, want 0", off)
	}
	if after := w2.rng.Uint64(); after != before {
		t.Errorf("clockOffset() without skew drew from the seed: seeds without skew would not replay as before")
	}
}
