package demo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// The metrics table has rows and columns that look like errors or like the table above under
// another name; the report says what each is.
func TestReportExplainsItsMetrics(t *testing.T) {
	tests := []struct {
		name     string
		metrics  map[string]map[string]float64
		want     []string
		dontWant []string
	}{
		{
			name: "a healthy run with refused jobs",
			metrics: map[string]map[string]float64{
				"payments":       {metrics.JobsRetried: 8},
				metrics.NoType:   {metrics.JobsRejected: 2},
				metrics.Unlisted: {metrics.JobsRejected: 1},
			},
			want: []string{
				"Retried counts attempts that failed and ran again (a job retried twice counts 2); the retried column above counts jobs that ran more than once.",
				"(none): jobs refused before their type could be read (not JSON, no type).",
				"(unlisted): every type without a limit of its own, in one row",
				"LeasesSwept: lanes the sweep had to release because their execution's own release was missed; 0 here, as on any healthy run.",
			},
			dontWant: []string{"payments:"},
		},
		{
			name:     "releases were missed",
			metrics:  map[string]map[string]float64{"payments": {metrics.LeasesSwept: 3}},
			want:     []string{"(3 here; a healthy run has none: limiter.log says which, \"sweep released\")"},
			dontWant: []string{"(none):", "0 here, as on any healthy run"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Report{Strategy: "first-free", Jobs: 10, Verified: 10, LimitHeld: true,
				Types: []TypeResult{{Type: "payments", Limit: 2}}, Metrics: tt.metrics}
			var buf bytes.Buffer
			r.Print(&buf)
			for _, w := range tt.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("report does not say %q:\n%s", w, buf.String())
				}
			}
			for _, w := range tt.dontWant {
				if strings.Contains(buf.String(), w) {
					t.Errorf("report says %q:\n%s", w, buf.String())
				}
			}
		})
	}
}
