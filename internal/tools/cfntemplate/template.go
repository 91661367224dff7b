// Package cfntemplate reads the application's SAM template (template.yaml) and resolves, for the
// local stack, what it needs to create the same resources: queue attributes, the table's keys,
// the state machine's definition with its substitutions applied, and each function's environment
// and event sources. template.yaml stays the one source of truth (docs/design.md).
//
// It understands the parts of CloudFormation the template uses: short-form tags (!Ref, !GetAtt,
// !Sub, !If, !Equals, !Not, !And, !Or, !Join, !Select, !Split, !FindInMap, !Condition) and their
// long forms, Parameters with their constraints, Conditions, Mappings, pseudo parameters and
// SAM's Globals for functions. Attributes of resources (a queue's URL, a function's ARN) come
// from the caller, who knows them once it has created the resource.
//
// Typical use:
//
//	tpl, err := cfntemplate.Load("template.yaml")
//	attrs := cfntemplate.Attributes{}
//	r, err := tpl.Resolver(cfntemplate.Env{Parameters: overrides, Attr: attrs.Lookup})
//	for _, q := range tpl.Queues() { // dead-letter targets first
//		cfg, err := r.Queue(q) // CreateQueue(cfg.Name, cfg.Attributes), then record its URL and ARN in attrs
//	}
package cfntemplate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"gopkg.in/yaml.v3"
)

// Resource types the package knows.
const (
	TypeQueue             = "AWS::SQS::Queue"
	TypeTable             = "AWS::DynamoDB::Table"
	TypeFunction          = "AWS::Serverless::Function"
	TypeStateMachine      = "AWS::Serverless::StateMachine"
	TypeCfnStateMachine   = "AWS::StepFunctions::StateMachine"
	globalsFunctionPrefix = "Function"
)

// Template is a parsed template. It is read-only once loaded and safe for concurrent use.
type Template struct {
	dir        string // directory of the template file: CodeUri and DefinitionUri are relative to it
	params     []Parameter
	conditions map[string]any
	mappings   map[string]any
	globals    map[string]any // Globals.Function
	resources  []resource     // in document order
	byID       map[string]*resource
	outputs    map[string]any
	outputIDs  []string
	rules      []Rule
}

type resource struct {
	ID         string
	Type       string
	Condition  string
	Properties map[string]any
	Metadata   map[string]any
}

// Parameter is a template parameter with its constraints. Number values stay text, as
// CloudFormation hands them to !Ref.
type Parameter struct {
	Name           string
	Type           string // String, Number, CommaDelimitedList, ...
	Description    string
	Default        string
	HasDefault     bool
	AllowedValues  []string
	AllowedPattern string
	MinValue       *float64
	MaxValue       *float64
	MinLength      *int
	MaxLength      *int
}

// Load reads and parses the template at path.
func Load(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read template: %w", err)
	}
	t, err := Parse(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return t, nil
}

// Parse parses a template (YAML or JSON). dir is the directory that relative paths in it
// (CodeUri, DefinitionUri) are relative to.
func Parse(data []byte, dir string) (*Template, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	doc, err := decodeNode(&root)
	if err != nil {
		return nil, err
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("template is not a mapping")
	}

	t := &Template{
		dir:        dir,
		conditions: asMap(top["Conditions"]),
		mappings:   asMap(top["Mappings"]),
		globals:    asMap(asMap(top["Globals"])[globalsFunctionPrefix]),
		byID:       map[string]*resource{},
		outputs:    asMap(top["Outputs"]),
		outputIDs:  orderedKeys(&root, "Outputs"),
	}

	params := asMap(top["Parameters"])
	for _, name := range orderedKeys(&root, "Parameters") {
		p, err := parseParameter(name, asMap(params[name]))
		if err != nil {
			return nil, err
		}
		t.params = append(t.params, p)
	}

	if t.rules, err = parseRules(top, orderedKeys(&root, "Rules")); err != nil {
		return nil, err
	}

	resources := asMap(top["Resources"])
	if len(resources) == 0 {
		return nil, errors.New("template has no Resources")
	}
	for _, id := range orderedKeys(&root, "Resources") {
		m := asMap(resources[id])
		typ, _ := m["Type"].(string)
		if typ == "" {
			return nil, fmt.Errorf("resource %s has no Type", id)
		}
		cond, _ := m["Condition"].(string)
		t.resources = append(t.resources, resource{
			ID:         id,
			Type:       typ,
			Condition:  cond,
			Properties: asMap(m["Properties"]),
			Metadata:   asMap(m["Metadata"]),
		})
	}
	for i := range t.resources {
		t.byID[t.resources[i].ID] = &t.resources[i]
	}
	return t, nil
}

func parseParameter(name string, m map[string]any) (Parameter, error) {
	p := Parameter{Name: name}
	p.Type, _ = m["Type"].(string)
	if p.Type == "" {
		return p, fmt.Errorf("parameter %s has no Type", name)
	}
	p.Description, _ = m["Description"].(string)
	if d, ok := m["Default"]; ok {
		s, err := scalarString(d)
		if err != nil {
			return p, fmt.Errorf("parameter %s Default: %w", name, err)
		}
		p.Default, p.HasDefault = s, true
	}
	if av, ok := m["AllowedValues"].([]any); ok {
		for _, v := range av {
			s, err := scalarString(v)
			if err != nil {
				return p, fmt.Errorf("parameter %s AllowedValues: %w", name, err)
			}
			p.AllowedValues = append(p.AllowedValues, s)
		}
	}
	p.AllowedPattern, _ = m["AllowedPattern"].(string)
	for key, dst := range map[string]**float64{"MinValue": &p.MinValue, "MaxValue": &p.MaxValue} {
		if v, ok := m[key]; ok {
			f, err := toFloat(v)
			if err != nil {
				return p, fmt.Errorf("parameter %s %s: %w", name, key, err)
			}
			*dst = &f
		}
	}
	for key, dst := range map[string]**int{"MinLength": &p.MinLength, "MaxLength": &p.MaxLength} {
		if v, ok := m[key]; ok {
			i, err := toInt(v)
			if err != nil {
				return p, fmt.Errorf("parameter %s %s: %w", name, key, err)
			}
			*dst = &i
		}
	}
	return p, nil
}

// Parameters returns the template's parameters in document order.
func (t *Template) Parameters() []Parameter { return slices.Clone(t.params) }

// Parameter returns the named parameter.
func (t *Template) Parameter(name string) (Parameter, bool) {
	for _, p := range t.params {
		if p.Name == name {
			return p, true
		}
	}
	return Parameter{}, false
}

// Dir is the directory the template was loaded from.
func (t *Template) Dir() string { return t.dir }

// ResourceIDs returns the logical IDs of the resources of type typ, in document order
// (every resource when typ is empty).
func (t *Template) ResourceIDs(typ string) []string {
	var ids []string
	for _, r := range t.resources {
		if typ == "" || r.Type == typ {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// Queue is an AWS::SQS::Queue of the template; Resolver.Queue resolves its attributes.
type Queue struct {
	LogicalID string
	Fifo      bool
	// DependsOn lists the other queues its properties reference (its dead-letter target).
	DependsOn []string
}

// Queues returns the template's queues, every queue after the queues it references, and
// otherwise in document order.
func (t *Template) Queues() []Queue {
	var qs []Queue
	for _, r := range t.resources {
		if r.Type != TypeQueue {
			continue
		}
		q := Queue{LogicalID: r.ID, Fifo: isTrue(r.Properties["FifoQueue"])}
		for _, ref := range references(r.Properties) {
			if d, ok := t.byID[ref]; ok && d.Type == TypeQueue && ref != r.ID {
				q.DependsOn = append(q.DependsOn, ref)
			}
		}
		sort.Strings(q.DependsOn)
		q.DependsOn = slices.Compact(q.DependsOn)
		qs = append(qs, q)
	}
	return orderQueues(qs)
}

// orderQueues sorts queues so that each comes after those it depends on (stable otherwise).
func orderQueues(qs []Queue) []Queue {
	done := map[string]bool{}
	out := make([]Queue, 0, len(qs))
	for len(out) < len(qs) {
		progressed := false
		for _, q := range qs {
			if done[q.LogicalID] {
				continue
			}
			ready := true
			for _, d := range q.DependsOn {
				if !done[d] {
					ready = false
				}
			}
			if ready {
				out = append(out, q)
				done[q.LogicalID] = true
				progressed = true
			}
		}
		if !progressed { // a cycle: CloudFormation would refuse it; keep document order
			for _, q := range qs {
				if !done[q.LogicalID] {
					out = append(out, q)
					done[q.LogicalID] = true
				}
			}
		}
	}
	return out
}

// Table is an AWS::DynamoDB::Table of the template: what CreateTable needs besides the name.
type Table struct {
	LogicalID            string
	BillingMode          string
	KeySchema            []KeyElement
	AttributeDefinitions []AttributeDefinition
}

// KeyElement is one key of a table's key schema.
type KeyElement struct {
	AttributeName string
	KeyType       string // HASH or RANGE
}

// AttributeDefinition is the type of one key attribute.
type AttributeDefinition struct {
	AttributeName string
	AttributeType string // S, N or B
}

// Tables returns the template's DynamoDB tables in document order.
func (t *Template) Tables() ([]Table, error) {
	var out []Table
	for _, r := range t.resources {
		if r.Type != TypeTable {
			continue
		}
		tb := Table{LogicalID: r.ID}
		tb.BillingMode, _ = r.Properties["BillingMode"].(string)
		for _, k := range asList(r.Properties["KeySchema"]) {
			m := asMap(k)
			name, _ := m["AttributeName"].(string)
			typ, _ := m["KeyType"].(string)
			if name == "" || typ == "" {
				return nil, fmt.Errorf("table %s: KeySchema entries need literal AttributeName and KeyType", r.ID)
			}
			tb.KeySchema = append(tb.KeySchema, KeyElement{AttributeName: name, KeyType: typ})
		}
		for _, a := range asList(r.Properties["AttributeDefinitions"]) {
			m := asMap(a)
			name, _ := m["AttributeName"].(string)
			typ, _ := m["AttributeType"].(string)
			if name == "" || typ == "" {
				return nil, fmt.Errorf("table %s: AttributeDefinitions entries need literal AttributeName and AttributeType", r.ID)
			}
			tb.AttributeDefinitions = append(tb.AttributeDefinitions, AttributeDefinition{AttributeName: name, AttributeType: typ})
		}
		if len(tb.KeySchema) == 0 {
			return nil, fmt.Errorf("table %s has no KeySchema", r.ID)
		}
		out = append(out, tb)
	}
	return out, nil
}

// Table returns the template's only DynamoDB table.
func (t *Template) Table() (Table, error) {
	tables, err := t.Tables()
	if err != nil {
		return Table{}, err
	}
	if len(tables) != 1 {
		return Table{}, fmt.Errorf("template has %d tables, want 1", len(tables))
	}
	return tables[0], nil
}

// StateMachine is a state machine of the template (AWS::Serverless::StateMachine or
// AWS::StepFunctions::StateMachine); Resolver.StateMachine resolves its name and definition.
type StateMachine struct {
	LogicalID string
	// DefinitionPath is the definition file (DefinitionUri, made absolute), or "" for an
	// inline definition.
	DefinitionPath string
}

// StateMachines returns the template's state machines in document order.
func (t *Template) StateMachines() []StateMachine {
	var out []StateMachine
	for _, r := range t.resources {
		if r.Type != TypeStateMachine && r.Type != TypeCfnStateMachine {
			continue
		}
		sm := StateMachine{LogicalID: r.ID}
		if uri, ok := r.Properties["DefinitionUri"].(string); ok {
			sm.DefinitionPath = t.path(uri)
		}
		out = append(out, sm)
	}
	return out
}

// Function is an AWS::Serverless::Function of the template; Resolver.Function resolves its
// configuration.
type Function struct {
	LogicalID string
	// CodeDir is the function's CodeUri, made absolute (functions/<name>/).
	CodeDir string
}

// Functions returns the template's SAM functions in document order.
func (t *Template) Functions() []Function {
	var out []Function
	for _, r := range t.resources {
		if r.Type != TypeFunction {
			continue
		}
		f := Function{LogicalID: r.ID}
		uri, ok := r.Properties["CodeUri"].(string)
		if !ok {
			uri, _ = t.globals["CodeUri"].(string)
		}
		if uri != "" {
			f.CodeDir = t.path(uri)
		}
		out = append(out, f)
	}
	return out
}

func (t *Template) path(rel string) string {
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(t.dir, rel)
}
