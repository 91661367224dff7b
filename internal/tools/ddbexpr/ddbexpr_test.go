package ddbexpr

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

// TestEval: the limiter's conditions, and each with a clause removed, hold or fail as on DynamoDB.
func TestEval(t *testing.T) {
	item := map[string]types.AttributeValue{
		"pk": s("WAIT#a"), "version": n("7"), "jobId": s("j1"), "messageId": s("m1"),
		"receiptHandle": s("h1"), "parkedAtMs": n("1000"), "receives": n("2"),
	}
	values := map[string]types.AttributeValue{
		":v": n("7.0"), ":j": s("j1"), ":m": s("m1"), ":h": s("h2"), ":r": n("3"), ":due": n("999"), ":p": s("WAIT#"),
	}
	tests := []struct {
		expr string
		item map[string]types.AttributeValue
		want bool
	}{
		{"attribute_not_exists(pk)", item, false},
		{"attribute_not_exists(pk)", nil, true},
		{"attribute_exists(pk)", nil, false},
		{"version = :v AND jobId = :j", item, true},
		{"version = :v AND jobId = :m", item, false},
		{"jobId = :j", nil, false},
		{"attribute_not_exists(pk) OR messageId = :m OR parkedAtMs < :due", item, true},
		{"attribute_not_exists(pk) OR parkedAtMs < :due", item, false},
		{"attribute_not_exists(pk) OR parkedAtMs < :due", nil, true},
		{"messageId = :m AND (receiptHandle = :h OR attribute_not_exists(receives) OR receives < :r)", item, true},
		{"messageId = :m AND (receiptHandle = :h OR attribute_not_exists(receives))", item, false},
		{"messageId = :m and (receiptHandle = :h or receives >= :r)", item, false},
		{"NOT messageId = :m OR version <= :v", item, true},
		{"NOT (messageId = :m OR version > :v)", item, false},
		{"version = :m", item, false}, // a number is never equal to a string
		{"begins_with(pk, :p)", item, true},
		{"begins_with(jobId, :p)", item, false},
		{"#v = :v", item, true},
	}
	for _, tt := range tests {
		node, err := Parse(tt.expr)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.expr, err)
		}
		got, err := Eval(node, Env{Item: tt.item, Names: map[string]string{"#v": "version"}, Values: values})
		if err != nil || got != tt.want {
			t.Errorf("Eval(%q) = %v, %v; want %v", tt.expr, got, err, tt.want)
		}
	}
}

// TestPrecedence: NOT binds tighter than AND, AND tighter than OR; String prints what was parsed.
func TestPrecedence(t *testing.T) {
	node, err := Parse("a = :a OR NOT b = :b AND (c = :c OR d = :d)")
	if err != nil {
		t.Fatal(err)
	}
	or, ok := node.(Logic)
	if !ok || or.Op != "OR" || len(or.Terms) != 2 {
		t.Fatalf("got %#v, want an OR of two terms", node)
	}
	if and, ok := or.Terms[1].(Logic); !ok || and.Op != "AND" {
		t.Fatalf("second term %#v, want an AND", or.Terms[1])
	}
	if got, want := String(node), "a = :a OR NOT b = :b AND (c = :c OR d = :d)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// TestRefused: the rest of the grammar, and what is not the grammar, is an error, never a guess.
func TestRefused(t *testing.T) {
	for _, expr := range []string{
		"a <> :a", "a BETWEEN :a AND :b", "a IN (:a, :b)", "size(a) > :n", "contains(a, :a)",
		"a.b = :a", "a = :a AND", "(a = :a", "a = :a)", "attribute_exists(:a)", "a", "",
	} {
		if _, err := Parse(expr); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", expr)
		}
	}
	node, _ := Parse("a = :undefined")
	if _, err := Eval(node, Env{Item: map[string]types.AttributeValue{"a": s("x")}}); err == nil || !strings.Contains(err.Error(), ":undefined") {
		t.Errorf("Eval with an undefined placeholder: %v, want an error naming it", err)
	}
}
