package cfntemplate

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Policy is one identity policy of a function's or state machine's role, resolved: its name
// ("RouterRole/router", "DescribeExecutionsPolicy", "SampleStateMachine/LambdaInvokePolicy") and
// its document with every intrinsic function evaluated.
type Policy struct {
	Name     string
	Document any
}

// samPolicyTemplates are the SAM policy templates the template may use in a function's or state
// machine's Policies, copied from SAM's policy_templates.json (samtranslator 1.x,
// policy_templates_data/policy_templates.json): each {"Ref": "Param"} stands for the template's
// parameter. A template not listed here is an error, so a new one cannot silently grant nothing.
var samPolicyTemplates = map[string]string{
	"LambdaInvokePolicy":   `{"Statement": [{"Action": ["lambda:InvokeFunction"], "Effect": "Allow", "Resource": {"Fn::Sub": ["arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${functionName}*", {"functionName": {"Ref": "FunctionName"}}]}}]}`,
	"SQSSendMessagePolicy": `{"Statement": [{"Action": ["sqs:SendMessage*"], "Effect": "Allow", "Resource": {"Fn::Sub": ["arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${queueName}", {"queueName": {"Ref": "QueueName"}}]}}]}`,
	"SQSPollerPolicy":      `{"Statement": [{"Action": ["sqs:ChangeMessageVisibility", "sqs:ChangeMessageVisibilityBatch", "sqs:DeleteMessage", "sqs:DeleteMessageBatch", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"], "Effect": "Allow", "Resource": {"Fn::Sub": ["arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${queueName}", {"queueName": {"Ref": "QueueName"}}]}}]}`,
	"DynamoDBCrudPolicy":   `{"Statement": [{"Action": ["dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:Scan", "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem", "dynamodb:BatchGetItem", "dynamodb:DescribeTable", "dynamodb:ConditionCheckItem"], "Effect": "Allow", "Resource": [{"Fn::Sub": ["arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${tableName}", {"tableName": {"Ref": "TableName"}}]}, {"Fn::Sub": ["arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${tableName}/index/*", {"tableName": {"Ref": "TableName"}}]}]}]}`,
}

// Policies returns the identity policies of a SAM function's or state machine's role, resolved:
// with Role: !GetAtt SomeRole.Arn, the role's inline Policies and the template's own managed
// policies in its ManagedPolicyArns; without Role, the resource's SAM Policies (inline documents
// and the policy templates above). A policy this cannot read (an AWS managed policy, an unknown
// SAM policy template, a role that is not the template's) is an error: the caller is checking
// what a role allows and must not be told "nothing" for "unknown".
func (r *Resolver) Policies(logicalID string) ([]Policy, error) {
	res, ok := r.t.byID[logicalID]
	if !ok {
		return nil, fmt.Errorf("no resource %s in the template", logicalID)
	}
	if role, ok := res.Properties["Role"]; ok {
		id, err := getAttID(role, "Arn")
		if err != nil {
			return nil, fmt.Errorf("%s Role: %w", logicalID, err)
		}
		return r.rolePolicies(id)
	}
	var out []Policy
	for i, p := range asList(res.Properties["Policies"]) {
		switch v := p.(type) {
		case string:
			return nil, fmt.Errorf("%s Policies[%d]: managed policy %q is not in the template", logicalID, i, v)
		case map[string]any:
			if doc, ok := v["Statement"]; ok {
				ev, err := r.Eval(map[string]any{"Statement": doc})
				if err != nil {
					return nil, fmt.Errorf("%s Policies[%d]: %w", logicalID, i, err)
				}
				out = append(out, Policy{Name: fmt.Sprintf("%s/Policies[%d]", logicalID, i), Document: ev})
				continue
			}
			names := make([]string, 0, len(v))
			for k := range v {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, name := range names {
				doc, err := r.samTemplate(name, v[name])
				if err != nil {
					return nil, fmt.Errorf("%s Policies[%d]: %w", logicalID, i, err)
				}
				out = append(out, Policy{Name: logicalID + "/" + name, Document: doc})
			}
		default:
			return nil, fmt.Errorf("%s Policies[%d]: unexpected %T", logicalID, i, p)
		}
	}
	return out, nil
}

func (r *Resolver) rolePolicies(roleID string) ([]Policy, error) {
	role, ok := r.t.byID[roleID]
	if !ok || role.Type != "AWS::IAM::Role" {
		return nil, fmt.Errorf("%s is not an AWS::IAM::Role of the template", roleID)
	}
	var out []Policy
	for i, p := range asList(role.Properties["Policies"]) {
		m := asMap(p)
		doc, err := r.Eval(m["PolicyDocument"])
		if err != nil {
			return nil, fmt.Errorf("%s Policies[%d]: %w", roleID, i, err)
		}
		out = append(out, Policy{Name: fmt.Sprintf("%s/%v", roleID, m["PolicyName"]), Document: doc})
	}
	for i, a := range asList(role.Properties["ManagedPolicyArns"]) {
		ref, _ := asMap(a)["Ref"].(string)
		mp, ok := r.t.byID[ref]
		if !ok || mp.Type != "AWS::IAM::ManagedPolicy" {
			return nil, fmt.Errorf("%s ManagedPolicyArns[%d] = %v: only !Ref of the template's own AWS::IAM::ManagedPolicy can be read", roleID, i, a)
		}
		doc, err := r.Eval(mp.Properties["PolicyDocument"])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		out = append(out, Policy{Name: ref, Document: doc})
	}
	return out, nil
}

// samTemplate expands one SAM policy template with its parameters and resolves it.
func (r *Resolver) samTemplate(name string, params any) (any, error) {
	def, ok := samPolicyTemplates[name]
	if !ok {
		return nil, fmt.Errorf("SAM policy template %s is not known to cfntemplate (add its definition from SAM's policy_templates.json)", name)
	}
	var doc any
	if err := json.Unmarshal([]byte(def), &doc); err != nil {
		return nil, fmt.Errorf("SAM policy template %s: %w", name, err)
	}
	p := asMap(params)
	var bad error
	var subst func(v any) any
	subst = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["Ref"].(string); ok && len(x) == 1 {
				if _, pseudo := r.pseudo[ref]; !pseudo {
					val, ok := p[ref]
					if !ok && bad == nil {
						bad = fmt.Errorf("SAM policy template %s needs parameter %s", name, ref)
					}
					return val
				}
			}
			m := make(map[string]any, len(x))
			for k, e := range x {
				m[k] = subst(e)
			}
			return m
		case []any:
			l := make([]any, len(x))
			for i, e := range x {
				l[i] = subst(e)
			}
			return l
		}
		return v
	}
	doc = subst(doc)
	if bad != nil {
		return nil, bad
	}
	return r.Eval(doc)
}

// getAttID reads the logical id of {"Fn::GetAtt": [id, attribute]} or "id.attribute".
func getAttID(v any, attribute string) (string, error) {
	m := asMap(v)
	switch a := m["Fn::GetAtt"].(type) {
	case []any:
		if len(a) == 2 && fmt.Sprint(a[1]) == attribute {
			return fmt.Sprint(a[0]), nil
		}
	case string:
		if id, attr, ok := cutLast(a, "."); ok && attr == attribute {
			return id, nil
		}
	}
	return "", fmt.Errorf("%v is not !GetAtt <role>.%s of a role in the template", v, attribute)
}

func cutLast(s, sep string) (string, string, bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return "", "", false
}
