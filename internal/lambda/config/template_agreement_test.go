package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
)

// maxType is the longest type name (job.ValidateType).
var maxType = strings.Repeat("a", 40)

// stringAgreement lists, for each string parameter the functions read, values with whether both
// the template and the code accept them.
var stringAgreement = []struct {
	param, env string
	give       string
	want       bool
}{
	{"TypeKeyLimits", "TYPE_KEY_LIMITS", "", true},
	{"TypeKeyLimits", "TYPE_KEY_LIMITS", "llm=5,payments=20", true},
	{"TypeKeyLimits", "TYPE_KEY_LIMITS", "llm=0", false},
	{"TypeKeyLimits", "TYPE_KEY_LIMITS", "llm=5 ", false},
	{"TypeLimits", "TYPE_LIMITS", "", true},
	{"TypeLimits", "TYPE_LIMITS", "demo=5", true},
	{"TypeLimits", "TYPE_LIMITS", "payments=50,reports=5", true},
	{"TypeLimits", "TYPE_LIMITS", "monthly_reports_v2=1", true},
	{"TypeLimits", "TYPE_LIMITS", "A1=7,b=99999", true},
	{"TypeLimits", "TYPE_LIMITS", maxType + "=1", true},
	{"TypeLimits", "TYPE_LIMITS", "big=119999", true},
	{"TypeLimits", "TYPE_LIMITS", "big=100000", true},
	{"TypeLimits", "TYPE_LIMITS", "my-type=5", false}, // a type cannot contain "-" (lanes are "{type}-{lane}")
	{"TypeLimits", "TYPE_LIMITS", "demo=0", false},
	{"TypeLimits", "TYPE_LIMITS", "demo=05", false},
	{"TypeLimits", "TYPE_LIMITS", "demo=-1", false},
	{"TypeLimits", "TYPE_LIMITS", "demo=1.5", false},
	{"TypeLimits", "TYPE_LIMITS", "big=120000", false}, // the FIFO in-flight quota
	{"TypeLimits", "TYPE_LIMITS", "big=999999", false},
	{"TypeLimits", "TYPE_LIMITS", "big=1000000", false},
	{"TypeLimits", "TYPE_LIMITS", maxType + "a=1", false},
	{"TypeLimits", "TYPE_LIMITS", "pay.ments=5", false},
	{"TypeLimits", "TYPE_LIMITS", "demo", false},
	{"TypeLimits", "TYPE_LIMITS", "demo=", false},
	{"TypeLimits", "TYPE_LIMITS", "=5", false},
	{"TypeLimits", "TYPE_LIMITS", "demo=5,", false},
	{"TypeLimits", "TYPE_LIMITS", ",demo=5", false},
	{"TypeLimits", "TYPE_LIMITS", "a=1,,b=2", false},
	{"TypeLimits", "TYPE_LIMITS", " demo=5", false},
	{"TypeLimits", "TYPE_LIMITS", "demo = 5", false},
	{"TypeLimits", "TYPE_LIMITS", "a=1, b=2", false},
	{"TypeLimits", "TYPE_LIMITS", "demo=5;x=1", false},
	{"TypeLimits", "TYPE_LIMITS", "demo:5", false},
	{"TypeLimits", "TYPE_LIMITS", "demo=1=2", false},
	{"TypeLimits", "TYPE_LIMITS", "a=1,a=2", false}, // a type listed twice
	{"TypeLimits", "TYPE_LIMITS", "a=1,b=2,a=3", false},
	{"TypeLimits", "TYPE_LIMITS", "b=1,ab=2,a=3", true}, // a type that ends another is not it
	{"TypeLimits", "TYPE_LIMITS", "ab=1,b=2,a=3", true},
	{"TypeKeyLimits", "TYPE_KEY_LIMITS", "llm=5,llm=6", false},

	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "", true},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments=5", true},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments=1,reports=999", true},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments=0", false},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments=00", false},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments=007", false},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments=1000", false},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "my-type=3", false},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments=3,", false},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments = 3", false},
	{"TypeMaxAttempts", "TYPE_MAX_ATTEMPTS", "payments=3,reports=2,payments=3", false},

	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "", true},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "llm=events", true},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "llm=events,payments=step", true},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "llm=event", false},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "llm=", false},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "llm=Events", false},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "my-type=events", false},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "llm=events,", false},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "llm=events, payments=step", false},
	{"TypeReleaseModes", "TYPE_RELEASE_MODES", "llm=events,llm=step", false},

	{"TypeRates", "TYPE_RATES", "", true},
	{"TypeRates", "TYPE_RATES", "partner=5:10,llm=0.5", true},
	{"TypeRates", "TYPE_RATES", "a=0.001,b=0.01,c=0.010,d=0.1,e=9999.999,f=10000,g=10000.000", true},
	{"TypeRates", "TYPE_RATES", "a=1:1,b=2:100000", true},
	{"TypeRates", "TYPE_RATES", "llm=0", false},
	{"TypeRates", "TYPE_RATES", "llm=0.0", false},
	{"TypeRates", "TYPE_RATES", "llm=0.000", false},
	{"TypeRates", "TYPE_RATES", "llm=0.0001", false},
	{"TypeRates", "TYPE_RATES", "llm=10000.001", false},
	{"TypeRates", "TYPE_RATES", "llm=10001", false},
	{"TypeRates", "TYPE_RATES", "llm=05", false},
	{"TypeRates", "TYPE_RATES", "llm=1.", false},
	{"TypeRates", "TYPE_RATES", "llm=.5", false},
	{"TypeRates", "TYPE_RATES", "llm=1e3", false},
	{"TypeRates", "TYPE_RATES", "llm=-1", false},
	{"TypeRates", "TYPE_RATES", "llm=1:0", false},
	{"TypeRates", "TYPE_RATES", "llm=1:100001", false},
	{"TypeRates", "TYPE_RATES", "llm=1:", false},
	{"TypeRates", "TYPE_RATES", "llm=1:05", false},
	{"TypeRates", "TYPE_RATES", "my-type=1", false},
	{"TypeRates", "TYPE_RATES", "llm=1,", false},
	{"TypeRates", "TYPE_RATES", "llm=1, b=2", false},
	{"TypeRates", "TYPE_RATES", "llm=1:5,llm=0.5", false},

	{"ReleaseMode", "RELEASE_MODE", "step", true},
	{"ReleaseMode", "RELEASE_MODE", "events", true},
	{"ReleaseMode", "RELEASE_MODE", "status", false},

	{"LaneStrategy", "LANE_STRATEGY", "first-free", true},
	{"LaneStrategy", "LANE_STRATEGY", "random", true},
	{"LaneStrategy", "LANE_STRATEGY", "least-loaded", true}, // retired, runs as first-free
	{"LaneStrategy", "LANE_STRATEGY", "round-robin", false},
	{"LaneStrategy", "LANE_STRATEGY", "Random", false},
}

// The template's AllowedPattern (or AllowedValues) of each string parameter the functions read and
// the code that reads it at cold start (FromEnv) accept the same strings: a value CloudFormation
// deploys must not make every function fail at cold start, and the code must not accept what the
// template documents as refused. Each candidate goes through both; both must give the table's answer.
func TestStringParametersAgreeWithTheCode(t *testing.T) {
	tpl, err := cfntemplate.Load(filepath.Join("..", "..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range stringAgreement {
		t.Run(tt.param+"="+tt.give, func(t *testing.T) {
			p, ok := tpl.Parameter(tt.param)
			if !ok {
				t.Fatalf("template.yaml has no parameter %s", tt.param)
			}
			tplErr := p.Check(tt.give)
			_, _, codeErr := config.FromEnv(func(k string) string {
				if k == tt.env {
					return tt.give
				}
				return ""
			})
			if (tplErr == nil) != tt.want {
				t.Errorf("template %s accepts %q: %v (%v), want %v", tt.param, tt.give, tplErr == nil, tplErr, tt.want)
			}
			if (codeErr == nil) != tt.want {
				t.Errorf("code (%s) accepts %q: %v (%v), want %v", tt.env, tt.give, codeErr == nil, codeErr, tt.want)
			}
		})
	}
}

// What a pattern cannot see: limits that only together reach the FIFO in-flight quota. The template accepts these and the functions refuse them at cold start; the
// docs/configuration.md says so. The test keeps the list honest: if the code starts accepting one, it moves up.
func TestTypeLimitsThePatternCannotSee(t *testing.T) {
	tpl, err := cfntemplate.Load(filepath.Join("..", "..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := tpl.Parameter("TypeLimits")
	for _, give := range []string{"a=100000,b=20000", "a=60000,b=60000"} {
		if err := p.Check(give); err != nil {
			t.Errorf("template TypeLimits refuses %q (%v): it can see it after all, move it to the agreement table", give, err)
		}
		if _, _, err := config.FromEnv(func(k string) string {
			if k == "TYPE_LIMITS" {
				return give
			}
			return ""
		}); err == nil {
			t.Errorf("code accepts TYPE_LIMITS=%q, want it refused at cold start", give)
		}
	}
}
