package demo

import (
	"fmt"
	"html"
	"strings"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"}

// Chart draws running executions per type over time as an SVG: one panel per type, a step line of
// executions at work, and the type's limit as a dashed line.
func (r *Report) Chart() string {
	const w, panelH, left, right, top, gap = 900, 140, 60, 20, 40, 30
	n := max(len(r.Types), 1)
	h := top + n*(panelH+gap) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">Executions at work per type, against its limit (%d jobs, %.0f s)</text>`+"\n", left, r.Jobs, r.WallSeconds)
	if r.end.Sub(r.start) <= 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	step := 100 * time.Millisecond
	times, counts := observe.Series(r.execs, r.start, r.end, step)
	span := r.end.Sub(r.start).Seconds()
	x := func(i int) float64 { return left + float64(w-left-right)*times[i].Sub(r.start).Seconds()/span }
	for pi, t := range r.Types {
		y0 := top + pi*(panelH+gap)
		ymax := t.Limit + max(1, (t.Limit+3)/4) // headroom above the limit for the panel title
		y := func(v int) float64 { return float64(y0+panelH) - float64(panelH)*float64(v)/float64(ymax) }
		color := palette[pi%len(palette)]
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#ccc"/>`+"\n", left, y0, w-left-right, panelH)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s" font-weight="bold">%s</text>`+"\n", left+6, y0+16, color, html.EscapeString(t.Type))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">peak %d of limit %d, utilization while backlogged %.0f%%</text>`+"\n", left+120, y0+16, t.Peak, t.Limit, 100*t.Utilization)
		for v := 0; v <= ymax; v += max(1, ymax/4) {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#777">%d</text>`+"\n", left-6, y(v)+4, v)
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#333" stroke-dasharray="6 4"/>`+"\n", left, w-right, y(t.Limit), y(t.Limit))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">limit %d</text>`+"\n", w-right-4, y(t.Limit)-4, t.Limit)
		c := counts[t.Type]
		if len(c) == 0 {
			continue
		}
		var pts strings.Builder
		for i := range times {
			if i > 0 {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x(i), y(c[i-1]))
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(i), y(c[i]))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.TrimSpace(pts.String()))
	}
	yAxis := top + n*(panelH+gap) - gap + 16
	for s := 0.0; s <= span; s += niceStep(span) {
		px := left + float64(w-left-right)*s/span
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#777">%.0fs</text>`+"\n", px, yAxis, s)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func niceStep(span float64) float64 {
	for _, s := range []float64{5, 10, 15, 30, 60, 120, 300, 600} {
		if span/s <= 12 {
			return s
		}
	}
	return 1200
}
