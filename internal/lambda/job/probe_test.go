package job_test

import (
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// A probe's body reads back as the probe it was, and a job's body, or anything else, is not one: the
// starter tells the sweep's probes from jobs in a lane's group by their bodies alone.
func TestProbeBodyIsNotAJob(t *testing.T) {
	p := job.Probe{JobID: "j-1", UpdatedAt: 42}
	for _, tc := range []struct {
		body string
		want bool
	}{
		{job.ProbeBody(p), true},
		{`{"id":"j-1","type":"reports","input":{}}`, false},
		{`{"laneProbe":null}`, false},
		{`not json`, false},
	} {
		got, ok := job.ParseProbe(tc.body)
		if ok != tc.want || (ok && got != p) {
			t.Errorf("ParseProbe(%s) = %+v, %v; want %v", tc.body, got, ok, tc.want)
		}
	}
	if a, b := job.ProbeDedupID("reports", 1, p), job.ProbeDedupID("reports", 1, job.Probe{JobID: "j-1", UpdatedAt: 43}); a == b {
		t.Errorf("probes of two writes of a lease share deduplication id %s", a)
	}
}
