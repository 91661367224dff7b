package cfntemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Name returns the physical name of a resource: its name property when the template sets one
// (QueueName, TableName, FunctionName, Name or StateMachineName), else "{StackName}-{LogicalID}",
// with ".fifo" for a FIFO queue. CloudFormation would add a random suffix to generated names;
// the local stack does not need one.
func (r *Resolver) Name(logicalID string) (string, error) {
	res, ok := r.t.byID[logicalID]
	if !ok {
		return "", fmt.Errorf("resource %s is not in the template", logicalID)
	}
	var prop string
	switch res.Type {
	case TypeQueue:
		prop = "QueueName"
	case TypeTable:
		prop = "TableName"
	case TypeFunction:
		prop = "FunctionName"
	case TypeStateMachine:
		prop = "Name"
	case TypeCfnStateMachine:
		prop = "StateMachineName"
	}
	if v, ok := res.Properties[prop]; ok && prop != "" {
		ev, err := r.eval(v)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", logicalID, prop, err)
		}
		s, err := scalarString(ev)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", logicalID, prop, err)
		}
		return s, nil
	}
	name := r.pseudo["AWS::StackName"] + "-" + logicalID
	if res.Type == TypeQueue && isTrue(res.Properties["FifoQueue"]) {
		name += ".fifo"
	}
	return name, nil
}

// QueueConfig is what CreateQueue needs to make a queue of the template.
type QueueConfig struct {
	LogicalID string
	Name      string
	// Attributes are CreateQueue attributes, by SQS attribute name (FifoQueue, VisibilityTimeout,
	// RedrivePolicy as JSON with its deadLetterTargetArn resolved, ...). Properties the template
	// does not set are absent.
	Attributes map[string]string
}

// queueAttributes are the AWS::SQS::Queue properties that are CreateQueue attributes; their
// SQS names are the same. QueueName is the name; Tags are not needed locally.
var queueAttributes = []string{
	"ContentBasedDeduplication", "DeduplicationScope", "DelaySeconds", "FifoQueue",
	"FifoThroughputLimit", "KmsDataKeyReusePeriodSeconds", "KmsMasterKeyId", "MaximumMessageSize",
	"MessageRetentionPeriod", "ReceiveMessageWaitTimeSeconds", "RedriveAllowPolicy",
	"RedrivePolicy", "SqsManagedSseEnabled", "VisibilityTimeout",
}

// Queue resolves a queue's name and CreateQueue attributes. The queues in q.DependsOn must be
// known to Env.Attr (their Arn) first.
func (r *Resolver) Queue(q Queue) (QueueConfig, error) {
	res, ok := r.t.byID[q.LogicalID]
	if !ok || res.Type != TypeQueue {
		return QueueConfig{}, fmt.Errorf("%s is not a queue of the template", q.LogicalID)
	}
	name, err := r.Name(q.LogicalID)
	if err != nil {
		return QueueConfig{}, err
	}
	cfg := QueueConfig{LogicalID: q.LogicalID, Name: name, Attributes: map[string]string{}}
	for prop, v := range res.Properties {
		if prop == "QueueName" || prop == "Tags" {
			continue
		}
		if !slices.Contains(queueAttributes, prop) {
			return QueueConfig{}, fmt.Errorf("queue %s: property %s is not supported", q.LogicalID, prop)
		}
		ev, err := r.eval(v)
		if err != nil {
			return QueueConfig{}, fmt.Errorf("queue %s %s: %w", q.LogicalID, prop, err)
		}
		if ev == noValue {
			continue
		}
		var s string
		switch x := ev.(type) {
		case map[string]any: // RedrivePolicy, RedriveAllowPolicy: SQS takes them as JSON text
			b, err := json.Marshal(x)
			if err != nil {
				return QueueConfig{}, fmt.Errorf("queue %s %s: %w", q.LogicalID, prop, err)
			}
			s = string(b)
		default:
			if s, err = scalarString(x); err != nil {
				return QueueConfig{}, fmt.Errorf("queue %s %s: %w", q.LogicalID, prop, err)
			}
		}
		cfg.Attributes[prop] = s
	}
	return cfg, nil
}

// StateMachineConfig is what CreateStateMachine needs, besides a role.
type StateMachineConfig struct {
	LogicalID string
	Name      string
	Type      string // STANDARD or EXPRESS
	// Definition is the ASL JSON with the DefinitionSubstitutions applied.
	Definition string
}

var placeholder = regexp.MustCompile(`\$\{[A-Za-z0-9_.:-]+\}`)

// StateMachine resolves a state machine's name and definition. CloudFormation replaces each
// "${Key}" of DefinitionSubstitutions in the definition's text before parsing it; so does this.
// Every value must be known (the releaser's ARN, for the sample), a placeholder left without a
// substitution is an error, and so is a definition that is not JSON afterwards.
func (r *Resolver) StateMachine(sm StateMachine) (StateMachineConfig, error) {
	res, ok := r.t.byID[sm.LogicalID]
	if !ok || (res.Type != TypeStateMachine && res.Type != TypeCfnStateMachine) {
		return StateMachineConfig{}, fmt.Errorf("%s is not a state machine of the template", sm.LogicalID)
	}
	name, err := r.Name(sm.LogicalID)
	if err != nil {
		return StateMachineConfig{}, err
	}
	cfg := StateMachineConfig{LogicalID: sm.LogicalID, Name: name, Type: "STANDARD"}
	typeProp := "Type"
	if res.Type == TypeCfnStateMachine {
		typeProp = "StateMachineType"
	}
	if v, ok := res.Properties[typeProp]; ok {
		ev, err := r.eval(v)
		if err != nil {
			return cfg, fmt.Errorf("state machine %s %s: %w", sm.LogicalID, typeProp, err)
		}
		if cfg.Type, err = scalarString(ev); err != nil {
			return cfg, fmt.Errorf("state machine %s %s: %w", sm.LogicalID, typeProp, err)
		}
	}

	var text string
	switch {
	case sm.DefinitionPath != "":
		b, err := os.ReadFile(sm.DefinitionPath)
		if err != nil {
			return cfg, fmt.Errorf("state machine %s: read definition: %w", sm.LogicalID, err)
		}
		text = string(b)
	case res.Properties["Definition"] != nil:
		ev, err := r.eval(res.Properties["Definition"])
		if err != nil {
			return cfg, fmt.Errorf("state machine %s Definition: %w", sm.LogicalID, err)
		}
		b, err := json.MarshalIndent(ev, "", "  ")
		if err != nil {
			return cfg, fmt.Errorf("state machine %s Definition: %w", sm.LogicalID, err)
		}
		text = string(b)
	case res.Properties["DefinitionString"] != nil:
		ev, err := r.eval(res.Properties["DefinitionString"])
		if err != nil {
			return cfg, fmt.Errorf("state machine %s DefinitionString: %w", sm.LogicalID, err)
		}
		if text, err = scalarString(ev); err != nil {
			return cfg, fmt.Errorf("state machine %s DefinitionString: %w", sm.LogicalID, err)
		}
	default:
		return cfg, fmt.Errorf("state machine %s has no local definition (DefinitionUri as a path, Definition or DefinitionString)", sm.LogicalID)
	}

	subs := asMap(res.Properties["DefinitionSubstitutions"])
	keys := make([]string, 0, len(subs))
	for k := range subs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		ev, err := r.eval(subs[k])
		if err != nil {
			return cfg, fmt.Errorf("state machine %s DefinitionSubstitutions %s: %w", sm.LogicalID, k, err)
		}
		s, err := scalarString(ev)
		if err != nil {
			return cfg, fmt.Errorf("state machine %s DefinitionSubstitutions %s: %w", sm.LogicalID, k, err)
		}
		pairs = append(pairs, "${"+k+"}", s)
	}
	text = strings.NewReplacer(pairs...).Replace(text)

	if left := placeholder.FindAllString(text, -1); len(left) > 0 {
		return cfg, fmt.Errorf("state machine %s: %s in the definition has no DefinitionSubstitutions entry", sm.LogicalID, strings.Join(slices.Compact(left), ", "))
	}
	if !json.Valid([]byte(text)) {
		return cfg, fmt.Errorf("state machine %s: the definition is not valid JSON after substitutions", sm.LogicalID)
	}
	cfg.Definition = text
	return cfg, nil
}

// FunctionConfig is a function's configuration with SAM's Globals applied and every value
// resolved.
type FunctionConfig struct {
	LogicalID     string
	Name          string
	CodeDir       string
	Handler       string
	Runtime       string
	Architectures []string
	MemorySize    int // MB; SAM's default 128
	Timeout       int // seconds; SAM's default 3
	Environment   map[string]string
	SQSEvents     []SQSEvent     // by event name
	EventRules    []EventRule    // EventBridgeRule and CloudWatchEvent events, by event name
	Schedules     []Schedule     // Schedule events, by event name
	OtherEvents   []string       // names of events of other types (not resolved)
	Metadata      map[string]any // the resource's Metadata (BuildMethod, ...), unresolved
}

// SQSEvent is an SQS event source of a function (an event source mapping).
type SQSEvent struct {
	Name                           string
	QueueLogicalID                 string
	BatchSize                      int // Lambda's default 10
	MaximumBatchingWindowInSeconds int
	FunctionResponseTypes          []string
	MaximumConcurrency             int // ScalingConfig.MaximumConcurrency; 0 when not set
	Enabled                        bool
}

// ReportsBatchItemFailures reports whether the function returns batch item failures.
func (e SQSEvent) ReportsBatchItemFailures() bool {
	return slices.Contains(e.FunctionResponseTypes, "ReportBatchItemFailures")
}

// EventRule is an EventBridge rule that invokes a function.
type EventRule struct {
	Name    string
	Pattern json.RawMessage // the resolved event pattern
	Enabled bool
}

// Schedule is a scheduled EventBridge rule that invokes a function with a "Scheduled Event".
type Schedule struct {
	Name       string
	Expression string // rate(...) or cron(...)
	Enabled    bool
}

// Function resolves a function's configuration: Globals merged as SAM merges them (maps merged,
// lists appended to the Globals' ones, other values replaced), then every value resolved.
func (r *Resolver) Function(f Function) (FunctionConfig, error) {
	res, ok := r.t.byID[f.LogicalID]
	if !ok || res.Type != TypeFunction {
		return FunctionConfig{}, fmt.Errorf("%s is not a function of the template", f.LogicalID)
	}
	name, err := r.Name(f.LogicalID)
	if err != nil {
		return FunctionConfig{}, err
	}
	props := asMap(mergeGlobals(r.t.globals, res.Properties))
	cfg := FunctionConfig{
		LogicalID:   f.LogicalID,
		Name:        name,
		CodeDir:     f.CodeDir,
		MemorySize:  128,
		Timeout:     3,
		Environment: map[string]string{},
		Metadata:    res.Metadata,
	}
	fail := func(what string, err error) (FunctionConfig, error) {
		return FunctionConfig{}, fmt.Errorf("function %s %s: %w", f.LogicalID, what, err)
	}

	for prop, dst := range map[string]*string{"Handler": &cfg.Handler, "Runtime": &cfg.Runtime} {
		if v, ok := props[prop]; ok {
			ev, err := r.eval(v)
			if err != nil {
				return fail(prop, err)
			}
			if *dst, err = scalarString(ev); err != nil {
				return fail(prop, err)
			}
		}
	}
	for prop, dst := range map[string]*int{"MemorySize": &cfg.MemorySize, "Timeout": &cfg.Timeout} {
		if v, ok := props[prop]; ok {
			ev, err := r.eval(v)
			if err != nil {
				return fail(prop, err)
			}
			if *dst, err = toInt(ev); err != nil {
				return fail(prop, err)
			}
		}
	}
	if v, ok := props["Architectures"]; ok {
		ev, err := r.eval(v)
		if err != nil {
			return fail("Architectures", err)
		}
		for _, a := range asList(ev) {
			s, err := scalarString(a)
			if err != nil {
				return fail("Architectures", err)
			}
			cfg.Architectures = append(cfg.Architectures, s)
		}
	}
	vars := asMap(asMap(props["Environment"])["Variables"])
	for k, v := range vars {
		ev, err := r.eval(v)
		if err != nil {
			return fail("environment variable "+k, err)
		}
		if ev == noValue {
			continue
		}
		if cfg.Environment[k], err = scalarString(ev); err != nil {
			return fail("environment variable "+k, err)
		}
	}

	events := asMap(props["Events"])
	names := make([]string, 0, len(events))
	for n := range events {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ev := asMap(events[n])
		typ, _ := ev["Type"].(string)
		ep := asMap(ev["Properties"])
		switch typ {
		case "SQS":
			e, err := r.sqsEvent(n, ep)
			if err != nil {
				return fail("event "+n, err)
			}
			cfg.SQSEvents = append(cfg.SQSEvents, e)
		case "EventBridgeRule", "CloudWatchEvent":
			p, err := r.eval(ep["Pattern"])
			if err != nil {
				return fail("event "+n+" Pattern", err)
			}
			b, err := json.Marshal(p)
			if err != nil {
				return fail("event "+n+" Pattern", err)
			}
			enabled, err := r.enabled(ep)
			if err != nil {
				return fail("event "+n, err)
			}
			cfg.EventRules = append(cfg.EventRules, EventRule{Name: n, Pattern: b, Enabled: enabled})
		case "Schedule":
			s, err := r.eval(ep["Schedule"])
			if err != nil {
				return fail("event "+n+" Schedule", err)
			}
			expr, err := scalarString(s)
			if err != nil {
				return fail("event "+n+" Schedule", err)
			}
			enabled, err := r.enabled(ep)
			if err != nil {
				return fail("event "+n, err)
			}
			cfg.Schedules = append(cfg.Schedules, Schedule{Name: n, Expression: expr, Enabled: enabled})
		default:
			cfg.OtherEvents = append(cfg.OtherEvents, n)
		}
	}
	return cfg, nil
}

func (r *Resolver) sqsEvent(name string, p map[string]any) (SQSEvent, error) {
	e := SQSEvent{Name: name, BatchSize: 10}
	queue := asMap(p["Queue"])
	switch {
	case queue["Fn::GetAtt"] != nil:
		a := asList(queue["Fn::GetAtt"])
		if len(a) == 2 {
			e.QueueLogicalID, _ = a[0].(string)
		}
	case queue["Ref"] != nil:
		e.QueueLogicalID, _ = queue["Ref"].(string)
	}
	if res, ok := r.t.byID[e.QueueLogicalID]; !ok || res.Type != TypeQueue {
		return e, errors.New("Queue is not !GetAtt <queue of this template>.Arn")
	}
	for prop, dst := range map[string]*int{"BatchSize": &e.BatchSize, "MaximumBatchingWindowInSeconds": &e.MaximumBatchingWindowInSeconds} {
		if v, ok := p[prop]; ok {
			ev, err := r.eval(v)
			if err != nil {
				return e, fmt.Errorf("%s: %w", prop, err)
			}
			if *dst, err = toInt(ev); err != nil {
				return e, fmt.Errorf("%s: %w", prop, err)
			}
		}
	}
	if v, ok := p["FunctionResponseTypes"]; ok {
		ev, err := r.eval(v)
		if err != nil {
			return e, fmt.Errorf("FunctionResponseTypes: %w", err)
		}
		for _, t := range asList(ev) {
			s, err := scalarString(t)
			if err != nil {
				return e, fmt.Errorf("FunctionResponseTypes: %w", err)
			}
			e.FunctionResponseTypes = append(e.FunctionResponseTypes, s)
		}
	}
	if v, ok := asMap(p["ScalingConfig"])["MaximumConcurrency"]; ok {
		ev, err := r.eval(v)
		if err != nil {
			return e, fmt.Errorf("ScalingConfig.MaximumConcurrency: %w", err)
		}
		if e.MaximumConcurrency, err = toInt(ev); err != nil {
			return e, fmt.Errorf("ScalingConfig.MaximumConcurrency: %w", err)
		}
	}
	var err error
	e.Enabled, err = r.enabled(p)
	return e, err
}

// enabled reads an event's Enabled (bool) or State (ENABLED, DISABLED); both absent: enabled.
func (r *Resolver) enabled(p map[string]any) (bool, error) {
	if v, ok := p["Enabled"]; ok {
		ev, err := r.eval(v)
		if err != nil {
			return false, fmt.Errorf("Enabled: %w", err)
		}
		s, err := scalarString(ev)
		if err != nil {
			return false, fmt.Errorf("Enabled: %w", err)
		}
		return strings.EqualFold(s, "true"), nil
	}
	if v, ok := p["State"]; ok {
		ev, err := r.eval(v)
		if err != nil {
			return false, fmt.Errorf("State: %w", err)
		}
		s, err := scalarString(ev)
		if err != nil {
			return false, fmt.Errorf("State: %w", err)
		}
		return s == "ENABLED", nil
	}
	return true, nil
}

// mergeGlobals merges SAM Globals into a resource's properties: maps merge key by key (the
// resource wins), lists are the Globals' items followed by the resource's, and any other value
// of the resource replaces the Globals' one. Intrinsic functions count as values, not maps.
func mergeGlobals(global, local any) any {
	gm, gIsMap := global.(map[string]any)
	lm, lIsMap := local.(map[string]any)
	if gIsMap && lIsMap && !isIntrinsic(gm) && !isIntrinsic(lm) {
		out := make(map[string]any, len(gm)+len(lm))
		for k, v := range gm {
			out[k] = v
		}
		for k, v := range lm {
			if g, ok := gm[k]; ok {
				out[k] = mergeGlobals(g, v)
			} else {
				out[k] = v
			}
		}
		return out
	}
	gl, gIsList := global.([]any)
	ll, lIsList := local.([]any)
	if gIsList && lIsList {
		return append(slices.Clone(gl), ll...)
	}
	if local == nil {
		return global
	}
	return local
}

func isIntrinsic(m map[string]any) bool {
	if len(m) != 1 {
		return false
	}
	for k := range m {
		return k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::")
	}
	return false
}

// Outputs resolves the template's Outputs (those whose Condition holds), by output name.
func (r *Resolver) Outputs() (map[string]string, error) {
	out := map[string]string{}
	for _, name := range r.t.outputIDs {
		o := asMap(r.t.outputs[name])
		if c, ok := o["Condition"].(string); ok {
			holds, err := r.Condition(c)
			if err != nil {
				return nil, fmt.Errorf("output %s: %w", name, err)
			}
			if !holds {
				continue
			}
		}
		ev, err := r.eval(o["Value"])
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", name, err)
		}
		if out[name], err = scalarString(ev); err != nil {
			return nil, fmt.Errorf("output %s: %w", name, err)
		}
	}
	return out, nil
}

// OutputNames returns the names of the template's Outputs in document order.
func (t *Template) OutputNames() []string { return slices.Clone(t.outputIDs) }
