package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"

	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

// A deployed stack is found by its CloudFormation Outputs and its defaults by its starter
// function's environment, through the standard AWS configuration (here AWS_ENDPOINT_URL points at
// the local stack's emulator, which also plays CloudFormation and Lambda's control plane). A
// missing stack, region or credentials is reported as such.
func TestDeployedStack(t *testing.T) {
	s, _ := localStack(t)
	ctx := t.Context()
	cfg := s.AWSConfig(nil)
	info := s.Info()

	// A stack whose Outputs are the local stack's resources, with a starter function configured as
	// the template would configure it for the local stack's parameters.
	outputs := map[string]any{}
	for k, v := range info.Outputs {
		outputs[k] = map[string]string{"Value": v}
	}
	outputs[resources.StarterFunctionName] = map[string]any{"Value": map[string]string{"Ref": "Starter"}}
	tpl, err := json.Marshal(map[string]any{
		"Resources": map[string]any{
			"Role": map[string]any{"Type": "AWS::IAM::Role", "Properties": map[string]any{
				"AssumeRolePolicyDocument": map[string]any{"Version": "2012-10-17", "Statement": []any{map[string]any{
					"Effect": "Allow", "Principal": map[string]any{"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole",
				}}},
			}},
			"Starter": map[string]any{"Type": "AWS::Lambda::Function", "Properties": map[string]any{
				"Runtime": "provided.al2023", "Handler": "bootstrap", "Code": map[string]string{"ZipFile": "not run"},
				"Role": map[string]any{"Fn::GetAtt": []string{"Role", "Arn"}},
				"Environment": map[string]any{"Variables": map[string]string{
					"TYPE_LIMITS": stackParams["TypeLimits"], "DEFAULT_LIMIT": "0", "DEFAULT_MAX_ATTEMPTS": stackParams["DefaultMaxAttempts"],
					"CONFIG_CACHE_SECONDS": stackParams["ConfigCacheSeconds"], "STATE_MACHINE_ARN": info.Output(resources.SampleStateMachineArn),
				}},
			}},
		},
		"Outputs": outputs,
	})
	if err != nil {
		t.Fatal(err)
	}
	const stackName = "sfnlimit-cli-test"
	if _, err := cloudformation.NewFromConfig(cfg).CreateStack(ctx, &cloudformation.CreateStackInput{
		StackName: aws.String(stackName), TemplateBody: aws.String(string(tpl)),
	}); err != nil {
		t.Fatalf("CreateStack() = %v", err)
	}

	// Only the standard AWS settings, from the environment.
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL": info.Endpoint, "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true", "SFNLIMIT_LOCAL": "", "SFNLIMIT_STACK": "",
	} {
		t.Setenv(k, v)
	}
	stack := func(args ...string) result { return sfnlimitIn(ctx, "", args...) }

	r := must(t, stack("status", "--stack", stackName, "--json"), exitOK)
	var st struct {
		Target string `json:"target"`
		ops.Status
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r)
	}
	if st.Target != "stack "+stackName+" (us-east-1)" {
		t.Errorf("status target = %q", st.Target)
	}
	found := false
	for _, ts := range st.Types {
		found = found || ts.Type == "base" && ts.Limit == 2 && ts.Source == "default"
	}
	if !found {
		t.Errorf("status of the stack = %+v, want type base with its default limit 2", st.Types)
	}
	v := decode[ops.ConfigView](t, must(t, stack("config", "get", "--stack", stackName, "--json"), exitOK))
	if v.CacheSeconds != 1 || v.DefaultMaxAttempts != 2 || v.StateMachineArn != info.Output(resources.SampleStateMachineArn) {
		t.Errorf("config get of the stack = %+v, want the starter function's environment", v)
	}

	// The stack name comes from samconfig.toml when --stack is not given.
	samcfg := filepath.Join(dir, "samconfig.toml")
	if err := os.WriteFile(samcfg, []byte("version = 0.1\n[default.deploy.parameters]\nstack_name = \""+stackName+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, stack("dlq", "list", "--samconfig", samcfg, "--max", "1"), exitOK)

	failures := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "missing stack", args: []string{"status", "--stack", "nope"}, want: `no stack "nope" in region us-east-1`},
		{name: "default stack missing", args: []string{"status"}, want: `no stack "sfnlimit" in region us-east-1`},
		{name: "wrong region", args: []string{"status", "--stack", stackName, "--region", "eu-west-1"}, want: `no stack "sfnlimit-cli-test" in region eu-west-1`},
		{name: "no region", env: map[string]string{"AWS_REGION": ""}, args: []string{"status", "--stack", stackName}, want: "no AWS region"},
		{name: "no credentials", env: map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}, args: []string{"status", "--stack", stackName}, want: "no usable AWS credentials"},
		{name: "unknown profile", args: []string{"status", "--stack", stackName, "--profile", "nope"}, want: `AWS profile "nope" is not in`},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			r := stack(tt.args...)
			if r.code != exitError || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("sfnlimit %s = %s\nwant exit 1 and %q", strings.Join(tt.args, " "), r, tt.want)
			}
		})
	}
}
