package cfntemplate

import (
	"strings"
	"testing"
)

const rulesTemplate = `
Parameters:
  Arns:
    Type: CommaDelimitedList
    Default: ""
    AllowedPattern: ^$|^arn:[a-z]+$
  Mode:
    Type: String
    Default: a
  Pairs:
    Type: String
    Default: ""
    AllowedPattern: ^(?!(?:.*,)?([a-z]+)=[^,]*,(?:.*,)?\1=)([a-z]+=[0-9](,[a-z]+=[0-9])*)?$
Rules:
  NoEmptyArn:
    RuleCondition:
      Fn::Not:
        - Fn::EachMemberEquals: [!Ref Arns, ""]
    Assertions:
      - Assert:
          Fn::Not:
            - Fn::Contains: [!Ref Arns, ""]
        AssertDescription: an empty ARN
  ModeKnown:
    Assertions:
      - Assert:
          Fn::Or:
            - Fn::Equals: [!Ref Mode, a]
            - Fn::EachMemberIn: [[!Ref Mode], [b, c]]
        AssertDescription: an unknown mode
Resources:
  Q:
    Type: AWS::SQS::Queue
`

// Parameters are refused as CloudFormation refuses them before any resource: a list's pattern
// applies to each member, patterns read lookahead and back-references (Java regular expressions),
// and the rules' assertions hold where their condition does.
func TestParametersAreCheckedAsCloudFormationChecksThem(t *testing.T) {
	tpl, err := Parse([]byte(rulesTemplate), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		give    map[string]string
		wantErr string // "" for none
	}{
		{"defaults", nil, ""},
		{"list members each match", map[string]string{"Arns": "arn:a,arn:b"}, ""},
		{"a list member that does not match", map[string]string{"Arns": "arn:a,x"}, `"x" does not match`},
		{"an empty member beside others", map[string]string{"Arns": "arn:a,"}, "rule NoEmptyArn: an empty ARN"},
		{"only empty members", map[string]string{"Arns": ","}, ""},
		{"distinct keys", map[string]string{"Pairs": "a=1,ab=2,b=3"}, ""},
		{"a key twice", map[string]string{"Pairs": "a=1,b=2,a=3"}, `does not match`},
		{"a rule without a condition holds", map[string]string{"Mode": "b"}, ""},
		{"a rule without a condition fails", map[string]string{"Mode": "d"}, "rule ModeKnown: an unknown mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tpl.Resolver(Env{Parameters: tt.give})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Resolver(%v) = %v, want error containing %q", tt.give, err, tt.wantErr)
			}
		})
	}
	if got := len(tpl.Rules()); got != 2 {
		t.Errorf("Rules() has %d rules, want 2", got)
	}
}

// A rule that refers to something other than a parameter is refused: rules see parameters only.
func TestRulesSeeParametersOnly(t *testing.T) {
	tpl, err := Parse([]byte(`
Rules:
  R:
    Assertions:
      - Assert:
          Fn::Equals: [!Ref AWS::StackName, x]
        AssertDescription: d
Resources:
  Q:
    Type: AWS::SQS::Queue
`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := tpl.CheckRules(nil); err == nil || !strings.Contains(err.Error(), "rules see parameters only") {
		t.Errorf("CheckRules() = %v, want refused: rules see parameters only", err)
	}
}
