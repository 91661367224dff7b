package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Priorities: among a type's waiting jobs, a higher priority starts first. A job without one is
// normal. Numbers 1-9 and three names are accepted; the names are points on the same scale.
const (
	MinPriority     = 1
	MaxPriority     = 9
	LowPriority     = 1
	DefaultPriority = 5
	HighPriority    = 9
)

// ReasonInvalidPriority refuses a job whose priority is neither a name nor a number in range.
const ReasonInvalidPriority Reason = "invalid_priority"

// priorityNames are the names a producer may give for a priority.
var priorityNames = map[string]int{"low": LowPriority, "normal": DefaultPriority, "high": HighPriority}

// ParsePriority reads a submission's "priority": absent or null is normal; "low", "normal" and
// "high", or a whole number 1-9 (also as a string, as a command line gives it).
func ParsePriority(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return DefaultPriority, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		s = string(raw)
	}
	return PriorityFromString(s)
}

// PriorityFromString reads a priority's name or number.
func PriorityFromString(s string) (int, error) {
	if p, ok := priorityNames[strings.ToLower(s)]; ok {
		return p, nil
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < MinPriority || p > MaxPriority || strconv.Itoa(p) != s {
		return 0, &Error{ReasonInvalidPriority, fmt.Sprintf("priority %q must be low, normal, high or a whole number %d-%d (higher starts first)",
			clip(s), MinPriority, MaxPriority)}
	}
	return p, nil
}

// PriorityName is how a priority reads: its name when it has one, else its number.
func PriorityName(p int) string {
	switch normalPriority(p) {
	case LowPriority:
		return "low"
	case DefaultPriority:
		return "normal"
	case HighPriority:
		return "high"
	}
	return strconv.Itoa(p)
}

// normalPriority maps 0 (a job routed before jobs had priorities, or none given) to the default.
func normalPriority(p int) int {
	if p == 0 {
		return DefaultPriority
	}
	return p
}

// EffectivePriority is the job's priority, the default when it has none.
func (j Job) EffectivePriority() int { return normalPriority(j.Priority) }

// PriorityGroupID is the MessageGroupId of the waiting group g for jobs of priority p: g itself for
// normal jobs (as before jobs had priorities), "{g}!{p}" for the others, so each priority waits in
// FIFO groups of its own and a release can serve the higher first. No type or key has a "!".
func PriorityGroupID(g string, p int) string {
	p = normalPriority(p)
	if p == DefaultPriority {
		return g
	}
	return g + "!" + strconv.Itoa(p)
}

// GroupPriority splits a waiting group's id into the group without its priority and the priority
// (DefaultPriority when it has none).
func GroupPriority(g string) (base string, p int, err error) {
	i := strings.LastIndexByte(g, '!')
	if i < 0 {
		return g, DefaultPriority, nil
	}
	p, err = strconv.Atoi(g[i+1:])
	if err != nil || p < MinPriority || p > MaxPriority || p == DefaultPriority || strconv.Itoa(p) != g[i+1:] {
		return "", 0, fmt.Errorf("message group %q has no priority %d-%d after its \"!\"", g, MinPriority, MaxPriority)
	}
	return g[:i], p, nil
}

// Resubmission is the job as a producer sends it, for the dead-letter queue: sent back to the
// general queue, it runs the same job again (its key, priority and batch with it) under redrive
// generation redrive.
func (j Job) Resubmission(redrive int) Submission {
	s := Submission{Type: j.Type, ID: j.ID, Key: j.Key, Input: j.Input, Redrive: redrive, Batch: j.Batch, BatchSize: j.BatchSize}
	if j.Priority != 0 {
		s.Priority = json.RawMessage(strconv.Itoa(j.Priority))
	}
	return s
}
