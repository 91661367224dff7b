package cfntemplate

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// shortForms maps CloudFormation's YAML short-form tags to the long form they stand for.
// !Ref and !Condition map to "Ref" and "Condition"; !GetAtt also accepts "Name.Attribute".
var shortForms = map[string]string{
	"!Base64":      "Fn::Base64",
	"!Cidr":        "Fn::Cidr",
	"!Condition":   "Condition",
	"!And":         "Fn::And",
	"!Equals":      "Fn::Equals",
	"!FindInMap":   "Fn::FindInMap",
	"!GetAZs":      "Fn::GetAZs",
	"!GetAtt":      "Fn::GetAtt",
	"!If":          "Fn::If",
	"!ImportValue": "Fn::ImportValue",
	"!Join":        "Fn::Join",
	"!Not":         "Fn::Not",
	"!Or":          "Fn::Or",
	"!Ref":         "Ref",
	"!Select":      "Fn::Select",
	"!Split":       "Fn::Split",
	"!Sub":         "Fn::Sub",
}

// decodeNode turns a YAML node into plain Go values (map[string]any, []any, string, int64,
// float64, bool, nil), rewriting short-form tags into their long form, so that the rest of the
// package only deals with the long form ({"Ref": ...}, {"Fn::Sub": ...}).
func decodeNode(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return decodeNode(n.Content[0])
	case yaml.AliasNode:
		return decodeNode(n.Alias)
	}

	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		long, ok := shortForms[n.Tag]
		if !ok {
			return nil, fmt.Errorf("line %d: unknown tag %s", n.Line, n.Tag)
		}
		if n.Tag == "!GetAtt" && n.Kind == yaml.ScalarNode {
			id, attr, ok := strings.Cut(n.Value, ".")
			if !ok {
				return nil, fmt.Errorf("line %d: !GetAtt %q is not of the form Resource.Attribute", n.Line, n.Value)
			}
			return map[string]any{long: []any{id, attr}}, nil
		}
		inner := *n
		inner.Tag = ""
		if n.Kind == yaml.ScalarNode {
			inner.Tag = "!!str"
		}
		v, err := decodeNode(&inner)
		if err != nil {
			return nil, err
		}
		return map[string]any{long: v}, nil
	}

	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping key is not a scalar", k.Line)
			}
			dv, err := decodeNode(v)
			if err != nil {
				return nil, err
			}
			m[k.Value] = dv
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			dv, err := decodeNode(c)
			if err != nil {
				return nil, err
			}
			l = append(l, dv)
		}
		return l, nil
	case yaml.ScalarNode:
		return decodeScalar(n)
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node kind %d", n.Line, n.Kind)
}

func decodeScalar(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return i, nil
	case "!!float":
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			var v float64
			if derr := n.Decode(&v); derr != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, derr)
			}
			f = v
		}
		return f, nil
	default: // !!str, !!timestamp and the rest stay text, as CloudFormation reads them
		return n.Value, nil
	}
}

// orderedKeys returns the keys of the mapping under the root mapping's key section, in document
// order (Parameters and Resources keep the order their author gave them).
func orderedKeys(root *yaml.Node, section string) []string {
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != section {
			continue
		}
		m := root.Content[i+1]
		if m.Kind != yaml.MappingNode {
			return nil
		}
		keys := make([]string, 0, len(m.Content)/2)
		for j := 0; j+1 < len(m.Content); j += 2 {
			keys = append(keys, m.Content[j].Value)
		}
		return keys
	}
	return nil
}
