package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

// sampleArn is a well-formed state machine ARN, for the checks made before any stack is opened.
const sampleArn = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample"

// attach against the local stack: a workflow the stack's roles may not start is refused with the
// command that lists it and nothing is written; the stack's own sample, or one listed in
// ExtraStateMachineArns, is written with its release mode, which config get, status and config set
// show and change.
func TestAttachLocal(t *testing.T) {
	t.Parallel()
	s, info := localStack(t)
	sample := s.Info().Output(resources.SampleStateMachineArn)

	// A Standard workflow of the user's own, created in the local stack (moto) beside the limiter.
	name := fmt.Sprintf("mine%d", typeSeq.Add(1))
	out, err := sfn.NewFromConfig(s.AWSConfig(nil)).CreateStateMachine(t.Context(), &sfn.CreateStateMachineInput{
		Name:       aws.String(name),
		Definition: aws.String(`{"StartAt":"Work","States":{"Work":{"Type":"Pass","End":true}}}`),
		RoleArn:    aws.String(fmt.Sprintf("arn:aws:iam::%s:role/mine", stack.Account)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mine := aws.ToString(out.StateMachineArn)

	// Not in ExtraStateMachineArns: refused, with the line that runs the local stack with it listed.
	typ := fmt.Sprintf("att%d", typeSeq.Add(1))
	r := must(t, local(t, "attach", mine, "--type", typ, "--limit", "2"), exitError)
	for _, want := range []string{
		"ok    state machine  " + name + " exists: STANDARD, ACTIVE",
		"fail  stack roles",
		"sfnlimit local up --info " + info + " ",
		"--param 'ExtraStateMachineArns=" + mine + "'",
		"then run attach again.",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("attach of an unlisted workflow lacks %q:\n%s", want, r)
		}
	}
	if !strings.Contains(r.stderr, "attach refused, nothing written: the stack's roles may not start "+name) {
		t.Errorf("attach of an unlisted workflow does not say it refused:\n%s", r)
	}
	if v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", "--json"), exitOK)); find(v.Types, typ) != nil {
		t.Errorf("a refused attach wrote type %s: %+v", typ, find(v.Types, typ))
	}

	// Listed (the parameters the stack runs with, as --param gives them): written in events mode,
	// the default.
	res := decode[ops.AttachResult](t, must(t, local(t, "attach", mine, "--type", typ, "--limit", "2", "--json", "--param", "ExtraStateMachineArns="+mine), exitOK))
	if res.Written == nil || *res.Written != (ops.OverrideView{Limit: 2, StateMachineArn: mine, Release: "events"}) {
		t.Errorf("attach wrote %+v, want limit 2, %s, events", res.Written, name)
	}
	if !strings.Contains(res.Submit, "sfnlimit submit --type "+typ+" --id job-1 --input '{}' --local "+info) {
		t.Errorf("attach submit line = %q", res.Submit)
	}
	tv := find(decode[ops.ConfigView](t, must(t, local(t, "config", "get", "--json"), exitOK)).Types, typ)
	if tv == nil || tv.Limit != 2 || tv.StateMachineArn != mine || tv.Release != "events" || tv.ReleaseSource != "override" {
		t.Errorf("config get after attach = %+v", tv)
	}

	// The stack's own sample in step mode: its Release state names the releaser.
	typ2 := fmt.Sprintf("att%d", typeSeq.Add(1))
	r = must(t, local(t, "attach", sample, "--type", typ2, "--limit", "1", "--release", "step", "--max-attempts", "4"), exitOK)
	for _, want := range []string{
		"ok    release        step mode: its Release state calls the releaser",
		"ok    stack roles    the stack's own state machine (SampleStateMachineArn)",
		"wrote the live override of type " + typ2 + ": limit=1 maxAttempts=4 stateMachine=sfnlimit-sample release=step",
		"release step -> step (override)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("attach of the sample lacks %q:\n%s", want, r)
		}
	}

	// config set switches the mode; config get and status show it.
	must(t, local(t, "config", "set", typ2, "--release", "events"), exitOK)
	r = must(t, local(t, "config", "get", typ2), exitOK)
	if !strings.Contains(r.stdout, "events (override)") || !strings.Contains(r.stdout, "release=events") || !strings.Contains(r.stdout, "Release mode without an override: step (ReleaseMode).") {
		t.Errorf("config get after --release events:\n%s", r)
	}
	// (RATE, PAUSED and KEYS columns show once some type of the shared stack has a rate, a pause or
	// keyed work: "-" for this type.)
	r = must(t, local(t, "status"), exitOK)
	if !strings.Contains(r.stdout, "RELEASE") || !regexpMatch(`(?m)^`+typ2+` +1 +override +\S+ +events +0 +1 +(- +)*-$`, r.stdout) {
		t.Errorf("status does not show %s in events mode:\n%s", typ2, r)
	}
	// A state machine that does not exist is refused before the mode is written.
	r = must(t, local(t, "config", "set", typ2, "--release", "step", "--state-machine", strings.Replace(sample, "sfnlimit-sample", "gone", 1)), exitUsage)
	if !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("config set with a missing state machine:\n%s", r)
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
