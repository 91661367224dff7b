package releaser

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
)

// runningLister lists a state machine's running executions (sfn.Client).
type runningLister interface {
	ListExecutions(context.Context, *sfn.ListExecutionsInput, ...func(*sfn.Options)) (*sfn.ListExecutionsOutput, error)
}

// maxRunningPages bounds the ListExecutions pages (1,000 executions each) the sweep reads per state
// machine; a state machine with more running executions has its due leases described one by one.
const maxRunningPages = 20

// withoutRunning drops from due the started leases whose execution is in its state machine's list of
// running executions, so a sweep describes only the executions that may have ended: one
// ListExecutions call per 1,000 running executions of a state machine instead of one DescribeExecution
// per lease. That is what lets the sweep run every minute, the bound on how long a lane stays held
// after a lost status event. ListExecutions is eventually consistent like DescribeExecution: an
// execution missing from the list is only described, never released on the list's word.
// Dead-lettering leases are always kept (the sweep finishes them), as are the leases of a state
// machine whose list could not be read whole.
func (h *Handler) withoutRunning(ctx context.Context, due []lease.Lease) []lease.Lease {
	if h.Running == nil || len(due) == 0 {
		return due
	}
	machines := map[string]bool{}
	for _, l := range due {
		if sm := stateMachineOf(l); sm != "" && l.Status != lease.DeadLettering {
			machines[sm] = true
		}
	}
	running := map[string]bool{}
	listed := map[string]bool{}
	for _, sm := range slices.Sorted(maps.Keys(machines)) {
		arns, err := h.listRunning(ctx, sm)
		if err != nil {
			h.Log.WarnContext(ctx, "sweep: running executions not listed; describing each due lease", "stateMachineArn", sm, "error", err)
			continue
		}
		listed[sm] = true
		for _, a := range arns {
			running[a] = true
		}
	}
	out := due[:0:0]
	for _, l := range due {
		if l.Status != lease.DeadLettering && listed[stateMachineOf(l)] && running[l.ExecutionArn] {
			continue
		}
		out = append(out, l)
	}
	return out
}

func (h *Handler) listRunning(ctx context.Context, sm string) ([]string, error) {
	var arns []string
	p := sfn.NewListExecutionsPaginator(h.Running, &sfn.ListExecutionsInput{
		StateMachineArn: aws.String(sm), StatusFilter: sfntypes.ExecutionStatusRunning, MaxResults: 1000,
	})
	for page := 0; p.HasMorePages(); page++ {
		if page == maxRunningPages {
			return nil, fmt.Errorf("more than %d running executions", maxRunningPages*1000)
		}
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range out.Executions {
			arns = append(arns, aws.ToString(e.ExecutionArn))
		}
	}
	return arns, nil
}

// stateMachineOf is the state machine whose running executions a started lease's execution is
// listed among: the one its claim names, else the one in its execution's ARN. A claim on a version
// or alias ARN (...:stateMachine:NAME:3, :PROD) is listed by the state machine itself, whose list
// holds every execution of it whatever version or alias started it (and whose ARNs, like the
// lease's, carry no qualifier): one list per state machine, however many versions and aliases the
// types' claims name.
func stateMachineOf(l lease.Lease) string {
	if l.ExecutionArn == "" {
		return ""
	}
	if l.StateMachineArn != "" {
		return job.UnqualifiedStateMachine(l.StateMachineArn)
	}
	return job.StateMachineOf(l.ExecutionArn)
}
