package demo

import (
	"reflect"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

// A handover is the time a lane stands idle between one job's work end and the next start of its
// type, counted only while another job of the type waited: an end with nothing waiting is no
// handover, however long the lane then stays idle.
func TestHandovers(t *testing.T) {
	byJob := func(xs ...observe.Execution) map[string][]observe.Execution {
		m := map[string][]observe.Execution{}
		for _, x := range xs {
			k := x.Job.Type + "/" + x.Job.ID
			m[k] = append(m[k], x)
		}
		return m
	}
	tests := []struct {
		name string
		give map[string][]observe.Execution
		want []float64
	}{
		{
			name: "one lane, three jobs back to back with gaps of 0.5 s and 0.25 s",
			give: byJob(exec("a", "1", 1, 0, 0, 3), exec("a", "2", 1, 0, 3.5, 6), exec("a", "3", 1, 0, 6.25, 9)),
			want: []float64{0.5, 0.25},
		},
		{
			name: "nothing waits at the end: no handover",
			give: byJob(exec("a", "1", 1, 0, 0, 3), exec("a", "2", 1, 5, 5.5, 8)),
			want: nil,
		},
		{
			name: "a retried job waits for its own next attempt",
			give: byJob(exec("a", "1", 1, 0, 0, 2), exec("a", "1", 2, 0, 2.5, 4)),
			want: []float64{0.5},
		},
		{
			name: "two lanes: each end pairs with the next start not yet paired",
			give: byJob(exec("a", "1", 1, 0, 0, 2), exec("a", "2", 1, 0, 0, 3), exec("a", "3", 1, 0, 2.25, 5), exec("a", "4", 1, 0, 3.75, 6)),
			want: []float64{0.25, 0.75},
		},
		{
			name: "other types do not count",
			give: byJob(exec("a", "1", 1, 0, 0, 3), exec("b", "2", 1, 0, 3.5, 6)),
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := handovers(tt.give, TypeSpec{Type: "a", Limit: 2})
			for i := range got {
				got[i] = float64(int(got[i]*1000+0.5)) / 1000
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("handovers = %v, want %v", got, tt.want)
			}
		})
	}
}
