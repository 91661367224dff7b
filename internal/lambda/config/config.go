// Package config resolves each job type's settings: deployment defaults from the environment (set by
// template parameters) and live overrides stored in DynamoDB, read through a short cache.
package config

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// MaxInFlight is the SQS FIFO in-flight quota: at most this many lanes can be held at once per queue.
const MaxInFlight = 120000

// MaxUnlistedTypes is the most UNLISTED_TYPES_LIMIT may be (the template's MaxValue).
const MaxUnlistedTypes = 1000

// MaxCacheAge bounds how stale a live override may be when a function acts on it.
const MaxCacheAge = 30 * time.Second

// ErrUnknownType means a type has no limit and there is no default limit.
var ErrUnknownType = errors.New("type has no limit and DEFAULT_LIMIT is 0")

// TypeConfig is the effective configuration of one job type.
type TypeConfig struct {
	Type            string
	Limit           int
	MaxAttempts     int
	StateMachineArn string
	// Strategy is how the router picks a lane: lane.FirstFree or lane.Random.
	Strategy string
	// Release is how the type's lanes are released: ReleaseStep or ReleaseEvents.
	Release string
	// KeyLimit caps the running jobs of each concurrency key (0: no cap); KeyLimits are the caps
	// of keys with their own. KeyCap reads them.
	KeyLimit  int
	KeyLimits map[string]int
	// Pause, when set, stops the type's new starts (Paused).
	Pause *Pause
	// Rate bounds the type's starts per second (none when not IsSet).
	Rate Rate
	// KeyRate bounds the starts per second of each key of the type, KeyRates those of keys with a
	// rate of their own (none when not IsSet). KeyRateOf reads them.
	KeyRate  Rate
	KeyRates map[string]Rate
	// Pools are the shared caps the type's running jobs count against, beside its own limit
	// (at most MaxPoolsPerType), each with the type's share.
	Pools []Pool
	// Overflow is the type's overflow rule (OverflowQueue, OverflowCancel; "" is OverflowQueue):
	// what a job does when its key is at its cap.
	Overflow string
	// Source says where the limit came from: "override", "default" (TYPE_LIMITS) or "fallback" (DEFAULT_LIMIT).
	Source string
}

// SourceFallback is the Source of a type that runs on DEFAULT_LIMIT: an unlisted type.
const SourceFallback = "fallback"

// DefaultUnlistedTypes is the most unlisted types UNLISTED_TYPES_LIMIT 0 (unset) lets hold lanes.
const DefaultUnlistedTypes = 10

// Defaults is the deployment's configuration, from template parameters.
type Defaults struct {
	Limits        map[string]int
	FallbackLimit int // DEFAULT_LIMIT: limit of a type not in Limits; 0 refuses such types
	// UnlistedTypes is how many types may run on FallbackLimit at once (UNLISTED_TYPES_LIMIT; 0:
	// as many as fit, Unlisted): the router refuses the jobs of any more (internal/lambda/unlisted).
	UnlistedTypes      int
	MaxAttempts        map[string]int
	DefaultMaxAttempts int
	StateMachineArn    string
	// Strategy is the lane strategy of every type without an override (LANE_STRATEGY; "" is
	// lane.DefaultStrategy).
	Strategy string
	// Release is the release mode of every type without its own (RELEASE_MODE; "" is ReleaseStep),
	// Releases those of listed types (TYPE_RELEASE_MODES).
	Release  string
	Releases map[string]string
	// KeyLimits are the per-key caps of listed types (TYPE_KEY_LIMITS, "llm=5").
	KeyLimits map[string]int
	// Rates are the start rates of listed types (TYPE_RATES, "partner=5:10").
	Rates map[string]Rate
	// Pools are the shared caps by name (POOL_CAPS, "llm_api=50"), TypePools the pools of each
	// type (TYPE_POOLS, "summarize=llm_api"), Shares each type's share in its pools
	// (TYPE_POOL_SHARES; 1 when not listed).
	Pools     map[string]int
	TypePools map[string][]string
	Shares    map[string]int
	// Overflows are the overflow rules of listed types (TYPE_OVERFLOW, "reindex=cancel"); every
	// other type queues (OverflowQueue).
	Overflows map[string]string
}

// Override is a live per-type change stored in the table; zero fields leave the default in force.
type Override struct {
	Type            string
	Limit           int
	MaxAttempts     int
	StateMachineArn string
	Strategy        string
	Release         string
	// KeyLimit is the cap of every key of the type (0 leaves the default); KeyLimits those of
	// keys with their own (a premium tenant), which may be above KeyLimit, never above Limit.
	KeyLimit  int
	KeyLimits map[string]int
	// Pause pauses the type (nil: not paused).
	Pause *Pause
	// Rate replaces the type's start rate when IsSet; NoRate removes the default one.
	Rate   Rate
	NoRate bool
	// KeyRate is the start rate of every key of the type (none when not IsSet); KeyRates those of
	// keys with their own (a noisy tenant held to less, a premium one given more).
	KeyRate  Rate
	KeyRates map[string]Rate
	// Pools replaces the type's pools when set, NoPools takes it out of the deployment's; Share
	// replaces its share in them (0 leaves the default).
	Pools   []string
	NoPools bool
	Share   int
	// Pool, when set, makes this the live cap (Limit) of the pool of that name, not a type's
	// override (Type is then empty).
	Pool string
	// Overflow replaces the type's overflow rule when set (OverflowRules).
	Overflow string
}

// Validate checks an override against the same rules as the defaults.
func (o Override) Validate() error {
	if o.Pool != "" {
		return o.validatePool()
	}
	if err := job.ValidateType(o.Type); err != nil {
		return err
	}
	if o.Strategy != "" {
		if _, err := lane.ParseStrategy(o.Strategy); err != nil {
			return fmt.Errorf("type %s: %w", o.Type, err)
		}
	}
	if o.Release != "" {
		if _, err := ParseReleaseMode(o.Release); err != nil {
			return fmt.Errorf("type %s: %w", o.Type, err)
		}
	}
	if o.Overflow != "" {
		if _, err := ParseOverflow(o.Overflow); err != nil {
			return fmt.Errorf("type %s: %w", o.Type, err)
		}
	}
	if o.Limit < 0 || o.MaxAttempts < 0 {
		return fmt.Errorf("type %s: limit and max attempts must not be negative", o.Type)
	}
	if o.Limit > MaxInFlight {
		return fmt.Errorf("type %s: limit %d is more than the FIFO in-flight quota %d", o.Type, o.Limit, MaxInFlight)
	}
	if err := o.Rate.Validate(); err != nil {
		return fmt.Errorf("type %s: %w", o.Type, err)
	}
	if o.NoRate && o.Rate.IsSet() {
		return fmt.Errorf("type %s: a rate and no rate at once", o.Type)
	}
	if err := validatePause(o.Type, o.Pause); err != nil {
		return err
	}
	if err := o.validateTypePools(); err != nil {
		return err
	}
	if err := validateKeyRates(o.Type, o.KeyRate, o.KeyRates); err != nil {
		return err
	}
	return validateKeyLimits(o.Type, o.KeyLimit, o.KeyLimits)
}

// Unlisted is how many types may run on the fallback limit at once: UnlistedTypes, else as many
// as fit under the in-flight quota beside the listed limits, at most DefaultUnlistedTypes and at
// least 1 (a fallback that does not fit once is refused by Validate). So a deployment that sets
// only DefaultLimit, valid when the fallback counted once, stays valid with fewer unlisted types.
func (d Defaults) Unlisted() int {
	if d.UnlistedTypes > 0 {
		return d.UnlistedTypes
	}
	if d.FallbackLimit <= 0 {
		return DefaultUnlistedTypes // no type runs on it
	}
	listed := 0
	for _, n := range d.Limits {
		listed = min(listed+max(n, 0), MaxInFlight) // no wrap-around on absurd limits
	}
	return max(1, min(DefaultUnlistedTypes, (MaxInFlight-1-listed)/d.FallbackLimit))
}

// unlistedLanes is the most lanes the types on the fallback limit hold together: each of the
// Unlisted types at once holds up to the fallback limit.
func (d Defaults) unlistedLanes() int { return d.FallbackLimit * d.Unlisted() }

// Validate checks the defaults: every limit at least 1 and their sum within the FIFO in-flight quota.
// The fallback limit counts once per type that may run on it at once (Unlisted).
func (d Defaults) Validate() error {
	if d.FallbackLimit < 0 || d.FallbackLimit >= MaxInFlight {
		return fmt.Errorf("DEFAULT_LIMIT %d must be 0 or more and under the SQS FIFO in-flight quota of %d", d.FallbackLimit, MaxInFlight)
	}
	if _, err := lane.ParseStrategy(d.Strategy); err != nil {
		return fmt.Errorf("LANE_STRATEGY: %w", err)
	}
	if _, err := ParseReleaseMode(d.Release); err != nil {
		return fmt.Errorf("RELEASE_MODE: %w", err)
	}
	for t, m := range d.Overflows {
		if _, err := ParseOverflow(m); err != nil {
			return fmt.Errorf("TYPE_OVERFLOW: type %s: %w", t, err)
		}
	}
	for t, m := range d.Releases {
		if _, err := ParseReleaseMode(m); err != nil {
			return fmt.Errorf("TYPE_RELEASE_MODES: type %s: %w", t, err)
		}
	}
	for t, n := range d.KeyLimits {
		if err := validateKeyLimits(t, n, nil); err != nil {
			return fmt.Errorf("TYPE_KEY_LIMITS: %w", err)
		}
	}
	for t, r := range d.Rates {
		if err := job.ValidateType(t); err != nil {
			return fmt.Errorf("TYPE_RATES: %w", err)
		}
		if err := r.Validate(); err != nil {
			return fmt.Errorf("TYPE_RATES: type %s: %w", t, err)
		}
	}
	if err := d.validatePools(); err != nil {
		return err
	}
	if d.UnlistedTypes < 0 || d.UnlistedTypes > MaxUnlistedTypes {
		return fmt.Errorf("UNLISTED_TYPES_LIMIT %d must be from 1 to %d", d.UnlistedTypes, MaxUnlistedTypes)
	}
	if d.DefaultMaxAttempts < 1 {
		return fmt.Errorf("DEFAULT_MAX_ATTEMPTS %d must be at least 1", d.DefaultMaxAttempts)
	}
	sum := d.unlistedLanes()
	for t, n := range d.Limits {
		if n < 1 {
			return fmt.Errorf("type %s: limit %d must be at least 1", t, n)
		}
		if n >= MaxInFlight {
			return fmt.Errorf("type %s: limit %d is at or over the SQS FIFO in-flight quota of %d", t, n, MaxInFlight)
		}
		sum += n
	}
	if sum >= MaxInFlight {
		return fmt.Errorf("limits add up to %d lanes (%d of them DEFAULT_LIMIT %d x UNLISTED_TYPES_LIMIT %d), at or over the SQS FIFO in-flight quota of %d: SQS would silently stop serving lanes",
			sum, d.unlistedLanes(), d.FallbackLimit, d.Unlisted(), MaxInFlight)
	}
	return nil
}

// Store reads and writes live overrides.
type Store interface {
	ListOverrides(ctx context.Context) ([]Override, error)
}

// Resolver answers "what is the configuration of this type", merging defaults and live overrides.
// It is safe for concurrent use.
type Resolver struct {
	defaults Defaults
	store    Store
	maxAge   time.Duration
	now      func() time.Time

	mu        sync.Mutex
	loadedAt  time.Time
	overrides map[string]Override
	// failedAt and failed are the last failed read, answered again for failedFor rather than ask a
	// table that just refused (throttled, unreachable) once per job.
	failedAt time.Time
	failed   error
	// serveStale answers from the last good overrides when the table cannot be read (ServeStale).
	serveStale bool
}

// ServeStale makes the resolver answer from the last overrides it read, however old, when the
// table cannot be read: for a reader whose choices cap nothing, never for one that starts jobs.
func (r *Resolver) ServeStale() { r.serveStale = true }

// failedFor is how long a failed read of the overrides is answered from memory.
const failedFor = time.Second

// NewResolver returns a resolver that re-reads overrides once they are older than maxAge (at most
// MaxCacheAge; 0 reads them for every question). A nil store means defaults only.
func NewResolver(d Defaults, store Store, maxAge time.Duration) (*Resolver, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	if maxAge < 0 {
		return nil, fmt.Errorf("config cache age %s must not be negative", maxAge)
	}
	if maxAge > MaxCacheAge {
		maxAge = MaxCacheAge
	}
	return &Resolver{defaults: d, store: store, maxAge: maxAge, now: time.Now}, nil
}

// SetClock replaces the clock, for tests and simulations.
func (r *Resolver) SetClock(now func() time.Time) { r.now = now }

// Defaults returns the deployment defaults.
func (r *Resolver) Defaults() Defaults { return r.defaults }

// Listed says whether typ has a limit of its own: in the deployment's TYPE_LIMITS, or in a live
// override as last read (it reads nothing). Any other type runs on DEFAULT_LIMIT, or is refused.
func (r *Resolver) Listed(typ string) bool {
	if _, ok := r.defaults.Limits[typ]; ok {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overrides[typ].Limit > 0
}

func (r *Resolver) load(ctx context.Context) (map[string]Override, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.store == nil {
		return nil, nil
	}
	if r.overrides != nil && r.now().Sub(r.loadedAt) < r.maxAge {
		return r.overrides, nil
	}
	if r.failed != nil && r.now().Sub(r.failedAt) < failedFor {
		return nil, r.failed
	}
	m, err := r.read(ctx)
	switch {
	case errors.Is(err, errRefused) && r.overrides != nil:
		// A set of overrides no deployment could run is refused whole: the last good one stays in
		// force, and is asked again only after another cache period.
		r.loadedAt = r.now()
		return r.overrides, nil
	case err != nil && r.serveStale && r.overrides != nil:
		// A reader whose choices cap nothing (the router: a limit or pause it misses is enforced
		// by the starter on fresh config) keeps the last good overrides rather than fail its jobs
		// back to a queue that dead-letters them without a reason after 5 receives, and asks again
		// after another cache period.
		r.loadedAt = r.now()
		return r.overrides, nil
	case err != nil:
		// Never act on overrides older than the cache: a limit lowered while this container could
		// not read the table must hold from the next start, not when the table answers again. A
		// function that cannot read its config tries again shortly (the starter backs off; the
		// router's batch item fails), as it could not write its leases either.
		r.failed, r.failedAt = err, r.now()
		return nil, err
	}
	r.overrides, r.loadedAt, r.failed = m, r.now(), nil
	return m, nil
}

// lastGood returns the overrides last read, however old (nil: none read yet).
func (r *Resolver) lastGood() map[string]Override {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overrides
}

// errRefused marks a set of overrides read but refused as a whole.
var errRefused = errors.New("refused")

// read lists the valid overrides. It refuses the whole set rather than let SQS stop serving lanes
// without a word (checkQuota).
func (r *Resolver) read(ctx context.Context) (map[string]Override, error) {
	list, err := r.store.ListOverrides(ctx)
	if err != nil {
		return nil, fmt.Errorf("read live config: %w", err)
	}
	m := make(map[string]Override, len(list))
	for _, o := range list {
		if o.Validate() == nil { // an item no job could match, or a negative number, is ignored
			if o.Pool != "" {
				m[poolPrefix+o.Pool] = o // not a type: a type has no '#'
				continue
			}
			m[o.Type] = o
		}
	}
	if err := r.checkQuota(m); err != nil {
		return nil, fmt.Errorf("live config %w: %w", errRefused, err)
	}
	return m, nil
}

// checkQuota refuses overrides that would make the limits add up to the FIFO in-flight quota or more.
func (r *Resolver) checkQuota(ov map[string]Override) error {
	sum := r.defaults.unlistedLanes()
	seen := map[string]bool{}
	for t, n := range r.defaults.Limits {
		if o, ok := ov[t]; ok && o.Limit > 0 {
			n = o.Limit
		}
		sum += n
		seen[t] = true
	}
	for t, o := range ov {
		if !seen[t] && o.Pool == "" {
			sum += o.Limit
		}
	}
	if sum >= MaxInFlight {
		return fmt.Errorf("limits with live overrides add up to %d lanes, at or over the SQS FIFO in-flight quota of %d", sum, MaxInFlight)
	}
	return nil
}

// Get returns the effective configuration of a type, or an error wrapping ErrUnknownType.
func (r *Resolver) Get(ctx context.Context, typ string) (TypeConfig, error) {
	ov, err := r.load(ctx)
	if err != nil {
		return TypeConfig{}, err
	}
	return r.merge(typ, ov)
}

func (r *Resolver) merge(typ string, ov map[string]Override) (TypeConfig, error) {
	d := r.defaults
	c := TypeConfig{Type: typ, MaxAttempts: d.DefaultMaxAttempts, StateMachineArn: d.StateMachineArn}
	c.Strategy, _ = lane.ParseStrategy(d.Strategy) // checked by Validate
	c.Release, _ = ParseReleaseMode(d.Release)
	if m, ok := d.Releases[typ]; ok {
		c.Release, _ = ParseReleaseMode(m)
	}
	switch n, ok := d.Limits[typ]; {
	case ok:
		c.Limit, c.Source = n, "default"
	case d.FallbackLimit > 0:
		c.Limit, c.Source = d.FallbackLimit, SourceFallback
	}
	if n, ok := d.MaxAttempts[typ]; ok {
		c.MaxAttempts = n
	}
	c.KeyLimit = d.KeyLimits[typ]
	c.Rate = d.Rates[typ]
	c.Overflow = d.Overflows[typ] // "" queues; checked by Validate
	if o, ok := ov[typ]; ok {
		if o.Limit > 0 {
			c.Limit, c.Source = o.Limit, "override"
		}
		if o.MaxAttempts > 0 {
			c.MaxAttempts = o.MaxAttempts
		}
		if o.StateMachineArn != "" {
			c.StateMachineArn = o.StateMachineArn
		}
		if o.Strategy != "" {
			c.Strategy, _ = lane.ParseStrategy(o.Strategy) // checked by Validate
		}
		if o.Release != "" {
			c.Release, _ = ParseReleaseMode(o.Release) // checked by Validate
		}
		if o.Overflow != "" {
			c.Overflow = o.Overflow // checked by Validate
		}
		if o.KeyLimit > 0 {
			c.KeyLimit = o.KeyLimit
		}
		if len(o.KeyLimits) > 0 {
			c.KeyLimits = o.KeyLimits
		}
		c.KeyRate, c.KeyRates = o.KeyRate, o.KeyRates
		switch {
		case o.Rate.IsSet():
			c.Rate = o.Rate
		case o.NoRate:
			c.Rate = Rate{}
		}
		c.Pause = o.Pause
	}
	r.mergePools(&c, ov)
	if c.SeparatesKeys() || c.Pooled() {
		// A key's cap is counted, and its start tokens taken, by the one binder of the key's
		// waiting group: only first-free binds there (the random strategy sends jobs straight to
		// lanes, where a job waiting for its key's token would keep other keys' jobs out). A
		// pool's slots are taken by binds alike.
		c.Strategy = lane.FirstFree
	}
	if c.Limit == 0 {
		return TypeConfig{}, fmt.Errorf("type %s: %w", typ, ErrUnknownType)
	}
	return c, nil
}

// MaxAttempts returns a type's attempts per job, whether or not the type has a limit (a type may
// have lost its limit while its jobs still run). It fails only when the table cannot be read and
// this resolver never read it: the deployment's count alone could dead-letter a job early, its
// override having raised it.
func (r *Resolver) MaxAttempts(ctx context.Context, typ string) (int, error) {
	c, err := r.Get(ctx, typ)
	if err == nil {
		return c.MaxAttempts, nil
	}
	n := r.defaults.DefaultMaxAttempts
	if v, ok := r.defaults.MaxAttempts[typ]; ok {
		n = v
	}
	if errors.Is(err, ErrUnknownType) {
		// Read, and the type has no limit: its override, if any, was merged into nothing.
		if o, ok := r.lastGood()[typ]; ok && o.MaxAttempts > 0 {
			n = o.MaxAttempts
		}
		return n, nil
	}
	// The table cannot be read: the last overrides read count, however old (an attempt count
	// changes no cap, and a raised one must not dead-letter a job early).
	last := r.lastGood()
	if last == nil && r.store != nil && !errors.Is(err, errRefused) {
		// (A set refused whole was read, and refused: the deployment's count stands.)
		return 0, err
	}
	if o, ok := last[typ]; ok && o.MaxAttempts > 0 {
		n = o.MaxAttempts
	}
	return n, nil
}

// All returns the effective configuration of every type that has a default or an override, sorted.
func (r *Resolver) All(ctx context.Context) ([]TypeConfig, error) {
	ov, err := r.load(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for t := range r.defaults.Limits {
		seen[t] = true
	}
	for t, o := range ov {
		if o.Pool == "" {
			seen[t] = true
		}
	}
	var out []TypeConfig
	for t := range seen {
		if c, err := r.merge(t, ov); err == nil {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// Fresh returns the effective configuration of a type read past the cache (the cache is refreshed
// with it).
// A starter about to park a paused type's jobs for long asks it, so a resume a moment ago counts.
func (r *Resolver) Fresh(ctx context.Context, typ string) (TypeConfig, error) {
	r.mu.Lock()
	r.loadedAt = time.Time{}
	r.mu.Unlock()
	return r.Get(ctx, typ)
}
