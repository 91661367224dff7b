package ops

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// pause writes a pause beginning now into the type's live item, keeping its other fields; a type
// paused already keeps the time its pause began, and its reason unless a new one is given; a
// reason the functions refuse, or a type without a limit, is refused and nothing is written.
func TestPause(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	earlier := now.Add(-95 * time.Minute)
	tests := []struct {
		name       string
		stored     []config.Override
		typ        string
		reason     *string
		wantErr    string // in the usage error; nothing written
		want       config.Override
		wantResult PauseResult
		wantOut    []string
	}{
		{
			name: "a type with a live item", stored: []config.Override{{Type: "llm", Limit: 4, Rate: config.Rate{PerSecond: 2, Burst: 2}}},
			typ: "llm", reason: ptr("partner API down, INC-4711"),
			want:       config.Override{Type: "llm", Limit: 4, Rate: config.Rate{PerSecond: 2, Burst: 2}, Pause: &config.Pause{Reason: "partner API down, INC-4711", Since: now}},
			wantResult: PauseResult{Type: "llm", Pause: PauseView{Reason: "partner API down, INC-4711", Since: now}, CacheSeconds: 30},
			wantOut: []string{
				`type llm paused at 2026-03-01T12:00:00Z: "partner API down, INC-4711"` + "\n",
				"Within 30s (ConfigCacheSeconds) no new execution of type llm starts. Its running executions finish\nand release their lanes as usual.",
				"none is\ndead-lettered, and none expires unless it waits longer than the lanes queue's retention (14d00h\nsince it was submitted).",
				`Run "sfnlimit resume llm" to start them again`,
			},
		},
		{
			name: "a type of the defaults, with no reason", typ: "payments",
			want:       config.Override{Type: "payments", Pause: &config.Pause{Since: now}},
			wantResult: PauseResult{Type: "payments", Pause: PauseView{Since: now}, CacheSeconds: 30},
			wantOut:    []string{"type payments paused at 2026-03-01T12:00:00Z: no reason given\n"},
		},
		{
			name: "paused already: the start kept, a new reason", typ: "llm", reason: ptr("still down, ETA 14:00"),
			stored:     []config.Override{{Type: "llm", Limit: 4, Pause: &config.Pause{Reason: "partner API down", Since: earlier}}},
			want:       config.Override{Type: "llm", Limit: 4, Pause: &config.Pause{Reason: "still down, ETA 14:00", Since: earlier}},
			wantResult: PauseResult{Type: "llm", Pause: PauseView{Reason: "still down, ETA 14:00", Since: earlier, PausedSeconds: 5700}, Already: true, PreviousReason: "partner API down", CacheSeconds: 30},
			wantOut: []string{
				"type llm was paused already, for 1h35m since 2026-03-01T10:25:00Z: the pause keeps the time it began.\n",
				`reason: "partner API down" -> "still down, ETA 14:00"` + "\n",
			},
		},
		{
			name: "paused already, no reason given: the reason kept", typ: "llm",
			stored:     []config.Override{{Type: "llm", Limit: 4, Pause: &config.Pause{Reason: "partner API down", Since: earlier}}},
			want:       config.Override{Type: "llm", Limit: 4, Pause: &config.Pause{Reason: "partner API down", Since: earlier}},
			wantResult: PauseResult{Type: "llm", Pause: PauseView{Reason: "partner API down", Since: earlier, PausedSeconds: 5700}, Already: true, PreviousReason: "partner API down", CacheSeconds: 30},
			wantOut:    []string{`reason: "partner API down" (unchanged)`},
		},
		{
			name: "a reason of 200 characters", typ: "payments", reason: ptr(strings.Repeat("é", 200)),
			want:       config.Override{Type: "payments", Pause: &config.Pause{Reason: strings.Repeat("é", 200), Since: now}},
			wantResult: PauseResult{Type: "payments", Pause: PauseView{Reason: strings.Repeat("é", 200), Since: now}, CacheSeconds: 30},
		},

		{name: "a reason of 201 characters", typ: "payments", reason: ptr(strings.Repeat("x", 201)),
			wantErr: "--reason: type payments: pause reason is 201 characters, more than 200"},
		{name: "a reason with a new line", typ: "payments", reason: ptr("down\nsince noon"),
			wantErr: "--reason: type payments: pause reason has a control character"},
		{name: "a new reason too long for a paused type", typ: "llm", reason: ptr(strings.Repeat("x", 300)),
			stored:  []config.Override{{Type: "llm", Limit: 4, Pause: &config.Pause{Reason: "partner API down", Since: earlier}}},
			wantErr: "pause reason is 300 characters"},
		{name: "a type with no limit", typ: "nolimit", reason: ptr("x"),
			wantErr: "type nolimit has no limit, so none of its jobs start (unknown_type): nothing to pause; config set nolimit --limit N gives it one"},
		{name: "a typo of a type", typ: "paymnets",
			wantErr: "type paymnets has no limit, so none of its jobs start (unknown_type): nothing to pause. Did you mean payments?"},
		{name: "a bad type", typ: "a-b", wantErr: "invalid_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored...)
			e := ConfigEditor{Store: store, Defaults: defaults(), CacheAge: 30 * time.Second, Now: func() time.Time { return now }}
			res, err := e.Pause(context.Background(), tt.typ, tt.reason)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Errorf("Pause() = %v, want a usage error with %q", err, tt.wantErr)
				}
				if store.writes != 0 {
					t.Errorf("a refused pause wrote: %v", store.items)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := store.items[tt.typ]; !reflect.DeepEqual(got, tt.want) || store.writes != 1 {
				t.Errorf("stored %+v (%d writes), want %+v in one write", got, store.writes, tt.want)
			}
			if !reflect.DeepEqual(res, tt.wantResult) {
				t.Errorf("Pause() = %+v, want %+v", res, tt.wantResult)
			}
			var b strings.Builder
			if err := res.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(b.String(), want) {
					t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// resume lifts the pause and wakes, at once, the waiting groups parked by it: their heads' messages
// are made visible and their records claimed; groups parked for a lane are left to the releases. A
// type not paused is left as it is, but a group still parked by an earlier pause is woken.
func TestResume(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	since := now.Add(-12*time.Minute - 3*time.Second)
	parked := func(group, handle string, paused bool, prio int) waitroom.Waiter {
		return waitroom.Waiter{Type: "llm", Group: group, MessageID: "m-" + handle, ReceiptHandle: handle, JobID: "j-" + handle, Paused: paused, Priority: prio,
			SubmittedAt: now.Add(-30 * time.Second), ParkedAt: now.Add(-10 * time.Second)}
	}
	boom := errors.New("throttled")
	tests := []struct {
		name      string
		stored    []config.Override
		parked    []waitroom.Waiter
		sqsErr    error
		noLimit   bool // llm has no TypeLimits entry
		wantErr   string
		wantUsage bool
		want      *config.Override // the type's item after; nil: none
		wantWoken []string         // receipt handles made visible, in order
		wantLeft  []string         // groups still parked
		wantOut   []string
	}{
		{
			name:   "the item held the pause alone: it goes",
			stored: []config.Override{{Type: "llm", Pause: &config.Pause{Reason: "partner API down", Since: since}}},
			parked: []waitroom.Waiter{parked("llm-0", "h-low", true, 1), parked("llm#acme", "h-lane", false, 0), parked("llm-w1", "h-high", true, 9)},
			// Higher priority first; the group waiting for a lane is a release's to wake.
			wantWoken: []string{"h-high", "h-low"}, wantLeft: []string{"llm#acme"},
			wantOut: []string{
				`type llm resumed: it was paused for 12m03s, since 2026-03-01T11:47:57Z ("partner API down").` + "\n",
				"Woke 2 waiting groups parked by the pause: their jobs bind to free lanes again",
				"Functions that read the config in the last 30s (ConfigCacheSeconds) start its new jobs once they read it again.\n",
			},
		},
		{
			name:      "the other fields of the item stay",
			stored:    []config.Override{{Type: "llm", Limit: 4, KeyLimit: 2, Rate: config.Rate{PerSecond: 1, Burst: 1}, Pause: &config.Pause{Since: since}}},
			parked:    []waitroom.Waiter{parked("llm-0", "h-1", true, 0)},
			want:      &config.Override{Type: "llm", Limit: 4, KeyLimit: 2, Rate: config.Rate{PerSecond: 1, Burst: 1}},
			wantWoken: []string{"h-1"},
			wantOut:   []string{"(no reason given)", "Woke 1 waiting group parked by the pause"},
		},
		{
			name:    "paused with nothing parked",
			stored:  []config.Override{{Type: "llm", Limit: 4, Pause: &config.Pause{Since: since}}},
			want:    &config.Override{Type: "llm", Limit: 4},
			wantOut: []string{"type llm resumed", "No waiting group was parked by the pause.\n"},
		},
		{
			name:      "not paused: nothing changed, an earlier pause's group woken",
			stored:    []config.Override{{Type: "llm", Limit: 4}},
			parked:    []waitroom.Waiter{parked("llm-0", "h-1", true, 0), parked("llm-w1", "h-2", false, 0)},
			want:      &config.Override{Type: "llm", Limit: 4},
			wantWoken: []string{"h-1"}, wantLeft: []string{"llm-w1"},
			wantOut: []string{"type llm is not paused: nothing to resume.\n", "Woke 1 waiting group parked by the pause"},
		},
		{
			name:    "not paused, nothing parked",
			stored:  []config.Override{{Type: "llm", Limit: 4}},
			want:    &config.Override{Type: "llm", Limit: 4},
			wantOut: []string{"type llm is not paused: nothing to resume.\n"},
		},
		{
			name:   "the wake-up fails after the pause is lifted",
			stored: []config.Override{{Type: "llm", Limit: 4, Pause: &config.Pause{Since: since}}},
			parked: []waitroom.Waiter{parked("llm-0", "h-1", true, 0)}, sqsErr: boom,
			want:    &config.Override{Type: "llm", Limit: 4},
			wantErr: "type llm is resumed, but waking its groups parked by the pause stopped after 0: wake parked job j-h-1 of resumed type llm: throttled; the releaser's sweep wakes the others within a minute",
			// Its record was claimed before the call failed: the sweep's wake-up of it is then a
			// park period away, as after any failed wake-up (waitroom.ParkFor bounds it).
			wantOut: []string{"type llm resumed"},
		},
		{
			name: "a type with no limit", noLimit: true,
			wantErr: "type llm has no limit, so none of its jobs start (unknown_type): nothing to resume", wantUsage: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored...)
			room := parkedTable(t, tt.parked...)
			q := &fakes.SQS{OnChangeVisibility: func(*sqs.ChangeMessageVisibilityInput) error { return tt.sqsErr }}
			d := defaults()
			if !tt.noLimit {
				d.Limits["llm"] = 4
			}
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: 30 * time.Second, Now: func() time.Time { return now }}
			res, err := e.Resume(context.Background(), "llm", Waker{Queue: q, QueueURL: "lanes", WaitRoom: room})
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.As(err, &ue) != tt.wantUsage {
					t.Fatalf("Resume() = %v, want an error with %q (usage %v)", err, tt.wantErr, tt.wantUsage)
				}
				if tt.wantUsage {
					if store.writes != 0 || res.Type != "" {
						t.Errorf("a refused resume wrote %v, or did %+v", store.items, res)
					}
					return
				}
			} else if err != nil {
				t.Fatal(err)
			}
			got, ok := store.items["llm"]
			if tt.want == nil && ok || tt.want != nil && !reflect.DeepEqual(got, *tt.want) {
				t.Errorf("stored %+v (present %v), want %+v", got, ok, tt.want)
			}
			var woken []string
			for _, c := range q.VisibilityChanges() {
				if c.QueueURL != "lanes" || c.Timeout != 0 {
					t.Errorf("visibility change %+v, want the lanes queue's message made visible (0)", c)
				}
				if c.Err == nil {
					woken = append(woken, c.ReceiptHandle)
				}
			}
			if fmt.Sprint(woken) != fmt.Sprint(tt.wantWoken) || res.Woken != len(tt.wantWoken) {
				t.Errorf("woke %v (says %d), want %v", woken, res.Woken, tt.wantWoken)
			}
			left, err := room.Store.List(context.Background(), "llm")
			if err != nil {
				t.Fatal(err)
			}
			var groups []string
			for _, w := range left {
				groups = append(groups, w.Group)
			}
			if tt.sqsErr == nil && fmt.Sprint(groups) != fmt.Sprint(tt.wantLeft) {
				t.Errorf("still parked %v, want %v", groups, tt.wantLeft)
			}
			if wasPaused := len(tt.stored) > 0 && tt.stored[0].Pause != nil; (res.Pause != nil) != wasPaused {
				t.Errorf("Resume() pause %+v, want one: %v", res.Pause, wasPaused)
			}
			var b strings.Builder
			if err := res.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(b.String(), want) {
					t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// On a real FIFO queue (moto): a head parked by the pause, in flight for its 15-minute park, is
// received again at once after the resume; a head parked for a lane is not, and stays parked.
func TestResumeWakesTheParkedMessage(t *testing.T) {
	c := sqsClient(t)
	ctx := t.Context()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(fmt.Sprintf("resume-%d.fifo", queueSeq.Add(1))),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(out.QueueUrl)
	for _, g := range []string{"llm-0", "llm-w1"} {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageGroupId: aws.String(g), MessageBody: aws.String(`{"type":"llm","id":"` + g + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(visibility int32) map[string]sqstypes.Message {
		t.Helper()
		got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: visibility, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameMessageGroupId},
		})
		if err != nil {
			t.Fatal(err)
		}
		byGroup := map[string]sqstypes.Message{}
		for _, m := range got.Messages {
			byGroup[m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]] = m
		}
		return byGroup
	}
	// Both heads received and parked as the starter parks them: in flight for the paused park.
	heads := receive(900)
	if len(heads) != 2 {
		t.Fatalf("received %d heads, want 2", len(heads))
	}
	now := time.Now()
	room := parkedTable(t,
		waitroom.Waiter{Type: "llm", Group: "llm-0", MessageID: aws.ToString(heads["llm-0"].MessageId), ReceiptHandle: aws.ToString(heads["llm-0"].ReceiptHandle),
			Receives: 1, JobID: "llm-0", Paused: true, SubmittedAt: now, ParkedAt: now},
		waitroom.Waiter{Type: "llm", Group: "llm-w1", MessageID: aws.ToString(heads["llm-w1"].MessageId), ReceiptHandle: aws.ToString(heads["llm-w1"].ReceiptHandle),
			Receives: 1, JobID: "llm-w1", SubmittedAt: now, ParkedAt: now},
	)
	if again := receive(900); len(again) != 0 {
		t.Fatalf("parked heads received before the resume: %v", again)
	}
	store := newMemStore(config.Override{Type: "llm", Limit: 2, Pause: &config.Pause{Reason: "test", Since: now.Add(-time.Minute)}})
	res, err := ConfigEditor{Store: store, Defaults: defaults()}.Resume(ctx, "llm", Waker{Queue: c, QueueURL: url, WaitRoom: room})
	if err != nil {
		t.Fatal(err)
	}
	if res.Woken != 1 || res.Pause == nil {
		t.Errorf("Resume() = %+v, want the pause lifted and 1 group woken", res)
	}
	if again := receive(30); len(again) != 1 || aws.ToString(again["llm-0"].MessageId) != aws.ToString(heads["llm-0"].MessageId) {
		t.Errorf("received after the resume %v, want llm-0's head alone", again)
	}
	left, err := room.Store.List(ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Group != "llm-w1" {
		t.Errorf("still parked %+v, want llm-w1's record alone", left)
	}
}

// A reset of a paused type's item would resume it too: that is not what "reset" says, so it is
// refused (exit 2, nothing written) unless forced, with what it would do; forced, it says who wakes
// the groups the pause parked.
func TestResetOfAPausedType(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	paused := config.Override{Type: "payments", Limit: 3, Pause: &config.Pause{Reason: "outage", Since: now.Add(-time.Hour)}}
	for _, tt := range []struct {
		name    string
		stored  config.Override
		force   bool
		wantErr string // in the refusal; "" the reset is done
		want    string // in the warnings; "" none about a pause
	}{
		{name: "paused", stored: paused,
			wantErr: `type payments is paused (for 1h00m: "outage"): a reset drops its live override, pause included, so it resumes within 30s (ConfigCacheSeconds) and its waiting jobs start. Nothing written: resume it with "sfnlimit resume payments", or add --force to reset it anyway`},
		{name: "paused, forced", stored: paused, force: true,
			want: `type payments was paused (for 1h00m: "outage"): the reset resumes it, and the releaser's sweep wakes its jobs parked by the pause within a minute (sfnlimit resume payments wakes them at once)`},
		{name: "not paused", stored: config.Override{Type: "payments", Limit: 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored)
			res, err := ConfigEditor{Store: store, Defaults: defaults(), CacheAge: 30 * time.Second, Now: func() time.Time { return now }}.Reset(context.Background(), "payments", tt.force)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Reset() = %v, want a usage error with %q", err, tt.wantErr)
				}
				if _, ok := store.items["payments"]; !ok || store.writes != 0 {
					t.Errorf("a refused reset changed the overrides: %v (%d writes)", store.items, store.writes)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := store.items["payments"]; ok || res.After.Pause != nil {
				t.Errorf("after the reset: stored %v, pause %+v; want neither", store.items, res.After.Pause)
			}
			w := strings.Join(res.Warnings, "\n")
			if tt.want != "" && !strings.Contains(w, tt.want) || tt.want == "" && strings.Contains(w, "paused") {
				t.Errorf("warnings %q, want %q", res.Warnings, tt.want)
			}
		})
	}
}
