package demo

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The report names the strategy the stack's types ran on: the functions' reading of LaneStrategy,
// so a template that still defaults to the retired least-loaded is reported as first-free.
func TestRunStrategy(t *testing.T) {
	tests := []struct{ param, want string }{
		{param: "", want: "first-free"},
		{param: "first-free", want: "first-free"},
		{param: "random", want: "random"},
		{param: "least-loaded", want: "first-free"},
		{param: "hashed", want: "random"},
	}
	for _, tt := range tests {
		if got := runStrategy(tt.param); got != tt.want {
			t.Errorf("runStrategy(%q) = %q, want %q", tt.param, got, tt.want)
		}
	}
}

// A demo on a strategy that cannot be chosen is refused before anything starts: no stack, no
// output directory.
func TestRunRefusesAStrategyThatCannotBeChosen(t *testing.T) {
	tests := []struct{ strategy, want string }{
		{strategy: "least-loaded", want: "lane strategy least-loaded is retired"},
		{strategy: "fastest", want: `unknown lane strategy "fastest"`},
	}
	for _, tt := range tests {
		t.Run(tt.strategy, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "demo")
			_, err := Run(context.Background(), Options{Workload: DefaultWorkload(), OutDir: out, Out: io.Discard, Strategy: tt.strategy})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run(strategy %s) = %v, want an error with %q", tt.strategy, err, tt.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("Run(strategy %s) created %s (%v): it started before checking the strategy", tt.strategy, out, err)
			}
		})
	}
}
