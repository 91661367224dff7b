package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// quantile (by selection) against the nearest rank in a sorted copy.
func TestQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		give func(n int) []float64
	}{
		{name: "distinct", give: func(n int) []float64 {
			out := make([]float64, n)
			for i := range out {
				out[i] = rng.Float64()
			}
			return out
		}},
		{name: "mostly zeros, like waits at low load", give: func(n int) []float64 {
			out := make([]float64, n)
			for i := range out {
				if rng.IntN(10) == 0 {
					out[i] = rng.ExpFloat64()
				}
			}
			return out
		}},
		{name: "few values", give: func(n int) []float64 {
			out := make([]float64, n)
			for i := range out {
				out[i] = float64(rng.IntN(3))
			}
			return out
		}},
		{name: "sorted", give: func(n int) []float64 {
			out := make([]float64, n)
			for i := range out {
				out[i] = float64(i)
			}
			return out
		}},
		{name: "reversed", give: func(n int) []float64 {
			out := make([]float64, n)
			for i := range out {
				out[i] = float64(n - i)
			}
			return out
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, n := range []int{1, 2, 3, 10, 99, 100, 101, 1000, 10007} {
				values := tt.give(n)
				sorted := slices.Sorted(slices.Values(values))
				for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 1} {
					// The smallest value with at least a share q of the values at or below it.
					k := 0
					for k < n-1 && float64(k+1) < q*float64(n) {
						k++
					}
					want := sorted[k]
					if got := quantile(slices.Clone(values), q); got != want {
						t.Errorf("quantile(%d values, %g) = %g, want %g", n, q, got, want)
					}
				}
			}
			if got := quantile(nil, 0.99); got != 0 {
				t.Errorf("quantile(nil, 0.99) = %g, want 0", got)
			}
		})
	}
}
