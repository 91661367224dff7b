package simworld

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// traceHandler turns the handlers' log lines into trace lines (when the run keeps a trace), so a
// failing seed's report shows what the limiter decided beside what the services did.
type traceHandler struct {
	w     *World
	attrs []slog.Attr
}

func (h traceHandler) Enabled(context.Context, slog.Level) bool { return h.w.cfg.Trace }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	name := "world"
	if p := procOf(ctx); p != nil {
		name = p.name
	}
	fmt.Fprintf(&b, "log %s %s: %s", name, r.Level, r.Message)
	subject := ""
	add := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		switch a.Key {
		case "jobId", "group", "type", "lane":
			subject += a.Value.String() + " "
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.w.trace(subject, "%s", b.String())
	return nil
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{w: h.w, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h traceHandler) WithGroup(string) slog.Handler { return h }
