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

// poolCaps is POOL_CAPS for the TYPE_POOLS examples: the code refuses a type's pool without a cap,
// which a pattern cannot see (TestTypePoolsThePatternCannotSee).
var poolCaps = map[string]string{"POOL_CAPS": "a=1,b=1,llm_api=50,pay=20," + maxType + "=1"}

// stringAgreement lists, for each string parameter the functions read, values with whether both
// the template and the code accept them (TYPE_POOLS is read beside poolCaps).
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

	{"TypeOverflow", "TYPE_OVERFLOW", "", true},
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=cancel", true},
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=cancel,sync=queue", true},
	{"TypeOverflow", "TYPE_OVERFLOW", maxType + "=cancel", true},
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=skip,sync=cancel", true},
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=debounce", false}, // not built
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=", false},
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=Cancel", false},
	{"TypeOverflow", "TYPE_OVERFLOW", "re-index=cancel", false},
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=cancel,", false},
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=cancel, sync=queue", false},
	{"TypeOverflow", "TYPE_OVERFLOW", "reindex=cancel,reindex=queue", false},

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

	{"Pools", "POOL_CAPS", "", true},
	{"Pools", "POOL_CAPS", "llm_api=50,pay=20", true},
	{"Pools", "POOL_CAPS", "a=1,b=1000," + maxType + "=999", true},
	{"Pools", "POOL_CAPS", "b=1,ab=2", true},
	{"Pools", "POOL_CAPS", "a=0", false},
	{"Pools", "POOL_CAPS", "a=1001", false},
	{"Pools", "POOL_CAPS", "a=5000", false},
	{"Pools", "POOL_CAPS", "a=05", false},
	{"Pools", "POOL_CAPS", "a=-1", false},
	{"Pools", "POOL_CAPS", "my-pool=5", false},
	{"Pools", "POOL_CAPS", maxType + "a=5", false},
	{"Pools", "POOL_CAPS", "a=5,", false},
	{"Pools", "POOL_CAPS", "a=5, b=6", false},
	{"Pools", "POOL_CAPS", "a=5,a=6", false},
	{"Pools", "POOL_CAPS", "a", false},

	{"TypePools", "TYPE_POOLS", "", true},
	{"TypePools", "TYPE_POOLS", "summarize=llm_api", true},
	{"TypePools", "TYPE_POOLS", "summarize=llm_api,classify=llm_api+pay", true},
	{"TypePools", "TYPE_POOLS", "x=a+b,y=b+a,z=" + maxType, true},
	{"TypePools", "TYPE_POOLS", "x=a,y=a", true},
	{"TypePools", "TYPE_POOLS", "x=a+b,y=b", true},
	{"TypePools", "TYPE_POOLS", "x=a+a", false}, // a pool listed twice
	{"TypePools", "TYPE_POOLS", "y=b,x=a+a", false},
	{"TypePools", "TYPE_POOLS", "x=a+a,y=b", false},
	{"TypePools", "TYPE_POOLS", "x=a+b+llm_api", false}, // more than 2 pools
	{"TypePools", "TYPE_POOLS", "x=a+", false},
	{"TypePools", "TYPE_POOLS", "x=+a", false},
	{"TypePools", "TYPE_POOLS", "x=", false},
	{"TypePools", "TYPE_POOLS", "x=a b", false},
	{"TypePools", "TYPE_POOLS", "x=a,b", false},
	{"TypePools", "TYPE_POOLS", "x=my-pool", false},
	{"TypePools", "TYPE_POOLS", "x=" + maxType + "a", false},
	{"TypePools", "TYPE_POOLS", "my-type=a", false},
	{"TypePools", "TYPE_POOLS", "x=a,", false},
	{"TypePools", "TYPE_POOLS", "x=a,x=b", false},
	{"TypePools", "TYPE_POOLS", "x=a,y=b,x=a+b", false},

	{"PoolShares", "TYPE_POOL_SHARES", "", true},
	{"PoolShares", "TYPE_POOL_SHARES", "summarize=3", true},
	{"PoolShares", "TYPE_POOL_SHARES", "a=1,b=100,c=99", true},
	{"PoolShares", "TYPE_POOL_SHARES", "a=0", false},
	{"PoolShares", "TYPE_POOL_SHARES", "a=101", false},
	{"PoolShares", "TYPE_POOL_SHARES", "a=1000", false},
	{"PoolShares", "TYPE_POOL_SHARES", "a=01", false},
	{"PoolShares", "TYPE_POOL_SHARES", "my-type=1", false},
	{"PoolShares", "TYPE_POOL_SHARES", "a=1,", false},
	{"PoolShares", "TYPE_POOL_SHARES", "a=1,a=2", false},

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
				if tt.env == "TYPE_POOLS" {
					return poolCaps[k]
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

// What a pattern cannot see: a type's pool with no cap in Pools (the pattern reads TypePools alone).
// The template accepts it and the functions refuse it at cold start, naming the pool; the
// docs/configuration.md says so. If the code starts accepting one, it moves to the agreement table.
func TestTypePoolsThePatternCannotSee(t *testing.T) {
	tpl, err := cfntemplate.Load(filepath.Join("..", "..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := tpl.Parameter("TypePools")
	for _, tt := range []struct{ pools, typePools string }{
		{"", "summarize=llm_api"},
		{"llm_api=50", "classify=llm_api+pay"},
	} {
		if err := p.Check(tt.typePools); err != nil {
			t.Errorf("template TypePools refuses %q (%v): it can see it after all, move it to the agreement table", tt.typePools, err)
		}
		env := map[string]string{"POOL_CAPS": tt.pools, "TYPE_POOLS": tt.typePools}
		_, _, err := config.FromEnv(func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), "has no cap in POOL_CAPS") {
			t.Errorf("code reads POOL_CAPS=%q TYPE_POOLS=%q: %v, want it refused at cold start (no cap in POOL_CAPS)", tt.pools, tt.typePools, err)
		}
	}
}
