package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// overrideStore reads and writes live overrides (config.DynamoStore).
type overrideStore interface {
	ListOverrides(ctx context.Context) ([]config.Override, error)
	SetOverride(ctx context.Context, o config.Override) error
	DeleteOverride(ctx context.Context, typ string) error
	DeletePool(ctx context.Context, name string) error
}

// describeStateMachineAPI checks that a state machine exists.
type describeStateMachineAPI interface {
	DescribeStateMachine(context.Context, *sfn.DescribeStateMachineInput, ...func(*sfn.Options)) (*sfn.DescribeStateMachineOutput, error)
}

// ConfigEditor reads and changes live per-type configuration, with the limiter's own rules.
type ConfigEditor struct {
	Store    overrideStore
	Defaults config.Defaults
	// CacheAge is how long the functions cache overrides (ConfigCacheSeconds).
	CacheAge time.Duration
	// SFN, if not nil, checks that a state machine named by --state-machine exists, and that a
	// type in events mode runs a Standard one. Without it, events mode is refused (it cannot be
	// checked).
	SFN describeStateMachineAPI
	// Stack, if not nil, says which state machines the stack's roles may start; without it a
	// state machine set is only reminded of ExtraStateMachineArns.
	Stack *StackAccess
	// Status, if not nil, counts what waits of a type a reset would leave without a limit.
	Status statusReader
	// Now is the clock a pause starts by and is aged by (time.Now when nil).
	Now func() time.Time
}

func (e ConfigEditor) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// statusReader takes a reading of the limiter (StatusReader).
type statusReader interface {
	Read(ctx context.Context) (Status, error)
}

// TypeView is a type's effective configuration and its live override, if any.
type TypeView struct {
	Type string `json:"type"`
	// Limit is 0 when the type has none: its jobs are refused (unknown_type).
	Limit           int    `json:"limit"`
	Source          string `json:"source"` // override, default, fallback or none
	MaxAttempts     int    `json:"maxAttempts"`
	StateMachineArn string `json:"stateMachineArn"`
	// Strategy is how the type's jobs get a lane (lane.Strategies), and StrategySource where that
	// comes from: "override" (the live item) or "default" (the deployment's LaneStrategy).
	Strategy       string `json:"strategy"`
	StrategySource string `json:"strategySource"`
	// RetiredStrategy is the retired strategy the type is configured with (lane.LeastLoaded), which
	// it runs as Strategy; empty when it is configured with a current one.
	RetiredStrategy string `json:"retiredStrategy,omitempty"`
	// Release is how the type's lanes are released (config.ReleaseModes), and ReleaseSource where
	// that comes from: ReleaseFromOverride, ReleaseFromType or ReleaseFromDefault.
	Release       string `json:"release"`
	ReleaseSource string `json:"releaseSource"`
	// KeyLimit is the cap of every concurrency key of the type (0: no cap), as configured (a cap above
	// the type's limit runs as the limit), and KeyLimitSource where it comes from: KeyLimitFromOverride,
	// KeyLimitFromType or KeyLimitNone. KeyLimits are the keys with their own cap (the live item's).
	KeyLimit       int            `json:"keyLimit"`
	KeyLimitSource string         `json:"keyLimitSource"`
	KeyLimits      map[string]int `json:"keyLimits,omitempty"`
	// KeyRate is the start rate of every concurrency key of the type (nil: none), KeyRates those of
	// keys with their own (the live item's: no parameter gives key rates).
	KeyRate  *RateView           `json:"keyRate,omitempty"`
	KeyRates map[string]RateView `json:"keyRates,omitempty"`
	// Rate is the type's start rate (nil: none), and RateSource where it comes from: RateFromOverride,
	// RateFromType or RateNone.
	Rate       *RateView `json:"rate,omitempty"`
	RateSource string    `json:"rateSource"`
	// Pause is the type's pause; nil when it is not paused.
	Pause *PauseView `json:"pause,omitempty"`
	// Pools are the shared pools the type is configured in, and PoolsSource where they come from:
	// PoolsFromOverride, PoolsFromType, or "" (none anywhere). Share is its share in them, and
	// ShareSource where that comes from: ShareFromOverride, ShareFromType or ShareDefault.
	Pools       []string `json:"pools,omitempty"`
	PoolsSource string   `json:"poolsSource,omitempty"`
	Share       int      `json:"share"`
	ShareSource string   `json:"shareSource"`
	// Overflow is the type's overflow rule (config.OverflowRules), and OverflowSource where it
	// comes from: OverflowFromOverride, OverflowFromType or OverflowDefault. OverflowProblem says
	// why the rule cannot act (config.TypeConfig.CheckOverflow): the type then queues.
	Overflow        string `json:"overflow"`
	OverflowSource  string `json:"overflowSource"`
	OverflowProblem string `json:"overflowProblem,omitempty"`
	// Override is the live item as stored; nil when the type has none.
	Override *OverrideView `json:"override,omitempty"`
}

// OverrideView is a stored live override (zero fields are not set).
type OverrideView struct {
	Limit           int    `json:"limit,omitempty"`
	MaxAttempts     int    `json:"maxAttempts,omitempty"`
	StateMachineArn string `json:"stateMachineArn,omitempty"`
	Strategy        string `json:"strategy,omitempty"`
	Release         string `json:"release,omitempty"`
	KeyLimit        int    `json:"keyLimit,omitempty"`
	// KeyCaps counts the keys with their own cap in the item (TypeView.KeyLimits lists them).
	KeyCaps int `json:"keyCaps,omitempty"`
	// Rate is the item's start rate as TypeRates writes it ("5:10"); NoRate says the item removes
	// the type's TypeRates entry.
	Rate   string `json:"rate,omitempty"`
	NoRate bool   `json:"noRate,omitempty"`
	// KeyRate is the item's rate of every key ("2:4"); OwnKeyRates counts the keys with their own
	// rate in the item (TypeView.KeyRates lists them).
	KeyRate     string `json:"keyRate,omitempty"`
	OwnKeyRates int    `json:"ownKeyRates,omitempty"`
	// Paused says the item pauses the type (TypeView.Pause says since when and why).
	Paused bool `json:"paused,omitempty"`
	// Pools are the item's pools ("a+b"), NoPools says it removes the type's TypePools entry, Share
	// is its share in them.
	Pools   string `json:"pools,omitempty"`
	NoPools bool   `json:"noPools,omitempty"`
	Share   int    `json:"share,omitempty"`
	// Overflow is the item's overflow rule.
	Overflow string `json:"overflow,omitempty"`
}

func overrideView(o config.Override) *OverrideView {
	return &OverrideView{
		Limit: o.Limit, MaxAttempts: o.MaxAttempts, StateMachineArn: o.StateMachineArn, Strategy: o.Strategy, Release: o.Release,
		KeyLimit: o.KeyLimit, KeyCaps: len(o.KeyLimits), Rate: o.Rate.String(), NoRate: o.NoRate, Paused: o.Pause != nil,
		KeyRate: o.KeyRate.String(), OwnKeyRates: len(o.KeyRates),
		Pools: strings.Join(o.Pools, "+"), NoPools: o.NoPools, Share: o.Share, Overflow: o.Overflow,
	}
}

// Where a type's release mode comes from.
const (
	ReleaseFromOverride = "override"         // the type's live item
	ReleaseFromType     = "TypeReleaseModes" // the type's entry in the TypeReleaseModes parameter
	ReleaseFromDefault  = "ReleaseMode"      // the deployment's ReleaseMode parameter
)

// releaseOf is the release mode a type runs with and where it comes from, as config.Resolver
// resolves it: the live override's (o, if the functions take it), else the type's
// TypeReleaseModes entry, else ReleaseMode.
func releaseOf(d config.Defaults, o *config.Override, typ string) (mode, source string) {
	if o != nil && o.Release != "" {
		m, _ := config.ParseReleaseMode(o.Release) // checked by Validate
		return m, ReleaseFromOverride
	}
	if m, ok := d.Releases[typ]; ok {
		m, _ = config.ParseReleaseMode(m) // checked by Defaults.Validate
		return m, ReleaseFromType
	}
	m, err := config.ParseReleaseMode(d.Release)
	if err != nil {
		return d.Release, ReleaseFromDefault // config.NewResolver refuses such defaults before anything is shown
	}
	return m, ReleaseFromDefault
}

// ConfigView is the whole configuration.
type ConfigView struct {
	Types []TypeView `json:"types"`
	// FallbackLimit is DefaultLimit: the limit of types not listed (0: refused).
	FallbackLimit      int    `json:"fallbackLimit"`
	DefaultMaxAttempts int    `json:"defaultMaxAttempts"`
	StateMachineArn    string `json:"stateMachineArn"`
	// Strategy is the deployment's lane strategy (LaneStrategy): that of every type without one in
	// its override. RetiredStrategy is LaneStrategy as set when it names a retired strategy, which
	// runs as Strategy.
	Strategy        string `json:"strategy"`
	RetiredStrategy string `json:"retiredStrategy,omitempty"`
	// Release is the deployment's release mode (ReleaseMode): that of every type without one in its
	// override or in Releases (TypeReleaseModes).
	Release  string            `json:"release"`
	Releases map[string]string `json:"releases,omitempty"`
	// KeyLimits are the deployment's key caps per type (TypeKeyLimits).
	KeyLimits map[string]int `json:"keyLimits,omitempty"`
	// Overflows are the deployment's overflow rules per type (TypeOverflow); other types queue.
	Overflows map[string]string `json:"overflows,omitempty"`
	// Rates are the deployment's start rates per type (TypeRates).
	Rates map[string]RateView `json:"rates,omitempty"`
	// Pools are the shared pools: those with a cap (Pools, or a live cap) and those a type names.
	Pools []PoolView `json:"pools,omitempty"`
	// Lanes is what the limits add up to, counted as the limiter counts them against the quota.
	Lanes        int     `json:"lanes"`
	Quota        int     `json:"quota"`
	CacheSeconds float64 `json:"cacheSeconds"`
	// Warning says the stored overrides are refused as a whole (the functions keep the last good
	// set or the defaults).
	Warning string `json:"warning,omitempty"`
	// Ignored lists stored overrides the functions ignore one by one (an item written by hand
	// with, say, an unknown strategy), and why.
	Ignored []string `json:"ignored,omitempty"`

	at   time.Time      // when the view was taken: pauses are aged to it
	caps map[string]int // the pools' caps in force: a type in none of them is not pooled
}

// staticStore serves a fixed set of overrides to a config.Resolver.
type staticStore []config.Override

func (s staticStore) ListOverrides(context.Context) ([]config.Override, error) { return s, nil }

// Get returns the configuration of every type (typ "") or of one type.
func (e ConfigEditor) Get(ctx context.Context, typ string) (ConfigView, error) {
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return ConfigView{}, err
	}
	v, err := e.view(ctx, ovs)
	if err != nil {
		return ConfigView{}, err
	}
	if typ != "" {
		v.Types = []TypeView{v.typeView(typ, e.Defaults, ovs)}
	}
	return v, nil
}

// view resolves a set of overrides as the functions would.
func (e ConfigEditor) view(ctx context.Context, ovs []config.Override) (ConfigView, error) {
	v := ConfigView{
		FallbackLimit: e.Defaults.FallbackLimit, DefaultMaxAttempts: e.Defaults.DefaultMaxAttempts,
		StateMachineArn: e.Defaults.StateMachineArn, Strategy: defaultStrategy(e.Defaults),
		RetiredStrategy: retiredStrategy(e.Defaults.Strategy),
		Quota:           config.MaxInFlight, CacheSeconds: e.CacheAge.Seconds(),
		at: e.now(),
	}
	v.Release, _ = releaseOf(config.Defaults{Release: e.Defaults.Release}, nil, "")
	if len(e.Defaults.Releases) > 0 {
		v.Releases = e.Defaults.Releases
	}
	if len(e.Defaults.KeyLimits) > 0 {
		v.KeyLimits = e.Defaults.KeyLimits
	}
	if len(e.Defaults.Overflows) > 0 {
		v.Overflows = e.Defaults.Overflows
	}
	v.Rates = ratesOf(e.Defaults)
	// The functions drop an override that breaks the rules on its own (config.Resolver); say so
	// rather than leave it out without a word.
	var valid []config.Override
	for _, o := range ovs {
		if err := o.Validate(); err != nil {
			what := "live override of type " + o.Type
			if o.Pool != "" {
				what = "live cap of pool " + o.Pool
			}
			v.Ignored = append(v.Ignored, fmt.Sprintf("the %s is ignored by the functions: %v", what, err))
			continue
		}
		valid = append(valid, o)
	}
	ovs = valid
	r, err := config.NewResolver(e.Defaults, staticStore(ovs), time.Second)
	if err != nil {
		return ConfigView{}, err
	}
	all, err := r.All(ctx)
	if err != nil {
		// The functions refuse such a set and keep the last good one; show what the defaults give.
		v.Warning = err.Error()
		if r, err = config.NewResolver(e.Defaults, nil, time.Second); err != nil {
			return ConfigView{}, err
		}
		if all, err = r.All(ctx); err != nil {
			return ConfigView{}, err
		}
		ovs = nil
	}
	live, ovs := livePoolCaps(ovs)
	v.caps = inForce(e.Defaults.Pools, live)
	byType := map[string]config.Override{}
	for _, o := range ovs {
		byType[o.Type] = o
	}
	seen := map[string]bool{}
	for _, c := range all {
		tv := TypeView{
			Type: c.Type, Limit: c.Limit, Source: c.Source, MaxAttempts: c.MaxAttempts, StateMachineArn: c.StateMachineArn,
			Strategy: c.Strategy, StrategySource: "default", RetiredStrategy: retiredStrategy(configuredStrategy(e.Defaults, ovs, c.Type)),
		}
		var ov *config.Override
		if o, ok := byType[c.Type]; ok {
			ov = &o
			tv.Override = overrideView(o)
			if o.Strategy != "" {
				tv.StrategySource = "override"
			}
		}
		tv.Release, tv.ReleaseSource = releaseOf(e.Defaults, ov, c.Type)
		tv.setKeys(e.Defaults, ov, configuredStrategy(e.Defaults, ovs, c.Type))
		tv.setFlow(e.Defaults, ov, v.at)
		tv.setPools(e.Defaults, ov, configuredStrategy(e.Defaults, ovs, c.Type), v.caps)
		tv.setOverflow(e.Defaults, ov)
		v.Types = append(v.Types, tv)
		seen[c.Type] = true
	}
	// Overrides that give no limit to a type without one still exist; show them.
	for _, o := range ovs {
		if !seen[o.Type] {
			v.Types = append(v.Types, v.typeView(o.Type, e.Defaults, ovs))
		}
	}
	sort.Slice(v.Types, func(i, j int) bool { return v.Types[i].Type < v.Types[j].Type })
	v.Lanes = lanes(e.Defaults, ovs)
	v.Pools = poolViews(e.Defaults, live, v.Types)
	return v, nil
}

// typeView is one type's view, also for a type with no limit at all.
func (v ConfigView) typeView(typ string, d config.Defaults, ovs []config.Override) TypeView {
	for _, t := range v.Types {
		if t.Type == typ {
			return t
		}
	}
	tv := TypeView{
		Type: typ, Source: "none", MaxAttempts: d.DefaultMaxAttempts, StateMachineArn: d.StateMachineArn,
		Strategy: defaultStrategy(d), StrategySource: "default", RetiredStrategy: retiredStrategy(configuredStrategy(d, ovs, typ)),
	}
	if n, ok := d.MaxAttempts[typ]; ok {
		tv.MaxAttempts = n
	}
	tv.Release, tv.ReleaseSource = releaseOf(d, nil, typ)
	var ov *config.Override
	for _, o := range ovs {
		if o.Type == typ && o.Validate() == nil {
			ov = &o
			tv.Release, tv.ReleaseSource = releaseOf(d, &o, typ)
			tv.Override = overrideView(o)
			if o.MaxAttempts > 0 {
				tv.MaxAttempts = o.MaxAttempts
			}
			if o.StateMachineArn != "" {
				tv.StateMachineArn = o.StateMachineArn
			}
			if o.Strategy != "" {
				tv.Strategy, _ = lane.ParseStrategy(o.Strategy) // checked by Validate
				tv.StrategySource = "override"
			}
		}
	}
	tv.setKeys(d, ov, configuredStrategy(d, ovs, typ))
	tv.setFlow(d, ov, v.at)
	tv.setPools(d, ov, configuredStrategy(d, ovs, typ), v.caps)
	tv.setOverflow(d, ov)
	return tv
}

// configuredStrategy is the lane strategy a type is configured with, as written: its live
// override's, if the functions take that override (config.Resolver drops one that breaks the rules),
// else the deployment's LaneStrategy.
func configuredStrategy(d config.Defaults, ovs []config.Override, typ string) string {
	for _, o := range ovs {
		if o.Type == typ && o.Strategy != "" && o.Validate() == nil {
			return o.Strategy
		}
	}
	return d.Strategy
}

// retiredStrategy returns a configured strategy name if it names a retired strategy, which the
// functions run as its successor (lane.ParseStrategy), and "" otherwise.
func retiredStrategy(name string) string {
	if _, err := lane.CheckChoosable(name); errors.Is(err, lane.ErrRetired) {
		return name
	}
	return ""
}

// defaultStrategy is the deployment's lane strategy (LaneStrategy; "" is lane.DefaultStrategy).
func defaultStrategy(d config.Defaults) string {
	s, err := lane.ParseStrategy(d.Strategy)
	if err != nil {
		return d.Strategy // config.NewResolver refuses such defaults before anything is shown
	}
	return s
}

// lanes adds the limits up as the limiter does against the quota: every default or overriding
// limit, and the fallback limit once per unlisted type that may hold lanes at once.
func lanes(d config.Defaults, ovs []config.Override) int {
	eff := map[string]int{}
	for t, n := range d.Limits {
		eff[t] = n
	}
	for _, o := range ovs {
		if o.Limit > 0 && o.Pool == "" {
			eff[o.Type] = o.Limit
		}
	}
	sum := d.FallbackLimit * d.Unlisted()
	for _, n := range eff {
		sum += n
	}
	return sum
}

// Change is what `config set` asks for; nil fields are left as they are.
type Change struct {
	Type            string
	Limit           *int
	MaxAttempts     *int
	StateMachineArn *string
	// Strategy is a lane strategy name (lane.Strategies); Validate refuses a retired one, and Set
	// stores the canonical name.
	Strategy *string
	// Release is a release mode (config.ReleaseModes). Set refuses events for a type whose state
	// machine is Express or cannot be described.
	Release *string
	// KeyLimit is the cap of every concurrency key of the type; 0 removes the live one (the type's
	// TypeKeyLimits entry, if any, applies again).
	KeyLimit *int
	// Key names a concurrency key and KeyCap its own cap; KeyCap 0 removes the key's own cap (it
	// follows the type's key limit again). Set refuses a cap above the type's limit.
	Key    *string
	KeyCap *int
	// Rate is a start rate, "R" or "R:B" as config.ParseRate reads it (R starts per second, B the
	// burst, by default config.DefaultBurst(R)); RemoveRate removes the type's rate. Burst replaces
	// the burst (of Rate, or of the rate in force).
	Rate  *string
	Burst *int
	// KeyRate is the start rate of every key of the type, "R" or "R:B" as config.ParseRate reads
	// it; RemoveRate removes it.
	KeyRate *string
	// KeyOwnRate is key Key's own start rate, "R" or "R:B", and KeyOwnBurst its burst (as Rate and
	// Burst are the type's); RemoveRate removes the key's own rate (it follows KeyRate again).
	KeyOwnRate  *string
	KeyOwnBurst *int
	// Pools puts the type in these pools, "a" or "a+b" (config.ParsePoolList); NoPools in none.
	// Share is its share in them, 0 removes the live share. Set refuses a pool with no cap.
	Pools   *string
	NoPools bool
	Share   *int
	// Overflow is an overflow rule (config.OverflowRules); "" removes the live one (the type's
	// TypeOverflow entry, or queue, applies again). Set refuses cancel or skip for a type without a
	// key cap.
	Overflow *string
	// NewType says the type may be new to the stack (config set --new-type): without it, a change
	// to a type that neither the deployment's parameters nor a live override name is refused, so
	// that a typo does not create a type.
	NewType bool
}

// stateMachineArnRe is a state machine's ARN, or one of its versions' or aliases' (a qualifier after
// a colon: ...:stateMachine:NAME:3, ...:stateMachine:NAME:PROD). StartExecution runs the version or
// alias, and the execution it makes is the state machine's (job.ExecutionArn).
var stateMachineArnRe = regexp.MustCompile(`^arn:aws[a-z-]*:states:[a-z0-9-]+:[0-9]{12}:stateMachine:[A-Za-z0-9_-]{1,80}(:[A-Za-z0-9_-]{1,80})?$`)

// stateMachineArnForm is the form stateMachineArnRe accepts, for refusals.
const stateMachineArnForm = "arn:aws:states:REGION:ACCOUNT:stateMachine:NAME, or NAME:VERSION or NAME:ALIAS"

// UsageError is a request that breaks the command's rules; the command line exits 2 for it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

func usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// Validate checks a change with the limiter's rules, before anything is read or written.
func (c Change) Validate() error {
	if err := job.ValidateType(c.Type); err != nil {
		return UsageError{err}
	}
	if c.Limit == nil && c.MaxAttempts == nil && c.StateMachineArn == nil && c.Strategy == nil && c.Release == nil && c.KeyLimit == nil && c.Key == nil && c.KeyCap == nil &&
		c.Rate == nil && c.Burst == nil && c.KeyRate == nil && c.KeyOwnRate == nil && c.KeyOwnBurst == nil && c.Pools == nil && !c.NoPools && c.Share == nil &&
		c.Overflow == nil {
		return usagef("nothing to set: give --limit, --max-attempts, --state-machine, --strategy, --release, --key-limit, --key-rate, --key with --limit or --rate, --rate or --burst, --pools, --no-pools, --share or --overflow")
	}
	if err := c.validatePools(); err != nil {
		return err
	}
	if err := c.validateKeys(); err != nil {
		return err
	}
	if err := c.validateKeyRates(); err != nil {
		return err
	}
	if err := c.validateRate(); err != nil {
		return err
	}
	if c.Strategy != nil {
		if _, err := parseStrategyFlag(*c.Strategy); err != nil {
			return err
		}
	}
	if c.Release != nil {
		if _, err := parseReleaseFlag(*c.Release); err != nil {
			return err
		}
	}
	if c.Overflow != nil {
		if _, err := parseOverflowFlag(*c.Overflow); err != nil {
			return err
		}
	}
	if c.Limit != nil && (*c.Limit < 1 || *c.Limit >= config.MaxInFlight) {
		return usagef("--limit %d must be at least 1 and under the SQS FIFO in-flight quota of %d (to drop an override: config reset)", *c.Limit, config.MaxInFlight)
	}
	if c.MaxAttempts != nil {
		if err := validateAttempts(*c.MaxAttempts); err != nil {
			return err
		}
	}
	if c.StateMachineArn != nil && !stateMachineArnRe.MatchString(*c.StateMachineArn) {
		return usagef("--state-machine %q is not a state machine ARN (%s)", *c.StateMachineArn, stateMachineArnForm)
	}
	return nil
}

// validateAttempts checks --max-attempts against the range the template allows a type
// (TypeMaxAttempts: 1-999, config.MaxTypeAttempts).
func validateAttempts(n int) error {
	if n < 1 || n > config.MaxTypeAttempts {
		return usagef("--max-attempts %d must be 1-%d", n, config.MaxTypeAttempts)
	}
	return nil
}

// parseStrategyFlag checks a --strategy value with the rule for a strategy about to be written
// (lane.CheckChoosable: the functions' names, less the retired least-loaded, refused with why) and
// returns its canonical name. An empty one, which lane.ParseStrategy reads as the built-in
// default, is refused: like the other fields, a strategy once set is not unset by `config set`.
func parseStrategyFlag(name string) (string, error) {
	if name == "" {
		return "", usagef("--strategy needs a name (known: %s); to drop a type's whole override, use config reset", strings.Join(lane.Strategies, ", "))
	}
	s, err := lane.CheckChoosable(name)
	if err != nil {
		return "", usagef("--strategy: %v", err)
	}
	return s, nil
}

// parseReleaseFlag checks a --release value (config.ParseReleaseMode) and returns its name. An
// empty one, which config.ParseReleaseMode reads as step, is refused: like the other fields, a
// release mode once set is not unset by `config set`.
func parseReleaseFlag(name string) (string, error) {
	if name == "" {
		return "", usagef("--release needs a mode (known: %s); to drop a type's whole override, use config reset", strings.Join(config.ReleaseModes, ", "))
	}
	m, err := config.ParseReleaseMode(name)
	if err != nil {
		return "", usagef("--release: %v", err)
	}
	return m, nil
}

// SetResult is the effective configuration after a change, and what to know about it.
type SetResult struct {
	Before   TypeView   `json:"before"`
	After    TypeView   `json:"after"`
	Config   ConfigView `json:"config"`
	Warnings []string   `json:"warnings,omitempty"`
	// AppliesWithinSeconds is how soon the functions act on what was written (ConfigCacheSeconds,
	// the stack's own); nil when nothing was written.
	AppliesWithinSeconds *float64 `json:"appliesWithinSeconds,omitempty"`
	// Unchanged says the change left the live override as it was: nothing was written.
	Unchanged bool `json:"unchanged,omitempty"`
}

// written marks a result as written: the functions act on it within cache.
func (r *SetResult) written(cache time.Duration) {
	s := cache.Seconds()
	r.AppliesWithinSeconds = &s
}

// appliesText says how soon the functions act on a live change that caches for d
// (ConfigCacheSeconds).
func appliesText(d time.Duration) string {
	if d <= 0 {
		return "at once (ConfigCacheSeconds is 0)"
	}
	return fmt.Sprintf("within %s (ConfigCacheSeconds)", d)
}

// Set changes a type's live override: the fields given replace the stored ones, the others stay.
// The whole set of overrides must pass the checks the functions make (every limit within the
// quota, and all limits together under it), or nothing is written.
func (e ConfigEditor) Set(ctx context.Context, c Change) (SetResult, error) {
	if err := c.Validate(); err != nil {
		return SetResult{}, err
	}
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return SetResult{}, err
	}
	before, err := e.view(ctx, ovs)
	if err != nil {
		return SetResult{}, err
	}
	if !c.NewType {
		if err := e.checkKnown(c.Type, ovs); err != nil {
			return SetResult{}, err
		}
	}
	o, rest := splitOverrides(ovs, c.Type)
	stored := o
	if c.Limit != nil {
		o.Limit = *c.Limit
	}
	if c.MaxAttempts != nil {
		o.MaxAttempts = *c.MaxAttempts
	}
	if c.Strategy != nil {
		// Stored by its canonical name, whatever alias lane.ParseStrategy took.
		o.Strategy, _ = parseStrategyFlag(*c.Strategy) // checked by Validate
	}
	if c.StateMachineArn != nil {
		o.StateMachineArn = *c.StateMachineArn
	}
	if c.Release != nil {
		o.Release, _ = parseReleaseFlag(*c.Release) // checked by Validate
	}
	if c.Overflow != nil {
		o.Overflow, _ = parseOverflowFlag(*c.Overflow) // checked by Validate
	}
	var warnings []string
	w, err := c.applyKeys(&o)
	if err != nil {
		return SetResult{}, err
	}
	warnings = append(warnings, w...)
	if w, err = c.applyRate(&o, e.Defaults); err != nil {
		return SetResult{}, err
	}
	warnings = append(warnings, w...)
	if w, err = c.applyKeyRates(&o); err != nil {
		return SetResult{}, err
	}
	warnings = append(warnings, w...)
	if w, err = c.applyPools(&o, e.Defaults, before.poolCaps()); err != nil {
		return SetResult{}, err
	}
	warnings = append(warnings, w...)
	if c.StateMachineArn != nil || c.Release != nil {
		w, err := e.checkStateMachine(ctx, o, c.StateMachineArn != nil)
		if err != nil {
			return SetResult{}, err
		}
		warnings = append(warnings, w...)
	}
	if err := o.Validate(); err != nil {
		// Only a stored item written by hand gets here: the change itself was checked.
		return SetResult{}, fmt.Errorf("%w (the stored override of type %s keeps the fields not given: set them too, or config reset it)", err, c.Type)
	}
	next := append(rest, o)
	if err := e.checkSet(ctx, next); err != nil {
		return SetResult{}, err
	}
	if err := e.checkKeyCaps(ctx, c, next); err != nil {
		return SetResult{}, err
	}
	if err := e.checkOverflow(ctx, c, before.typeView(c.Type, e.Defaults, ovs), next); err != nil {
		return SetResult{}, err
	}
	if sameOverride(o, stored) {
		what := fmt.Sprintf("the live override of type %s says so already", c.Type)
		if _, found := findOverride(ovs, c.Type); !found {
			what = fmt.Sprintf("type %s has no live override, and this change would write an empty one", c.Type)
		}
		res, err := e.result(ctx, c.Type, before, append(warnings, "nothing changed, nothing written: "+what))
		res.Unchanged = true
		return res, err
	}
	if err := e.Store.SetOverride(ctx, o); err != nil {
		return SetResult{}, err
	}
	res, err := e.result(ctx, c.Type, before, warnings)
	res.written(e.CacheAge)
	return res, err
}

// sameOverride reports whether two overrides of a type say the same (an empty map is none).
func sameOverride(a, b config.Override) bool {
	if len(a.KeyLimits) == 0 && len(b.KeyLimits) == 0 {
		a.KeyLimits, b.KeyLimits = nil, nil
	}
	if len(a.KeyRates) == 0 && len(b.KeyRates) == 0 {
		a.KeyRates, b.KeyRates = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// findOverride returns typ's live override, if it has one.
func findOverride(ovs []config.Override, typ string) (config.Override, bool) {
	for _, o := range ovs {
		if o.Type == typ {
			return o, true
		}
	}
	return config.Override{}, false
}

// Reset removes a type's live override, so its defaults apply again. A type that exists only as
// its override has no limit afterwards: the router refuses its new jobs and the starter
// dead-letters every one still queued (unknown_type). Such a reset says what it can count of the
// jobs waiting and is done only with force.
func (e ConfigEditor) Reset(ctx context.Context, typ string, force bool) (SetResult, error) {
	if err := job.ValidateType(typ); err != nil {
		return SetResult{}, UsageError{err}
	}
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return SetResult{}, err
	}
	before, err := e.view(ctx, ovs)
	if err != nil {
		return SetResult{}, err
	}
	var rest []config.Override
	found := false
	for _, x := range ovs {
		if x.Type == typ {
			found = true
		} else {
			rest = append(rest, x)
		}
	}
	var warnings []string
	if !found {
		warnings = append(warnings, fmt.Sprintf("type %s had no live override: nothing changed", typ))
	} else {
		if p := before.typeView(typ, e.Defaults, ovs).Pause; p != nil {
			// The item held the pause: dropping it resumes the type, which "reset" does not say.
			if !force {
				return SetResult{}, usagef("type %s is paused (for %s: %s): a reset drops its live override, pause included, so it resumes %s and its waiting jobs start. Nothing written: resume it with \"sfnlimit resume %s\", or add --force to reset it anyway",
					typ, p.age(), p.reasonText(), appliesText(e.CacheAge), typ)
			}
			// Forced: it resumes, but the reset wakes nobody.
			warnings = append(warnings, fmt.Sprintf("type %s was paused (for %s: %s): the reset resumes it, and the releaser's sweep wakes its jobs parked by the pause within a minute (sfnlimit resume %s wakes them at once)",
				typ, p.age(), p.reasonText(), typ))
		}
		if err := e.checkSet(ctx, rest); err != nil {
			return SetResult{}, UsageError{fmt.Errorf("reset refused: %w", err)}
		}
		after, err := e.view(ctx, rest)
		if err != nil {
			return SetResult{}, err
		}
		if b, a := before.typeView(typ, e.Defaults, ovs), after.typeView(typ, e.Defaults, rest); (a.Overflow == config.OverflowCancel || a.Overflow == config.OverflowSkip) && a.OverflowProblem != "" && b.OverflowProblem == "" {
			// The item held the key cap the deployment's cancel or skip rule acts at: reset, the
			// type queues.
			what := "it stops nothing"
			if a.Overflow == config.OverflowSkip {
				what = "none is skipped"
			}
			warnings = append(warnings, fmt.Sprintf("%s; until then type %s queues: a job at its key's cap waits, %s", a.OverflowProblem, typ, what))
		}
		if after.typeView(typ, e.Defaults, rest).Limit == 0 {
			waiting := e.waiting(ctx, typ)
			if !force {
				return SetResult{}, usagef("type %s exists only as a live override: reset, it has no limit, so the router refuses its new jobs and the starter dead-letters every job of it still queued (unknown_type). %s. Nothing written: add --force to reset it anyway; to run those jobs later, set a limit again and redrive them (sfnlimit dlq redrive --type %s --reason unknown_type)", typ, waiting, typ)
			}
			warnings = append(warnings, fmt.Sprintf("type %s has no limit any more: its jobs still queued are dead-lettered (unknown_type); %s", typ, waiting))
		}
		if err := e.Store.DeleteOverride(ctx, typ); err != nil {
			return SetResult{}, err
		}
	}
	res, err := e.result(ctx, typ, before, warnings)
	if found {
		res.written(e.CacheAge)
	}
	return res, err
}

// waiting says, for people, what can be counted of a type's jobs not yet done. Leases count those
// that hold a lane (bound to it or running there); SQS counts only whole queues
// (ApproximateNumberOfMessages*), not one type's messages, so the queues' figures are given as what
// they are.
func (e ConfigEditor) waiting(ctx context.Context, typ string) string {
	if e.Status == nil {
		return "The jobs waiting could not be counted (no status reader)"
	}
	st, err := e.Status.Read(ctx)
	if err != nil {
		return fmt.Sprintf("The jobs waiting could not be counted (%v)", err)
	}
	var ts TypeStatus
	for _, x := range st.Types {
		if x.Type == typ {
			ts = x
		}
	}
	holds := "hold a lane"
	if ts.Running == 1 {
		holds = "holds a lane"
	}
	q := st.Queues
	return fmt.Sprintf("Now %d of its jobs %s (leases); the lanes queue holds about %d waiting and %d in flight and the general queue about %d waiting, of every type (SQS cannot count one type's messages)",
		ts.Running, holds, q.Lanes.Waiting, q.Lanes.InFlight, q.General.Waiting)
}

// checkSet runs a set of overrides through the functions' own checks (config.Resolver): one that
// would be refused there is refused here, as a usage error.
func (e ConfigEditor) checkSet(ctx context.Context, ovs []config.Override) error {
	r, err := config.NewResolver(e.Defaults, staticStore(ovs), time.Second)
	if err != nil {
		return err
	}
	if _, err := r.All(ctx); err != nil {
		return UsageError{err}
	}
	return nil
}

// checkStateMachine checks the state machine a type's override o leaves it with (its own, else the
// deployment's sample), when the change named one (named) or may put it in events mode. A named one
// must exist. In events mode it must be Standard: Express workflows send no status events, so
// nothing but the sweep would release their lanes. That needs DescribeStateMachine; when it fails
// for another reason than a missing machine, events mode is refused (nothing is written): a wrong
// guess holds lanes, and the fix (states:DescribeStateMachine for the operator) is cheap. In step
// mode the workflow's Release state releases, and a failed check is only a warning, as before.
func (e ConfigEditor) checkStateMachine(ctx context.Context, o config.Override, named bool) (warnings []string, err error) {
	arn := o.StateMachineArn
	if arn == "" {
		arn = e.Defaults.StateMachineArn
	}
	mode, _ := releaseOf(e.Defaults, &o, o.Type)
	events := mode == config.ReleaseEvents
	if !events && (!named || arn == e.Defaults.StateMachineArn) {
		return nil, nil
	}
	var reminder string
	if named && arn != e.Defaults.StateMachineArn {
		reminder = e.startableNote(arn)
	}
	if e.SFN == nil {
		if events {
			return nil, fmt.Errorf("type %s in events mode: cannot check that state machine %s is Standard (no Step Functions client); nothing written", o.Type, arn)
		}
		return nonEmpty(reminder), nil
	}
	// A version or alias is of its state machine's type; DescribeStateMachine takes a version ARN
	// but not an alias's, so the machine itself is described.
	out, err := e.SFN.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(job.UnqualifiedStateMachine(arn))})
	var missing *sfntypes.StateMachineDoesNotExist
	switch {
	case errors.As(err, &missing):
		return nil, usagef("state machine %s does not exist", arn)
	case err != nil && events:
		return nil, fmt.Errorf("type %s in events mode: could not check that state machine %s is Standard (%w); Express workflows send no status events, so events mode is set only on a machine described as STANDARD (nothing written; the check needs states:DescribeStateMachine)", o.Type, arn, err)
	case err != nil:
		return nonEmpty(fmt.Sprintf("could not check that state machine %s exists (%v); %s", arn, err, reminder)), nil
	}
	if events && out.Type == sfntypes.StateMachineTypeExpress {
		return nil, expressRefusal(o.Type, arn)
	}
	return nonEmpty(reminder), nil
}

// expressRefusal says why a type on an Express workflow cannot run in events mode.
func expressRefusal(typ, arn string) error {
	return usagef("Express workflows send no status events: state machine %s is EXPRESS, so in events mode nothing would release the lanes of type %s (nothing written). Keep it in step mode, where the workflow's Release state releases, or use a Standard workflow", arn, typ)
}

// startableNote says whether the stack's roles may start a state machine, as far as e.Stack knows.
func (e ConfigEditor) startableNote(arn string) string {
	const extra = "the starter starts only the stack's own state machines and those in the ExtraStateMachineArns parameter: make sure it is listed there"
	if e.Stack == nil {
		return extra
	}
	if ok, _ := e.Stack.startable(arn); ok {
		return ""
	}
	if e.Stack.ExtraErr != nil {
		return fmt.Sprintf("%s (its parameters could not be read: %v)", extra, e.Stack.ExtraErr)
	}
	note := fmt.Sprintf("state machine %s is not in the stack's ExtraStateMachineArns: the starter may not start it, and its jobs fail to start until it is listed", arn)
	if e.Stack.Redeploy != nil {
		note += ". Redeploy with it: " + e.Stack.Redeploy(appendNew(e.Stack.Extra, arn))
	}
	return note
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func (e ConfigEditor) result(ctx context.Context, typ string, before ConfigView, warnings []string) (SetResult, error) {
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return SetResult{}, err
	}
	after, err := e.view(ctx, ovs)
	if err != nil {
		return SetResult{}, err
	}
	res := SetResult{
		Before: before.typeView(typ, e.Defaults, nil), After: after.typeView(typ, e.Defaults, ovs),
		Config: after, Warnings: warnings,
	}
	if res.Before.Limit == 0 && res.After.Limit > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("type %s is new: wait %s before sending its jobs, or a function that read the config earlier may still refuse them (unknown_type)", typ, e.CacheAge))
	}
	if res.After.Limit == 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("type %s has no limit: the router refuses its jobs (unknown_type) until one is set with --limit", typ))
	}
	res.Warnings = append(res.Warnings, keyWarnings(res.Before, res.After)...)
	res.Warnings = append(res.Warnings, keyRateWarnings(res.Before, res.After)...)
	res.Warnings = append(res.Warnings, flowWarnings(res.Before, res.After)...)
	res.Warnings = append(res.Warnings, poolWarnings(res.Before, res.After)...)
	res.Warnings = append(res.Warnings, overflowWarnings(res.Before, res.After)...)
	if a := res.After; a.RetiredStrategy != "" && a.StrategySource == "override" {
		res.Warnings = append(res.Warnings, fmt.Sprintf("the live override of type %s keeps lane strategy %s, which is retired: it runs as %s (config set %s --strategy %s writes that)",
			typ, a.RetiredStrategy, a.Strategy, typ, a.Strategy))
	}
	return res, nil
}

// WriteTable prints the configuration for people.
func (v ConfigView) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// The KEY LIMIT column is shown once some type caps its keys: a deployment without keys keeps
	// its table as it was.
	keys := v.capsKeys()
	keyCol := func(t TypeView) string {
		if !keys {
			return ""
		}
		return t.keyLimitText() + "\t"
	}
	// So are the RATE, KEY RATE and PAUSED columns, once some type has a rate, rates its keys or is
	// paused.
	rates, keyRates, paused, pools, overflow := v.showsRate(), v.ratesKeys(), v.showsPaused(), v.showsPools(), v.showsOverflow()
	flowCols := func(rate, keyRate, pause, pool, share, rule string) string {
		var b strings.Builder
		if overflow {
			b.WriteString(rule + "\t")
		}
		if pools {
			b.WriteString(pool + "\t" + share + "\t")
		}
		if rates {
			b.WriteString(rate + "\t")
		}
		if keyRates {
			b.WriteString(keyRate + "\t")
		}
		if paused {
			b.WriteString(pause + "\t")
		}
		return b.String()
	}
	fmt.Fprintf(tw, "TYPE\tLIMIT\tSOURCE\tMAX ATTEMPTS\tSTATE MACHINE\tSTRATEGY\tRELEASE\t%s%sLIVE OVERRIDE\n", keyCol(TypeView{KeyLimit: -1}), flowCols("RATE", "KEY RATE", "PAUSED", "POOLS", "SHARE", "OVERFLOW"))
	var retired []string
	for _, t := range v.Types {
		limit := strconv.Itoa(t.Limit)
		if t.Limit == 0 {
			limit = "-"
		}
		strategy := t.Strategy
		if t.RetiredStrategy != "" {
			strategy += "*"
			retired = append(retired, t.Type)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s (%s)\t%s (%s)\t%s%s%s\n", t.Type, limit, t.Source, t.MaxAttempts, shortArn(t.StateMachineArn),
			strategy, t.StrategySource, t.Release, t.ReleaseSource, keyCol(t), flowCols(t.rateText(), t.keyRateText(), t.pausedText(), t.poolsText(), t.shareText(), t.overflowText()), t.Override.String())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(retired) > 0 {
		fmt.Fprintf(w, "* configured %s, a retired lane strategy: run as %s (%s). Set first-free or random to drop this note.\n",
			lane.LeastLoaded, lane.FirstFree, strings.Join(retired, ", "))
	}
	v.writeKeys(w)
	v.writeFlow(w)
	v.writeOverflow(w)
	if err := v.writePools(w); err != nil {
		return err
	}
	other := "refused (unknown_type)"
	if v.FallbackLimit > 0 {
		other = fmt.Sprintf("limit %d each (DefaultLimit)", v.FallbackLimit)
	}
	fmt.Fprintf(w, "\nTypes not listed: %s. Limits add up to %d lanes of the SQS FIFO in-flight quota of %d.\n", other, v.Lanes, v.Quota)
	if v.RetiredStrategy != "" {
		fmt.Fprintf(w, "Lane strategy without an override: %s (LaneStrategy %s, which is retired). ", v.Strategy, v.RetiredStrategy)
	} else {
		fmt.Fprintf(w, "Lane strategy without an override: %s (LaneStrategy). ", v.Strategy)
	}
	fmt.Fprintf(w, "Live overrides take effect within %s (ConfigCacheSeconds).\n", time.Duration(v.CacheSeconds*float64(time.Second)))
	fmt.Fprintf(w, "Release mode without an override: %s (ReleaseMode)", v.Release)
	if len(v.Releases) > 0 {
		fmt.Fprintf(w, ", but %s (TypeReleaseModes)", config.FormatReleaseModes(v.Releases))
	}
	fmt.Fprintln(w, ".")
	if len(v.KeyLimits) > 0 {
		fmt.Fprintf(w, "Key limits without an override: %s (TypeKeyLimits); other types cap no key.\n", config.FormatKeyLimits(v.KeyLimits))
	}
	if len(v.Rates) > 0 {
		fmt.Fprintf(w, "Start rates without an override: %s (TypeRates, per second:burst); other types have none.\n", formatRates(v.Rates))
	}
	if v.Warning != "" {
		fmt.Fprintf(w, "WARNING: the stored overrides are refused by the functions, which keep the last good set or the defaults: %s\n", v.Warning)
	}
	for _, x := range v.Ignored {
		fmt.Fprintf(w, "WARNING: %s\n", x)
	}
	return nil
}

func (o *OverrideView) String() string {
	if o == nil {
		return "-"
	}
	var parts []string
	if o.Limit > 0 {
		parts = append(parts, fmt.Sprintf("limit=%d", o.Limit))
	}
	if o.MaxAttempts > 0 {
		parts = append(parts, fmt.Sprintf("maxAttempts=%d", o.MaxAttempts))
	}
	if o.StateMachineArn != "" {
		parts = append(parts, "stateMachine="+shortArn(o.StateMachineArn))
	}
	if o.Strategy != "" {
		parts = append(parts, "strategy="+o.Strategy)
	}
	if o.Release != "" {
		parts = append(parts, "release="+o.Release)
	}
	if o.KeyLimit > 0 {
		parts = append(parts, fmt.Sprintf("keyLimit=%d", o.KeyLimit))
	}
	if o.KeyCaps > 0 {
		parts = append(parts, fmt.Sprintf("keyLimits=%s", plural(o.KeyCaps, "key", "keys")))
	}
	if o.Rate != "" {
		parts = append(parts, "rate="+o.Rate)
	}
	if o.NoRate {
		parts = append(parts, "noRate")
	}
	if o.KeyRate != "" {
		parts = append(parts, "keyRate="+o.KeyRate)
	}
	if o.OwnKeyRates > 0 {
		parts = append(parts, fmt.Sprintf("keyRates=%s", plural(o.OwnKeyRates, "key", "keys")))
	}
	if o.Paused {
		parts = append(parts, "paused")
	}
	if o.Pools != "" {
		parts = append(parts, "pools="+o.Pools)
	}
	if o.NoPools {
		parts = append(parts, "noPools")
	}
	if o.Share > 0 {
		parts = append(parts, fmt.Sprintf("share=%d", o.Share))
	}
	if o.Overflow != "" {
		parts = append(parts, "overflow="+o.Overflow)
	}
	if len(parts) == 0 {
		return "(empty)"
	}
	return strings.Join(parts, " ")
}

// WriteTable prints the result of a change.
func (r SetResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "type %s: limit %s -> %s (%s), max attempts %d -> %d, state machine %s, strategy %s -> %s (%s), release %s -> %s (%s)\n",
		r.After.Type, limitText(r.Before.Limit), limitText(r.After.Limit), r.After.Source,
		r.Before.MaxAttempts, r.After.MaxAttempts, shortArn(r.After.StateMachineArn),
		r.Before.Strategy, r.After.Strategy, r.After.StrategySource,
		r.Before.Release, r.After.Release, r.After.ReleaseSource)
	if s := r.AppliesWithinSeconds; s != nil {
		d := time.Duration(*s * float64(time.Second))
		if d > 0 {
			fmt.Fprintf(w, "the change applies %s: until then, a function that read the config before it goes on with the old one\n", appliesText(d))
		} else {
			fmt.Fprintf(w, "the change applies %s\n", appliesText(d))
		}
	}
	if r.Before.capsKeys() || r.After.capsKeys() {
		fmt.Fprintf(w, "keys of type %s: key limit %s -> %s (%s); own caps %s -> %s\n", r.After.Type,
			limitText(r.Before.KeyLimit), limitText(r.After.KeyLimit), r.After.KeyLimitSource,
			keyCapsText(r.Before.KeyLimits, keysListed), keyCapsText(r.After.KeyLimits, keysListed))
	}
	if r.Before.Rate != nil || r.After.Rate != nil || r.After.RateSource == RateFromOverride {
		fmt.Fprintf(w, "start rate of type %s: %s -> %s (%s)\n", r.After.Type, r.Before.Rate, r.After.Rate, r.After.RateSource)
	}
	if r.Before.ratesKeys() || r.After.ratesKeys() {
		fmt.Fprintf(w, "key rates of type %s: every key %s -> %s; own rates %s -> %s\n", r.After.Type, r.Before.KeyRate, r.After.KeyRate,
			keyRatesText(r.Before.KeyRates, keysListed), keyRatesText(r.After.KeyRates, keysListed))
	}
	if b, a := r.Before, r.After; len(b.Pools) > 0 || len(a.Pools) > 0 || a.PoolsSource == PoolsFromOverride || a.ShareSource == ShareFromOverride {
		fmt.Fprintf(w, "pools of type %s: %s -> %s; share %d -> %d (%s)\n", a.Type, b.poolsText(), a.poolsText(), b.Share, a.Share, a.ShareSource)
	}
	if b, a := r.Before, r.After; b.Overflow != a.Overflow || a.Overflow != config.OverflowQueue || a.OverflowSource == OverflowFromOverride {
		fmt.Fprintf(w, "overflow rule of type %s: %s -> %s (%s)\n", a.Type, b.Overflow, a.Overflow, a.OverflowSource)
	}
	for _, x := range r.Warnings {
		fmt.Fprintln(w, "note:", x)
	}
	fmt.Fprintln(w)
	return r.Config.WriteTable(w)
}

func limitText(n int) string {
	if n == 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

// ValidateTypeArg checks a TYPE argument with the router's rules; a bad one is a usage error.
func ValidateTypeArg(typ string) error {
	if err := job.ValidateType(typ); err != nil {
		return UsageError{err}
	}
	return nil
}

// splitOverrides returns typ's live override (only its type set when it has none) and the others.
func splitOverrides(ovs []config.Override, typ string) (config.Override, []config.Override) {
	o := config.Override{Type: typ}
	var rest []config.Override
	for _, x := range ovs {
		if x.Type == typ {
			o = x
		} else {
			rest = append(rest, x)
		}
	}
	return o, rest
}
