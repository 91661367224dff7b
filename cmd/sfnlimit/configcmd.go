package main

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

func newConfig() *cobra.Command {
	var tgt target
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and change the live per-type configuration",
		Long: `config shows each type's effective configuration (the deployment defaults, from the template
parameters, merged with live overrides stored in the table) and changes the overrides. A change is
checked with the limiter's own rules first (the type's name, every limit at least 1, and all limits
together under the SQS FIFO in-flight quota of 120,000), and the functions pick it up within
ConfigCacheSeconds.
` + targetHelp,
		Example: `  sfnlimit config get
  sfnlimit config set payments --limit 20
  sfnlimit config set reports --strategy random
  sfnlimit config set llm --release events
  sfnlimit config set llm --key-limit 5
  sfnlimit config set llm --key acme --limit 20
  sfnlimit config set partner --rate 5 --burst 10
  sfnlimit config set llm --key-rate 2 --key noisy --rate 0.1
  sfnlimit config set classify --pools llm_api+pay --share 3
  sfnlimit config pool set llm_api --cap 40
  sfnlimit config reset payments`,
		Args: commandArgs,
		RunE: showHelp,
	}
	registerTarget(cmd, &tgt)
	cmd.AddCommand(newConfigGet(&tgt), newConfigSet(&tgt), newConfigReset(&tgt), newConfigPool(&tgt))
	return cmd
}

// editor opens the target and builds a config editor on it.
func (t *target) editor(ctx context.Context) (*session, ops.ConfigEditor, error) {
	s, err := t.session(ctx)
	if err != nil {
		return nil, ops.ConfigEditor{}, err
	}
	d, age, err := s.t.Defaults(ctx)
	if err != nil {
		return nil, ops.ConfigEditor{}, s.explain(err)
	}
	table, err := s.t.Output(ctx, resources.TableName)
	if err != nil {
		return nil, ops.ConfigEditor{}, s.explain(err)
	}
	return s, ops.ConfigEditor{Store: config.NewDynamoStore(s.ddb, table), Defaults: d, CacheAge: age, SFN: s.sfn}, nil
}

func newConfigGet(tgt *target) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get [TYPE]",
		Short: "Show the effective configuration of every type, or of one",
		Long: `get shows, per type, the limit and its source (default: TypeLimits; fallback: DefaultLimit;
override: a live config item), the attempts per job, the state machine, the lane strategy and its
source (default: the LaneStrategy parameter; override: the live item), the release mode and its
source (override: the live item; TypeReleaseModes: the type's entry there; ReleaseMode: the
deployment's), the key limit, the cap of every concurrency key of the type, and its source
(override: the live item; TypeKeyLimits: the type's entry there; none: keys are not capped), and
the keys with their own cap (all of them up to 10, else how many and the first 10; --json lists
all). Once some type has a start rate, a RATE column: starts per second and burst, and the source
(override: the live item, where "none (override)" removes the type's TypeRates entry; TypeRates:
the parameter). Once some type is paused, a PAUSED column: how long; and below the table, each
paused type since when and why. Once some type rates its keys, a KEY RATE column: every key's
start rate and how many keys have their own; below the table, the keys with their own rate (as
for caps). A type with key caps runs first-free whatever its strategy: a configured random shows as
first-free (key caps); so does one with key rates: first-free (key rates). And the stored override. A
type configured with the retired least-loaded strategy (by its live item or by LaneStrategy) is
shown as first-free, which it runs as, and marked with a note that says so. Once a pool exists or
a type is in one, POOLS and SHARE columns: the type's pools ("llm_api+pay") and their source
(override: the live item, where "none (override)" removes the type's TypePools entry; TypePools:
the parameter), and its share in them; below the table, each pool with its cap, the cap's source
(deployment: the Pools parameter; live: config pool set; none: no cap, the pool caps nothing) and
its member types. A pooled type runs first-free whatever its strategy: first-free (pools). Once a
type's overflow rule is not queue, an OVERFLOW column: the rule and its source (override: the live
item; TypeOverflow: the parameter; default: queue); a rule that cannot act (cancel or skip without a
key cap) is marked "!" and explained below the table.
` + targetHelp,
		Example: `  sfnlimit config get
  sfnlimit config get payments --json`,
		Args:              usageArgs(cobra.MaximumNArgs(1)),
		ValidArgsFunction: completeTypeArg(tgt),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, e, err := tgt.editor(ctx)
			if err != nil {
				return err
			}
			typ := ""
			if len(args) == 1 {
				typ = args[0]
				if err := ops.ValidateTypeArg(typ); err != nil {
					return err
				}
			}
			v, err := e.Get(ctx, typ)
			if err != nil {
				return s.explain(err)
			}
			return print(cmd.OutOrStdout(), asJSON, v, v.WriteTable)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newConfigSet(tgt *target) *cobra.Command {
	var (
		limit, attempts, keyLimit, burst, share int
		machine, strategy, release, key, rate   string
		keyRate, pools, overflow                string
		asJSON, newType, noPools                bool
	)
	cmd := &cobra.Command{
		Use:   "set TYPE [--limit N] [--max-attempts K] [--state-machine ARN] [--strategy NAME] [--release MODE] [--key-limit N] [--key-rate R[:B]] [--key K [--limit N] [--rate R[:B]]] [--rate R [--burst B]] [--pools P[+P] | --no-pools] [--share N] [--overflow RULE]",
		Short: "Set a type's live limit, attempts, state machine, lane strategy, release mode, key caps, start rate, key rates, pools or overflow rule",
		Long: `set writes a type's live override. Only the fields given change; the others keep their stored
value (config reset drops the whole override). A type the stack does not know (no limit or other
setting in its parameters, no live override) is refused as a likely typo, with the closest known
type suggested; --new-type adds it (give it --limit). A change that leaves the live override as it
is writes nothing and says so. --max-attempts is 1-999, as in TypeMaxAttempts. The new set of overrides is checked as the functions check it, and refused as a
whole if the limits would add up to the SQS FIFO in-flight quota or more. A state machine is
checked to exist; the starter starts only the stack's own and those in the ExtraStateMachineArns
parameter, and set says when it is not listed (sfnlimit attach checks all of it before it writes).
--strategy is how the type's new jobs get a lane: ` + strings.Join(lane.Strategies, " or ") + `
(jobs already routed stay in their lanes). least-loaded is retired and refused (nothing is
written); types still configured with it run as first-free. --release is how its lanes are
released: step (the workflow's Release state calls the releaser) or events (the execution's own
status-change event does, so the workflow needs no Release state). events is refused, and nothing
written, when the type's state machine (its own or the deployment's) is Express, which sends no
status events, or cannot be described (states:DescribeStateMachine).
--key-limit caps the running jobs of every concurrency key of the type (a job's "key", such as a
tenant; jobs without one share the default key, capped the same); --key-limit 0 removes the live
key limit (the type's TypeKeyLimits entry, if any, applies again). --key K --limit N gives key K a
cap of its own, above or below the key limit (a premium tenant); with --key, --limit is the key's
cap, not the type's, and --limit 0 removes the key's own cap. A key is 1-64 characters of
A-Z a-z 0-9 _ - . : as in jobs; a type holds at most ` + strconv.Itoa(config.MaxKeyOverrides) + ` keys with their own cap. A key's cap can
never raise the type's total: a cap above the type's limit is refused, and nothing written. A type
with key caps runs first-free even if its strategy is random (a key's cap is counted where its jobs
wait for a free lane); set says so.
--rate R caps the type's starts at R a second (like 5, or 0.5 for one every two seconds; up to 3
decimals, at most 10000), beside its concurrency limit, for an API that limits requests per second;
--burst B lets up to B start at once after a quiet spell (default: a second's worth, at least 1).
Starts over the rate wait in the queue: no attempt is used and nothing fails. The rate holds across
all starters (a token bucket in the table). --burst alone changes the burst of the rate in force.
--rate 0 removes the type's rate, also one its TypeRates entry gives (the live item then says
noRate; config reset, or --rate again, brings a rate back).
--key-rate R[:B] caps the starts of every concurrency key of the type at R a second, bursts of B
(default as --burst's), so that a noisy tenant's burst does not use up its type's start rate;
--key-rate 0 removes it. --key K --rate R[:B] (or --rate R --burst B) gives key K a rate of its
own, above or below --key-rate; with --key, --rate and --burst are the key's, not the type's, and
--key K --rate 0 removes it (K follows --key-rate again). --key K may set --limit and --rate at
once. A type holds at most ` + strconv.Itoa(config.MaxKeyOverrides) + ` keys with their own rate. Key rates are live
settings only (no parameter gives them). A key waiting for its start token holds no lane: it waits
in its key's waiting group, so a type with key rates runs first-free, as with key caps.
--pools P or P+Q puts the type in shared pools (at most ` + strconv.Itoa(config.MaxPoolsPerType) + `, names as a type's): its jobs start only
when the type, the key and each pool have room. Each pool needs a cap in force (the Pools
parameter, or sfnlimit config pool set P --cap N); a pool without one is refused, and nothing
written. --no-pools takes the type out of every pool, also those its TypePools entry gives (the
live item then says noPools; config reset, or --pools again, puts it back). --share N (1-` + strconv.Itoa(config.MaxShare) + `) is the
type's share of its pools when member types contend; --share 0 removes the live share (its
PoolShares entry, or 1, applies again). A pooled type runs first-free, as with key caps.
--overflow is what a job does when its key is at its cap: queue (wait its turn, the default),
cancel (stop the oldest running job of its key from the same sender, submitted before it; that job
ends cancelled, not retried, not dead-lettered, and this one takes its lane) or skip (when a job of
its key from the same sender, submitted before it, holds a lane, end at once skipped: it never
runs, uses no attempt, and is not dead-lettered; at its cap with only other senders' jobs, it
waits). cancel and skip need a key cap (--key-limit, or keys with their own cap): without one
they are refused, and nothing written; so is taking away the key cap such a rule needs. --overflow "" removes the live rule (the type's
TypeOverflow entry, or queue, applies again).
Says when the change applies: within ConfigCacheSeconds, as the stack runs with it. Shows the
effective configuration after.
` + targetHelp,
		Example: `  sfnlimit config set payments --limit 20
  sfnlimit config set thumbs --limit 5 --new-type       # a type the stack does not know yet
  sfnlimit config set llm --limit 10 --max-attempts 5
  sfnlimit config set reports --strategy random
  sfnlimit config set llm --release events
  sfnlimit config set llm --key-limit 5                 # at most 5 running jobs of any one key
  sfnlimit config set llm --key acme --limit 20         # acme's own cap
  sfnlimit config set llm --key acme --limit 0          # acme follows the key limit again
  sfnlimit config set llm --key-limit 0                 # no live key limit
  sfnlimit config set partner --rate 5                  # at most 5 starts a second, bursts of 5
  sfnlimit config set partner --rate 0.5 --burst 2      # one start every 2 s, 2 at once after a pause
  sfnlimit config set partner --burst 20                # the same rate, bursts of 20
  sfnlimit config set partner --rate 0                  # no start rate (also none from TypeRates)
  sfnlimit config set llm --key-rate 2:4                # each key at most 2 starts a second, bursts of 4
  sfnlimit config set llm --key noisy --rate 0.1        # noisy's own rate: one start every 10 s
  sfnlimit config set llm --key acme --rate 5 --burst 10 # acme's own rate
  sfnlimit config set llm --key noisy --rate 0          # noisy follows --key-rate again
  sfnlimit config set llm --key-rate 0                  # no rate for every key
  sfnlimit config set classify --pools llm_api+pay      # in pools llm_api and pay
  sfnlimit config set summarize --share 3               # 3 shares of its pools when they are contended
  sfnlimit config set reports --no-pools                # in no pool, whatever TypePools says
  sfnlimit config set reindex --key-limit 1 --overflow cancel # a newer job of a key stops its running one
  sfnlimit config set sync --key-limit 1 --overflow skip # a job behind its sender's running one ends skipped
  sfnlimit config set reindex --overflow ""             # the TypeOverflow entry, or queue, again
  sfnlimit config set reports --state-machine arn:aws:states:us-east-1:123456789012:stateMachine:reports`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeTypeArg(tgt),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := ops.Change{Type: args[0], NewType: newType}
			switch {
			case cmd.Flags().Changed("key"):
				// With --key, --limit is the key's own cap (set TYPE --key K --limit N) and --rate
				// and --burst its own start rate (--key K --rate R[:B], --rate R --burst B).
				c.Key = &key
				if cmd.Flags().Changed("limit") {
					c.KeyCap = &limit
				}
				if cmd.Flags().Changed("rate") {
					c.KeyOwnRate = &rate
				}
				if cmd.Flags().Changed("burst") {
					c.KeyOwnBurst = &burst
				}
			default:
				if cmd.Flags().Changed("limit") {
					c.Limit = &limit
				}
				if cmd.Flags().Changed("rate") {
					c.Rate = &rate
				}
				if cmd.Flags().Changed("burst") {
					c.Burst = &burst
				}
			}
			if cmd.Flags().Changed("key-rate") {
				c.KeyRate = &keyRate
			}
			if cmd.Flags().Changed("key-limit") {
				c.KeyLimit = &keyLimit
			}
			if cmd.Flags().Changed("max-attempts") {
				c.MaxAttempts = &attempts
			}
			if cmd.Flags().Changed("state-machine") {
				c.StateMachineArn = &machine
			}
			if cmd.Flags().Changed("strategy") {
				c.Strategy = &strategy
			}
			if cmd.Flags().Changed("release") {
				c.Release = &release
			}
			if cmd.Flags().Changed("pools") {
				c.Pools = &pools
			}
			c.NoPools = noPools
			if cmd.Flags().Changed("share") {
				c.Share = &share
			}
			if cmd.Flags().Changed("overflow") {
				c.Overflow = &overflow
			}
			if err := c.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, e, err := tgt.editor(ctx)
			if err != nil {
				return err
			}
			if c.StateMachineArn != nil {
				e.Stack = s.stackAccess(ctx, tgt)
			}
			res, err := e.Set(ctx, c)
			if err != nil {
				return s.explain(err)
			}
			return print(cmd.OutOrStdout(), asJSON, res, res.WriteTable)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "lanes: executions of the type at once; with --key, the key's own cap (0 removes it)")
	cmd.Flags().IntVar(&attempts, "max-attempts", 0, "executions per job before it is dead-lettered (1-999)")
	cmd.Flags().StringVar(&machine, "state-machine", "", "ARN of the state machine the type's jobs run")
	cmd.Flags().StringVar(&strategy, "strategy", "", "how the type's jobs get a lane: "+strings.Join(lane.Strategies, " or "))
	_ = cmd.RegisterFlagCompletionFunc("strategy", completeStrategies)
	cmd.Flags().StringVar(&release, "release", "", "how the type's lanes are released: "+strings.Join(config.ReleaseModes, " or "))
	_ = cmd.RegisterFlagCompletionFunc("release", completeReleaseModes)
	cmd.Flags().IntVar(&keyLimit, "key-limit", 0, "running jobs of any one concurrency key at once (0 removes the live key limit)")
	cmd.Flags().StringVar(&key, "key", "", "a concurrency key whose own cap --limit sets, and whose own start rate --rate sets")
	cmd.Flags().StringVar(&rate, "rate", "", "starts per second at most, like 5 or 0.5, or R:B with the burst; with --key, the key's own (0 removes the rate)")
	cmd.Flags().IntVar(&burst, "burst", 0, "starts at once after a quiet spell (default with --rate: a second's worth, at least 1); with --key, of the key's own rate")
	cmd.Flags().StringVar(&keyRate, "key-rate", "", "starts per second at most of any one concurrency key, R or R:B (0 removes it)")
	cmd.Flags().StringVar(&pools, "pools", "", "shared pools the type's jobs count against, P or P+Q (each needs a cap)")
	cmd.Flags().BoolVar(&noPools, "no-pools", false, "take the type out of every pool, also those TypePools gives")
	cmd.Flags().IntVar(&share, "share", 0, "the type's share of its pools when member types contend, 1-"+strconv.Itoa(config.MaxShare)+" (0 removes the live share)")
	cmd.Flags().StringVar(&overflow, "overflow", "", "what a job does when its key is at its cap: "+strings.Join(config.OverflowRules, " or ")+" (cancel and skip need a key cap; \"\" removes the live rule)")
	_ = cmd.RegisterFlagCompletionFunc("overflow", cobra.FixedCompletions(config.OverflowRules, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().BoolVar(&newType, "new-type", false, "TYPE is new to the stack: add it (without this flag, a type that neither the stack's parameters nor a live override name is refused as a likely typo)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newConfigReset(tgt *target) *cobra.Command {
	var asJSON, force bool
	cmd := &cobra.Command{
		Use:   "reset TYPE",
		Short: "Remove a type's live override, so its defaults apply again",
		Long: `reset deletes a type's live override. Its defaults apply again within ConfigCacheSeconds; a type
with no default limit is then refused (unknown_type), unless DefaultLimit gives it one: the router
refuses its new jobs and the starter dead-letters every job of it still queued. Such a reset (a
type that exists only as its override) says what it can count of the jobs waiting (the leases, and
the queues' approximate depths of every type: SQS cannot count one type's messages) and is done
only with --force. So is the reset of a paused type: the pause is part of its live override, so the
reset would resume it; resume says that better, and --force resets it anyway. A refusal writes
nothing and exits 2.
` + targetHelp,
		Example: `  sfnlimit config reset payments
  sfnlimit config reset llm --force     # llm has no default limit: its queued jobs are dead-lettered
  sfnlimit config reset partner --force # partner is paused: the reset resumes it`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeTypeArg(tgt),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ops.ValidateTypeArg(args[0]); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, e, err := tgt.editor(ctx)
			if err != nil {
				return err
			}
			if reader, err := s.statusReader(ctx); err == nil {
				e.Status = reader
			} else {
				e.Status = unreadable{err}
			}
			res, err := e.Reset(ctx, args[0], force)
			if err != nil {
				return s.explain(err)
			}
			return print(cmd.OutOrStdout(), asJSON, res, res.WriteTable)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&force, "force", false, "reset a paused type (it resumes), or a type that exists only as an override (its queued jobs are dead-lettered: unknown_type)")
	return cmd
}

// print writes v as indented JSON, or with its table writer.
// printDone prints what a command did (done: it did something) and then its error, explained: a
// change written whose follow-up failed (a wake-up) is shown before the command exits 1.
func (s *session) printDone(w io.Writer, asJSON bool, done bool, v any, table func(io.Writer) error, err error) error {
	if err != nil && !done {
		return s.explain(err) // nothing done
	}
	if perr := print(w, asJSON, v, table); perr != nil {
		return perr
	}
	if err != nil {
		return s.explain(err)
	}
	return nil
}

func print(w io.Writer, asJSON bool, v any, table func(io.Writer) error) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return table(w)
}

// strategyHelp describes each lane strategy for completion.
var strategyHelp = map[string]string{
	lane.FirstFree: "waits until a lane is free, then is bound to it",
	lane.Random:    "a lane from a hash of the job, no state kept",
}

// completeStrategies completes --strategy with the strategy names (lane.Strategies).
func completeStrategies(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, s := range lane.Strategies {
		if strings.HasPrefix(s, prefix) {
			if d := strategyHelp[s]; d != "" {
				out = append(out, cobra.CompletionWithDesc(s, d))
			} else {
				out = append(out, s)
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// releaseHelp describes each release mode for completion.
var releaseHelp = map[string]string{
	config.ReleaseStep:   "the workflow's Release state calls the releaser",
	config.ReleaseEvents: "the execution's status-change event releases, no Release state needed",
}

// completeReleaseModes completes --release with the release modes (config.ReleaseModes).
func completeReleaseModes(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, m := range config.ReleaseModes {
		if strings.HasPrefix(m, prefix) {
			out = append(out, cobra.CompletionWithDesc(m, releaseHelp[m]))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeTypeArg completes a TYPE argument with the limiter's types.
func completeTypeArg(tgt *target) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeTypes(tgt)(cmd, args, "")
	}
}

// completeTypes completes a type with those the limiter has a limit for.
func completeTypes(tgt *target) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
		defer cancel()
		s, err := tgt.session(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		r, _, _, err := s.resolver(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		all, err := r.All(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, c := range all {
			out = append(out, c.Type)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// unreadable is a status that cannot be read, and why.
type unreadable struct{ err error }

func (u unreadable) Read(context.Context) (ops.Status, error) { return ops.Status{}, u.err }
