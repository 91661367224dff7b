package simworld

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
)

// The invariants of the operator's actions (operator.go), from the services' state and what the
// operator wrote:
//
//   - a key's running executions stay within the cap in force for that key (its own, else the
//     type's key limit, never above the type's limit), a changed cap allowed the config cache's age;
//   - a paused type starts no execution once its pause is older than the config cache's age;
//   - a redriven job is a new generation, which ends exactly once again: every generation a
//     redrive sends ends, and none ends twice; a redrive never sends a generation that ended
//     already (its names and deduplication ids are taken, issue 10's defect fixed by 2a8302f);
//   - a job whose execution was stopped (ABORTED) ends dead-lettered, with a reason, once.
//
// While a type is paused or has a start rate (and for the cache's age after), work conservation
// does not apply to it: both hold jobs back by design.

// Invariant kinds of the operator's actions.
const (
	KindPausedStart   = "started while paused"
	KindRedriveReused = "redrive reused a generation"
	KindStopNotDead   = "stopped job not dead-lettered"
)

// cacheAllowance is how long after a change a function may still act on the configuration it read
// before (CONFIG_CACHE_SECONDS, 10 s, and a second of margin): the bound the limit check uses.
const cacheAllowance = 10*time.Second + time.Second

// flow is what a type's live override says besides its limit and key limit.
type flow struct {
	keyCaps map[string]int // keys with their own cap
	paused  bool
	rated   bool // the type's starts, or its keys', have a rate
	// keyRate is every key's start rate, keyRates those of keys with their own.
	keyRate  config.Rate
	keyRates map[string]config.Rate
}

// capOf is the cap of key's running executions in l (0: none): the key's own, else the type's key
// limit, never above the type's limit (config.TypeConfig.KeyCap, restated).
func (l limitAt) capOf(key string) int {
	if n := l.keyCaps[key]; n > 0 {
		return min(n, l.limit)
	}
	if l.keyCap > 0 {
		return min(l.keyCap, l.limit)
	}
	return 0
}

// opChecks is the checker's state for redrives and stopped executions.
type opChecks struct {
	// gen is each job's generation now expected to end (0 until a redrive sends another).
	gen map[string]int
	// ended is how each generation of a job ended, by genKey.
	ended map[string]string
	// redrove holds the bodies redriven, so that a copy of a dead letter redriven again is known.
	redrove map[string]bool
	// stopped holds the generations whose execution an operator stopped, with its name.
	stopped map[string]string
	// keyStarts holds when each execution of a type's key started, by type and key.
	keyStarts map[[2]string][]time.Time
	// claimed is when a lease first claimed each execution (status starting, with the execution's
	// ARN written before StartExecution is called), from the table's writes.
	claimed map[string]time.Time
	// submitted is when each generation (genKey) was sent to the general queue: by the workload,
	// or by a redrive.
	submitted map[string]time.Time
	// cancelled holds the generations a newer job of their key stopped while their work ran (the
	// overflow rule cancel, cancel.go), with the execution's name; cancelledBy the newer job's
	// generation; lateCancels those stopped after their work ended.
	cancelled, cancelledBy, lateCancels map[string]string
	// provisional holds the late cancels of a failed work, ended cancelled until their job goes on.
	provisional map[string]bool
}

func newOpChecks() opChecks {
	return opChecks{gen: map[string]int{}, ended: map[string]string{}, redrove: map[string]bool{}, stopped: map[string]string{},
		claimed: map[string]time.Time{}, keyStarts: map[[2]string][]time.Time{}, submitted: map[string]time.Time{},
		cancelled: map[string]string{}, cancelledBy: map[string]string{}, lateCancels: map[string]string{}, provisional: map[string]bool{}}
}

func genKey(job string, gen int) string { return fmt.Sprintf("%s~g%d", job, gen) }

// genText names a generation in a message ("" for the first).
func genText(gen int) string {
	if gen == 0 {
		return ""
	}
	return fmt.Sprintf("generation %d: ", gen)
}

// bodyGeneration is the "redrive" field of a job's body (0 when absent or unreadable).
func bodyGeneration(body string) int {
	var b struct {
		Redrive int `json:"redrive"`
	}
	_ = json.Unmarshal([]byte(body), &b)
	return b.Redrive
}

// letterGeneration is the generation a dead letter ends. Its body carries the next one when the
// starter or the releaser sent it, and the one received when the router refused it (docs/design.md,
// Redrive).
func letterGeneration(m *msg) int {
	g := bodyGeneration(m.body)
	if attr(m, deadletter.AttrSource) == "router" {
		return g
	}
	return max(g-1, 0)
}

// configChanged reads typ's live override back from the table after an operator's command and
// records the limits, caps, pause and rate it puts in force from now.
func (c *checker) configChanged(typ string) {
	ovs, err := config.NewDynamoStore(c.w.table, "sim").ListOverrides(context.Background())
	if err != nil {
		panic(fmt.Sprintf("simworld: read overrides: %v", err))
	}
	o := config.Override{Type: typ} // none: the deployment's defaults
	for _, x := range ovs {
		if x.Type == typ {
			o = x
		}
	}
	base := c.history[typ][0] // the deployment's
	l := limitAt{from: c.w.now(), limit: base.limit, keyCap: base.keyCap}
	if o.Limit > 0 {
		l.limit = o.Limit
	}
	if o.KeyLimit > 0 {
		l.keyCap = o.KeyLimit
	}
	if l.keyCap > 0 {
		l.keyCap = min(l.keyCap, l.limit)
	}
	l.keyCaps = maps.Clone(o.KeyLimits)
	l.keyRate, l.keyRates = o.KeyRate, maps.Clone(o.KeyRates)
	l.paused, l.rated = o.Pause != nil, o.Rate.IsSet() || o.KeyRate.IsSet() || len(o.KeyRates) > 0
	c.overrides[typ] = o
	c.history[typ] = append(c.history[typ], l)
	c.poolsChanged()
}

// pausedSince is when typ's pause in force began (false: not paused).
func (c *checker) pausedSince(typ string) (time.Time, bool) {
	h := c.history[typ]
	i := len(h) - 1
	if !h[i].paused {
		return time.Time{}, false
	}
	for i > 0 && h[i-1].paused {
		i--
	}
	return h[i].from, true
}

// put sees every item a handler's PutItem wrote: a lease claiming an execution (status starting)
// records when that execution was first claimed. That is when the starter made the claim, by its
// own clock (the item's updatedAt, within a second of the world's), not when the write landed: a
// slow call may land it seconds later, after a decision taken on a configuration still in its cache.
func (c *checker) put(item map[string]ddbtypes.AttributeValue) {
	c.leaseWritten(item)
	c.fateWritten(item)
	status, _ := item["status"].(*ddbtypes.AttributeValueMemberS)
	arn, _ := item["executionArn"].(*ddbtypes.AttributeValueMemberS)
	if status == nil || arn == nil || status.Value != string(lease.Starting) {
		return
	}
	if _, ok := c.ops.claimed[arn.Value]; !ok {
		at := c.w.now()
		if u, ok := item["updatedAt"].(*ddbtypes.AttributeValueMemberS); ok {
			if made, err := time.Parse(time.RFC3339Nano, u.Value); err == nil && made.Before(at) {
				at = made
			}
		}
		c.ops.claimed[arn.Value] = at
	}
}

// checkPaused: no execution of a paused type starts once the pause is older than the cache, but
// one claimed before then (the starter lets a claim go on when the type is paused: it may be a
// running job's, or the same attempt again).
func (c *checker) checkPaused(e *execution) {
	since, ok := c.pausedSince(e.meta.Type)
	if !ok {
		return
	}
	visible := since.Add(cacheAllowance)
	if at, ok := c.ops.claimed[e.arn]; ok && !at.After(visible) {
		c.w.trace(e.meta.Type+"-"+e.meta.ID, "%s starts while its type is paused, claimed before the pause was visible", e.name)
		return
	}
	if d := c.w.now().Sub(since); d > cacheAllowance {
		c.violate(KindPausedStart, e.meta.Type+"-"+e.meta.ID, "%s started %s after type %s was paused (allowed: %s, or a claim made before)", e.name, d.Truncate(time.Millisecond), e.meta.Type, cacheAllowance)
	}
}

// flowHeld says whether typ is paused or rated now, or was within the cache's age.
func (c *checker) flowHeld(typ string) bool {
	h := c.history[typ]
	from := c.w.now().Add(-cacheAllowance)
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].paused || h[i].rated {
			return true
		}
		if h[i].from.Before(from) {
			return false
		}
	}
	return false
}

// holdIdle restarts work conservation's idle clocks of typ and its lanes (a random type's).
func (c *checker) holdIdle(typ string, limit int) {
	c.idleSince[typ] = time.Time{}
	for l := 1; l <= limit; l++ {
		c.idleSince[fmt.Sprintf("%s-%d", typ, l)] = time.Time{}
	}
}

// redriven records a dead letter sent back to the general queue: its job is open again, as the
// generation its body carries. A generation that ended already is a violation unless the router
// refused it (it never reached a lane); the same body redriven again (a copy of a dead letter, at
// least once) reopens nothing. sender is the dead letter's job's sender and source the function
// that sent the dead letter.
func (c *checker) redriven(typ, sender, id, body, source string) {
	k := jobKeyOf(typ, sender, keyOfBody(body), id)
	if c.ops.redrove[k+"\x00"+body] { // two senders' jobs may have one body
		c.w.trace(k, "a copy of a dead letter redriven already")
		return
	}
	c.ops.redrove[k+"\x00"+body] = true
	g := bodyGeneration(body)
	gk := genKey(k, g)
	if how, ok := c.ops.ended[gk]; ok && source != "router" {
		c.violate(KindRedriveReused, k, "redriven as generation %d, which ended already (%s)", g, how)
	}
	delete(c.ops.ended, gk)
	c.ops.submitted[gk] = c.w.now()
	c.ops.gen[k] = g
	delete(c.ended, k)
	c.settleFrom = time.Time{}
	c.w.trace(k, "redriven as generation %d", g)
}

// stopped records an execution an operator stopped.
func (c *checker) stopped(e *execution) {
	c.ops.stopped[genKey(e.jk, e.meta.Redrive)] = e.name
}

// checkStopped: every generation whose execution was stopped ended dead-lettered.
func (c *checker) checkStopped() {
	keys := make([]string, 0, len(c.ops.stopped))
	for k := range c.ops.stopped {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, gk := range keys {
		how := c.ops.ended[gk]
		if !strings.HasPrefix(how, "dead-lettered (") || how == "dead-lettered ()" {
			job := gk[:strings.LastIndex(gk, "~g")]
			c.violate(KindStopNotDead, job, "%s was stopped (ABORTED); its generation ended %q, want dead-lettered with a reason", c.ops.stopped[gk], how)
		}
	}
}

// KindKeyRate: a key started more executions than its start rate allows.
const KindKeyRate = "key rate exceeded"

// checkKeyRates checks each key's starts against its start rate while one was in force: over a
// span of the type's history in which a key's rate was (r, burst), counted from the cache's age
// after the span began, at most burst + r x the span's length, and the type's limit more. A job
// bound with its key's token starts a little later, and jobs bound (each holding a lane) before the
// rate was seen may start inside the span.
func (c *checker) checkKeyRates() {
	end := c.w.now()
	for typ, h := range c.history {
		for i, l := range h {
			to := end
			if i+1 < len(h) {
				to = h[i+1].from
			}
			from := l.from.Add(cacheAllowance)
			if !to.After(from) {
				continue
			}
			for k, starts := range c.ops.keyStarts {
				if k[0] != typ {
					continue
				}
				r := l.keyRate
				if own, ok := l.keyRates[k[1]]; ok {
					r = own
				}
				if !r.IsSet() {
					continue
				}
				n := 0
				for _, at := range starts {
					if !at.Before(from) && at.Before(to) {
						n++
					}
				}
				allowed := float64(r.Burst) + r.PerSecond*to.Sub(l.from).Seconds() + float64(l.limit) + 1
				if float64(n) > allowed {
					c.violate(KindKeyRate, typ+"#"+k[1], "%d starts of key %q of %s in %s under rate %s, at most %.0f allowed",
						n, k[1], typ, to.Sub(from).Truncate(time.Second), r.String(), allowed)
				}
			}
		}
	}
}
