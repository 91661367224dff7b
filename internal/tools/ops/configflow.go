package ops

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// Flow control beside a type's concurrency limit (issue 14), as config get and set show and change
// it: a start rate (config set --rate/--burst) and a pause (sfnlimit pause and resume, pause.go).

// Where a type's start rate comes from.
const (
	RateFromOverride = "override"  // the type's live item: a rate, or noRate (none, whatever TypeRates says)
	RateFromType     = "TypeRates" // the type's entry in the TypeRates parameter
	RateNone         = "none"      // no rate: only the concurrency limit bounds the type's starts
)

// RateView is a start rate: at most PerSecond starts a second, in bursts of up to Burst.
type RateView struct {
	PerSecond float64 `json:"perSecond"`
	Burst     int     `json:"burst"`
}

func rateView(r config.Rate) *RateView {
	if !r.IsSet() {
		return nil
	}
	return &RateView{PerSecond: r.PerSecond, Burst: r.Burst}
}

// String is the rate for people: "5/s burst 10", or "none".
func (r *RateView) String() string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%s/s burst %d", strconv.FormatFloat(r.PerSecond, 'f', -1, 64), r.Burst)
}

// PauseView is a type's pause.
type PauseView struct {
	// Reason is why, as the operator gave it ("" for none).
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// PausedSeconds is how long the type has been paused at the reading.
	PausedSeconds float64 `json:"pausedSeconds"`
	// ParkedGroups counts the type's waiting groups parked by the pause, waiting for the resume
	// (status only: from the parked records).
	ParkedGroups int `json:"parkedGroups,omitempty"`
}

func pauseView(p *config.Pause, now time.Time) *PauseView {
	if p == nil {
		return nil
	}
	return &PauseView{Reason: p.Reason, Since: p.Since.UTC(), PausedSeconds: roundSeconds(now.Sub(p.Since))}
}

// age is how long the type has been paused, for people.
func (p *PauseView) age() string { return Age(time.Duration(p.PausedSeconds * float64(time.Second))) }

// reasonText is the pause's reason for people.
func (p *PauseView) reasonText() string {
	if p.Reason == "" {
		return "no reason given"
	}
	return strconv.Quote(p.Reason)
}

// setFlow fills in a type's start rate and pause from the deployment's TypeRates and its live
// override ov (nil: none), as config.Resolver merges them, at now.
func (tv *TypeView) setFlow(d config.Defaults, ov *config.Override, now time.Time) {
	tv.Rate, tv.RateSource, tv.Pause = nil, RateNone, nil
	if r := d.Rates[tv.Type]; r.IsSet() {
		tv.Rate, tv.RateSource = rateView(r), RateFromType
	}
	if ov == nil {
		return
	}
	switch {
	case ov.Rate.IsSet():
		tv.Rate, tv.RateSource = rateView(ov.Rate), RateFromOverride
	case ov.NoRate:
		tv.Rate, tv.RateSource = nil, RateFromOverride
	}
	tv.Pause = pauseView(ov.Pause, now)
}

// rateText is the RATE column of config get: the rate and where it comes from ("none (override)"
// for a live item that removes TypeRates' rate).
func (tv TypeView) rateText() string {
	if tv.Rate == nil && tv.RateSource != RateFromOverride {
		return "-"
	}
	return fmt.Sprintf("%s (%s)", tv.Rate, tv.RateSource)
}

// pausedText is the PAUSED column: how long the type has been paused.
func (tv TypeView) pausedText() string {
	if tv.Pause == nil {
		return "-"
	}
	return tv.Pause.age()
}

// showsRate reports whether config get shows the RATE column: once some type has a rate, or a
// live item removes one, or the deployment gives rates (a deployment without rates keeps its table).
func (v ConfigView) showsRate() bool {
	if len(v.Rates) > 0 {
		return true
	}
	return slices.ContainsFunc(v.Types, func(t TypeView) bool { return t.Rate != nil || t.RateSource == RateFromOverride })
}

// showsPaused reports whether config get shows the PAUSED column: once some type is paused.
func (v ConfigView) showsPaused() bool {
	return slices.ContainsFunc(v.Types, func(t TypeView) bool { return t.Pause != nil })
}

// writeFlow prints, below the table, each paused type with its reason.
func (v ConfigView) writeFlow(w io.Writer) {
	for _, t := range v.Types {
		if p := t.Pause; p != nil {
			fmt.Fprintf(w, "Paused: %s for %s, since %s: %s (sfnlimit resume %s starts it again).\n", t.Type, p.age(), p.Since.Format(time.RFC3339), p.reasonText(), t.Type)
		}
	}
}

// formatRates writes TypeRates as the parameter has it: "llm=0.5:1,partner=5:10", types sorted.
func formatRates(m map[string]RateView) string {
	parts := make([]string, 0, len(m))
	for _, t := range slices.Sorted(maps.Keys(m)) {
		r := m[t]
		parts = append(parts, t+"="+config.Rate{PerSecond: r.PerSecond, Burst: r.Burst}.String())
	}
	return strings.Join(parts, ",")
}

// ratesOf is TypeRates for a view (nil when the deployment gives no rate).
func ratesOf(d config.Defaults) map[string]RateView {
	if len(d.Rates) == 0 {
		return nil
	}
	out := make(map[string]RateView, len(d.Rates))
	for t, r := range d.Rates {
		out[t] = RateView{PerSecond: r.PerSecond, Burst: r.Burst}
	}
	return out
}

// RemoveRate is the --rate value that removes a type's start rate.
const RemoveRate = "0"

// validateRate checks the rate fields of a change with the functions' own rules (config.ParseRate
// and config.Rate.Validate, and their words), before anything is read.
func (c Change) validateRate() error {
	if c.Rate != nil {
		switch {
		case *c.Rate == RemoveRate && c.Burst != nil:
			return usagef("--rate 0 removes the rate: give no --burst with it")
		case *c.Rate == RemoveRate:
			return nil
		case strings.Contains(*c.Rate, ":") && c.Burst != nil:
			return usagef("--rate %s gives a burst already: give it as --rate R:B or as --burst B, not both", *c.Rate)
		}
		if _, err := config.ParseRate(*c.Rate); err != nil {
			return usagef("--rate: %v (--rate 0 removes the rate)", err)
		}
	}
	if c.Burst != nil {
		// The burst alone, against a valid rate: config.Rate.Validate's own message.
		if err := (config.Rate{PerSecond: 1, Burst: *c.Burst}).Validate(); err != nil {
			return usagef("--burst: %v", err)
		}
	}
	return nil
}

// applyRate writes the rate fields of a change into the type's override o; d gives the type's
// TypeRates entry. --rate 0 removes the rate: with a TypeRates entry the item says noRate, so the
// type runs with no rate at all (config reset brings the entry back). --burst alone changes the
// burst of the rate in force.
func (c Change) applyRate(o *config.Override, d config.Defaults) (warnings []string, err error) {
	if c.Rate == nil && c.Burst == nil {
		return nil, nil
	}
	def := d.Rates[c.Type]
	inForce := def
	switch {
	case o.Rate.IsSet():
		inForce = o.Rate
	case o.NoRate:
		inForce = config.Rate{}
	}
	if c.Rate != nil && *c.Rate == RemoveRate {
		if !inForce.IsSet() {
			warnings = append(warnings, fmt.Sprintf("type %s had no start rate: nothing removed", c.Type))
		}
		o.Rate, o.NoRate = config.Rate{}, def.IsSet()
		return warnings, nil
	}
	r := inForce
	if c.Rate != nil {
		r, _ = config.ParseRate(*c.Rate) // checked by Validate
	} else if !r.IsSet() {
		return nil, usagef("type %s has no start rate: --burst needs --rate R (starts per second) with it; nothing written", c.Type)
	}
	if c.Burst != nil {
		r.Burst = *c.Burst
	}
	o.Rate, o.NoRate = r, false
	return nil, nil
}

// flowWarnings says what a change did to a type's rate that the table does not show at a glance.
func flowWarnings(before, after TypeView) []string {
	var out []string
	typ := after.Type
	if before.Rate.String() != after.Rate.String() && after.Rate != nil {
		out = append(out, fmt.Sprintf("type %s starts at most %s: starts over the rate wait in the queue (no attempt is used), within the functions' cache time", typ, after.Rate))
	}
	if before.Rate != nil && after.Rate == nil && after.RateSource == RateFromOverride {
		out = append(out, fmt.Sprintf("type %s has no start rate: its live item removes its TypeRates entry (config reset %s, or --rate again, brings a rate back)", typ, typ))
	}
	if after.Pause != nil {
		out = append(out, fmt.Sprintf("type %s is paused (for %s: %s): nothing of it starts until sfnlimit resume %s", typ, after.Pause.age(), after.Pause.reasonText(), typ))
	}
	return out
}
