package job

import (
	"encoding/json"
	"strconv"
)

// Probe is the body of a message the sweep sends to a lane's group to learn whether the copy of
// the lane's bound lease is still queued there: FIFO hands out a group's messages in the order they
// were sent, so a probe that reaches the starter while the lease is still bound, unchanged, has no
// copy of it ahead (its bind sends the copy before the lease can go stale). The lane and type are
// the group's.
type Probe struct {
	// JobID and UpdatedAt (Unix nanoseconds) name the bound lease the sweep found stale: every
	// write of a lease stamps its updatedAt. Not its version, which is random: a probe's body is
	// the same in every run of the simulation's seed.
	JobID     string `json:"jobId"`
	UpdatedAt int64  `json:"updatedAt"`
}

type probeBody struct {
	Probe *Probe `json:"laneProbe"`
}

// ProbeBody is the message body of probe p.
func ProbeBody(p Probe) string {
	b, _ := json.Marshal(probeBody{Probe: &p}) // two plain fields: never fails
	return string(b)
}

// ParseProbe reads a lanes-queue message body as a probe; ok is false for anything else (a job).
func ParseProbe(body string) (p Probe, ok bool) {
	var b probeBody
	if json.Unmarshal([]byte(body), &b) != nil || b.Probe == nil {
		return Probe{}, false
	}
	return *b.Probe, true
}

// ProbeDedupID is the deduplication id of probe p of lane to of type typ: the sweeps that find the
// same lease stale send one probe per deduplication interval.
func ProbeDedupID(typ string, to int, p Probe) string {
	return dedupID(typ, p.JobID, "~probe~"+strconv.Itoa(to)+"~"+strconv.FormatInt(p.UpdatedAt, 10))
}
