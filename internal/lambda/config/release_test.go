package config_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

func TestParseReleaseModes(t *testing.T) {
	tests := []struct {
		give    string
		want    map[string]string
		wantErr string
	}{
		{give: "", want: map[string]string{}},
		{give: "llm=events", want: map[string]string{"llm": "events"}},
		{give: "llm=events,payments=step", want: map[string]string{"llm": "events", "payments": "step"}},
		{give: "llm=event", wantErr: `unknown release mode "event"`},
		{give: "llm=", wantErr: "no release mode"},
		{give: "llm", wantErr: "not type=mode"},
		{give: "llm=events,llm=step", wantErr: "listed twice"},
		{give: "llm=events, payments=step", wantErr: "type"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := config.ParseReleaseModes(tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseReleaseModes(%q) = %v, %v; want an error mentioning %q", tt.give, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseReleaseModes(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
			}
			if back := config.FormatReleaseModes(got); back != tt.give && tt.give != "llm=events,payments=step" {
				t.Errorf("FormatReleaseModes = %q, want %q", back, tt.give)
			}
		})
	}
}

// A type's release mode comes from its live override, else its TYPE_RELEASE_MODES entry, else
// RELEASE_MODE, else step.
func TestReleaseModeResolution(t *testing.T) {
	d := config.Defaults{
		Limits: map[string]int{"a": 1, "b": 1, "c": 1}, DefaultMaxAttempts: 3,
		Release: "events", Releases: map[string]string{"b": "step", "c": "step"},
	}
	store := &fakeStore{list: []config.Override{{Type: "c", Release: "events"}}}
	r, err := config.NewResolver(d, store, 0)
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]string{"a": "events", "b": "step", "c": "events"} {
		c, err := r.Get(context.Background(), typ)
		if err != nil || c.Release != want {
			t.Errorf("Get(%s).Release = %q, %v; want %q", typ, c.Release, err, want)
		}
	}
	if err := (config.Override{Type: "a", Release: "event"}).Validate(); err == nil {
		t.Error("Validate(release event) = nil, want an error")
	}
}
