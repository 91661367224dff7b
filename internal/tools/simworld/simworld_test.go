package simworld

import (
	"os"
	"strconv"
	"testing"
	"testing/synctest"
)

func runSeed(t *testing.T, seed uint64, cfg Config) (*World, []Violation) {
	var w *World
	var vs []Violation
	synctest.Test(t, func(t *testing.T) {
		w = New(seed, cfg)
		if f := os.Getenv("SIMDEBUG"); f != "" {
			out, err := os.Create(f)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			w.debug = out
		}
		vs = w.Run()
	})
	return w, vs
}

func TestOneSeed(t *testing.T) {
	seed := uint64(1)
	if s := os.Getenv("SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SEED=%q: %v", s, err)
		}
		seed = n
	}
	cfg := DefaultConfig()
	f, err := Profile(*flagProf)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Faults = f
	w, vs := runSeed(t, seed, cfg)
	t.Logf("seed %d: %+v", seed, w.Stats)
	if len(vs) > 0 || os.Getenv("TRACE") != "" {
		t.Errorf("%s", w.ReportOn(vs, os.Getenv("TRACE"), 120))
	}
}
