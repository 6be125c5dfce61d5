// Package diagnosis answers "why is this queue growing?" from the queue's
// recent history: the window ending now is split into two halves, "then"
// and "now", each is measured from the events by the store
// ([store.Store.QueueMeasure]: diagnose.sql), the queue's present state is
// read from the projection, and heuristics here compare the halves and
// rank the likely causes. The causes are found once, here, whichever store
// measured them. The statements and the thresholds are described in
// docs/internals/queues.md ("Queue diagnosis").
//
// It imports engine/store only.
package diagnosis

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cairnflow/cairn/engine/store"
)

// The heuristics' thresholds. They are deliberately coarse: a diagnosis
// points at where to look, and the evidence quotes the numbers.
const (
	// minGrowth: the queue is growing when inflow passes outflow in the
	// second half by this many tasks and by a tenth of the inflow (tasks
	// in flight make the two differ by a few in a steady queue).
	minGrowth = 3
	// A due task that has waited a quarter of the window (half of a half)
	// means the queue is not being drained.
	stalledWaitOfWindow = 0.25
	// minAttemptsForShares: fewer attempts in a half than this say
	// nothing about shares.
	minAttemptsForShares = 5
	// poisonRetryShare: this share of retries among the attempts started
	// in the second half is more than bad luck.
	poisonRetryShare = 0.3
	// An attempt or step is slower when its median is slowerFactor times
	// what it was, by at least minSlowdown, over minDurationSamples each.
	slowerFactor       = 2.0
	minSlowdown        = 10 * time.Millisecond
	minDurationSamples = 3
	// An inflow spike: at least minSpikeInflow tasks in the second half,
	// spikeFactor times the first half's, while outflow kept at least
	// steadyOutflow of its pace.
	minSpikeInflow = 10
	spikeFactor    = 2.0
	steadyOutflow  = 0.7
	// hot: one key or type holds more than hotShare of at least
	// minHotWaiting waiting tasks.
	hotShare      = 0.5
	minHotWaiting = 10
	// rateBound: a type starting at this share of its rate limit is held
	// by it.
	rateBound = 0.8
	// quietAfter: due tasks that have waited this long while nothing runs
	// and no attempt has started means no worker is claiming: a worker
	// claims at once when notified, and polls every second by default.
	quietAfter = 3 * time.Second
)

// pace is the derived facts every heuristic consults.
type pace struct {
	half      time.Duration
	growth    int  // inflow minus outflow in the second half
	growing   bool // growth is more than tasks in flight explain
	stalled   bool // a due task has waited a quarter of the window
	backingUp bool // due tasks wait, and the queue grows or stalls
}

// topError returns the most common failure of taskType (errors come most
// common first).
func topError(errs []store.ErrorStats, taskType string) (store.ErrorStats, bool) {
	for _, e := range errs {
		if e.Type == taskType {
			return e, true
		}
	}
	return store.ErrorStats{}, false
}

// slowdown is one type's or step's median duration in both halves.
type slowdown struct {
	what      string
	then, now store.DurationStats
}

func (s slowdown) factor() float64 { return float64(s.now.P50) / float64(s.then.P50) }

func (s slowdown) significant() bool {
	return s.then.Count >= minDurationSamples && s.now.Count >= minDurationSamples && s.then.P50 > 0 &&
		s.factor() >= slowerFactor && (s.now.P50-s.then.P50).Duration() >= minSlowdown
}

func (s slowdown) String() string {
	return fmt.Sprintf("%s: median %s then, %s now (%.1f×; p95 %s → %s; %d and %d samples)",
		s.what, s.then.P50, s.now.P50, s.factor(), s.then.P95, s.now.P95, s.then.Count, s.now.Count)
}

// missing returns the names in was that are not in now.
func missing(was, now []string) []string {
	var out []string
	for _, w := range was {
		if !slices.Contains(now, w) {
			out = append(out, w)
		}
	}
	return out
}

func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

func roundDuration(d time.Duration) string { return store.MillisOf(d).String() }

// Diagnose measures the queue over p.Window ending now (the store's
// [store.Store.QueueMeasure]) and ranks the likely causes of its growth
// (see [store.QueueDiagnosis]). A store that gives up reading the window
// returns an error marked [store.ErrDiagnosisTooSlow].
func Diagnose(ctx context.Context, s store.Store, p *store.QueueDiagnoseParams) (*store.QueueDiagnosis, error) {
	d, err := s.QueueMeasure(ctx, p)
	if err != nil {
		return nil, err
	}
	FindCauses(d)
	return d, nil
}

// diagnosis judges a queue's measurements: the causes are found once, here,
// whichever store measured them.
type diagnosis struct{ *store.QueueDiagnosis }

func (d diagnosis) pace() pace {
	p := pace{half: d.Window.Duration() / 2}
	p.growth = d.Now.Inflow - d.Now.Outflow
	p.growing = p.growth >= minGrowth && float64(p.growth) >= 0.1*float64(d.Now.Inflow)
	p.stalled = d.Depth.Due > 0 && d.Depth.OldestWait.Duration() >= time.Duration(stalledWaitOfWindow*float64(d.Window.Duration()))
	p.backingUp = d.Depth.Due > 0 && (p.growing || p.stalled)
	return p
}

// findCauses judges the measurements (see [FindCauses]).
func (d diagnosis) findCauses() {
	p := d.pace()
	finders := []func(pace) (store.DiagnosisCause, bool){
		d.lostConsumers, d.unservedType, d.poisonRetries, d.slowerAttempts, d.inflowSpike,
		d.concurrencyCapped, d.rateLimited, d.hotKey,
	}
	d.Causes = []store.DiagnosisCause{}
	for _, find := range finders {
		if c, ok := find(p); ok {
			c.Score = math.Round(min(max(c.Score, 0), 1)*100) / 100
			d.Causes = append(d.Causes, c)
		}
	}
	// Stable: on a tie the finder listed first (the more direct cause) wins.
	slices.SortStableFunc(d.Causes, func(a, b store.DiagnosisCause) int { return cmp.Compare(b.Score, a.Score) })
	d.Healthy = len(d.Causes) == 0 && !p.backingUp
	d.Summary = d.summary(p)
}

func (d diagnosis) summary(p pace) string {
	switch {
	case len(d.Causes) > 0:
		return "most likely: " + d.Causes[0].Summary
	case p.backingUp:
		return fmt.Sprintf("backing up (%d due tasks wait, the oldest for %s; inflow %d, outflow %d in the last %s) with no single cause standing out",
			d.Depth.Due, d.Depth.OldestWait, d.Now.Inflow, d.Now.Outflow, roundDuration(p.half))
	default:
		return fmt.Sprintf("healthy: inflow %d, outflow %d in the last %s; %d waiting (%d due); live workers: %d",
			d.Now.Inflow, d.Now.Outflow, roundDuration(p.half), d.Depth.Waiting(), d.Depth.Due, d.Now.Workers)
	}
}

// lostConsumers: due tasks wait while fewer workers (or none) take them
// than in the first half, or while no worker has claimed for a while with
// nothing running (a worker that stopped late in the second half still
// counts among its workers).
func (d diagnosis) lostConsumers(p pace) (store.DiagnosisCause, bool) {
	then, now := d.Then.Workers, d.Now.Workers
	quiet := d.quietNow()
	if d.Depth.Due == 0 || (now >= then && now > 0 && !quiet) {
		return store.DiagnosisCause{}, false
	}
	c := store.DiagnosisCause{Code: store.CauseLostConsumers, Evidence: []string{
		fmt.Sprintf("live workers: %d then, %d now", then, now),
		fmt.Sprintf("attempts started: %d then, %d now", d.Then.AttemptsStarted, d.Now.AttemptsStarted),
		fmt.Sprintf("outflow: %d then, %d now; inflow: %d then, %d now", d.Then.Outflow, d.Now.Outflow, d.Then.Inflow, d.Now.Inflow),
		d.dueEvidence(),
	}}
	if gone := missing(d.Then.WorkerIDs, d.Now.WorkerIDs); len(gone) > 0 {
		c.Evidence = append(c.Evidence, "workers seen then but not now: "+listSome(gone, store.DiagnoseTop))
	}
	if d.Depth.ExpiredLeases > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%d running tasks hold expired leases: their worker stopped renewing them (crashed or stalled)", d.Depth.ExpiredLeases))
	}
	switch {
	case now == 0 && then > 0:
		c.Score = 1
		c.Summary = fmt.Sprintf("no worker has taken a task for the last %s (%d did before) while %d due tasks wait", roundDuration(p.half), then, d.Depth.Due)
	case now == 0:
		c.Score = 0.9
		c.Summary = fmt.Sprintf("no worker has taken a task of this queue in the last %s while %d due tasks wait", roundDuration(2*p.half), d.Depth.Due)
	case quiet:
		c.Score = 0.95
		c.Summary = fmt.Sprintf("no worker has taken a task for the last %s while %d due tasks wait and none runs (%d took tasks earlier in the window)",
			d.Depth.SinceLastStart, d.Depth.Due, max(then, now))
		c.Evidence = append(c.Evidence, fmt.Sprintf("last attempt started %s ago; running now: 0", d.Depth.SinceLastStart))
	case p.backingUp:
		c.Score = 0.4 + 0.5*float64(then-now)/float64(then)
		c.Summary = fmt.Sprintf("fewer workers take tasks: %d now, %d before, and the queue backs up", now, then)
	default:
		return store.DiagnosisCause{}, false
	}
	return c, true
}

// quietNow says no worker claims right now: due tasks of types workers ran
// in the window have waited quietAfter with nothing running, no attempt
// started for as long, and no rate limit holds their types back.
func (d diagnosis) quietNow() bool {
	if d.Depth.Running > 0 || d.Depth.OldestWait.Duration() < quietAfter || d.Depth.SinceLastStart.Duration() < quietAfter {
		return false
	}
	for _, w := range d.WaitingByType {
		if w.Served && w.Due > 0 && !slices.ContainsFunc(d.Limits.RateLimits, func(r store.RateLimit) bool { return r.Type == w.Type }) {
			return true
		}
	}
	return false
}

// unservedType: due tasks of a type and version no attempt started of in
// the whole window, while workers did run other types of the queue: no
// running worker has that type (or that version) registered.
func (d diagnosis) unservedType(p pace) (store.DiagnosisCause, bool) {
	started := d.Then.AttemptsStarted + d.Now.AttemptsStarted
	if started == 0 {
		return store.DiagnosisCause{}, false // nothing was served at all: lost_consumers says it
	}
	for _, w := range d.WaitingByType {
		if w.Served || w.Due == 0 || w.OldestWait.Duration() < p.half {
			continue
		}
		return store.DiagnosisCause{
			Code:    store.CauseUnservedType,
			Summary: fmt.Sprintf("no worker runs %s version %d: %d of its tasks wait, none started in the last %s", w.Type, w.Version, w.Due, roundDuration(2*p.half)),
			Evidence: []string{
				fmt.Sprintf("%s v%d: %d waiting, %d due, the oldest for %s", w.Type, w.Version, w.Waiting, w.Due, w.OldestWait),
				fmt.Sprintf("attempts of %s v%d started in the window: 0; of other types: %d", w.Type, w.Version, started),
				"is a worker with this type and version registered running on this queue?",
			},
			Score: 0.85,
		}, true
	}
	return store.DiagnosisCause{}, false
}

// poisonRetries: a high share of the attempts started in the second half
// are retries, taking worker capacity from new tasks.
func (d diagnosis) poisonRetries(pace) (store.DiagnosisCause, bool) {
	h := d.Now
	if h.AttemptsStarted < minAttemptsForShares || h.RetryShare < poisonRetryShare || len(h.Types) == 0 {
		return store.DiagnosisCause{}, false
	}
	worst := slices.MaxFunc(h.Types, func(a, b store.TypeStats) int { return cmp.Compare(a.Retries, b.Retries) })
	c := store.DiagnosisCause{
		Code:    store.CausePoisonRetries,
		Summary: fmt.Sprintf("%s keeps failing and retrying: %.0f%% of attempts are retries", worst.Type, 100*h.RetryShare),
		Evidence: []string{
			fmt.Sprintf("retries: %d of %d attempts started now (%.0f%%), %d of %d then (%.0f%%)",
				h.Retries, h.AttemptsStarted, 100*h.RetryShare, d.Then.Retries, d.Then.AttemptsStarted, 100*d.Then.RetryShare),
			fmt.Sprintf("%s: %d of its %d attempts were retries; %d attempts failed, %d leases expired",
				worst.Type, worst.Retries, worst.AttemptsStarted, worst.AttemptsFailed, worst.LeasesExpired),
		},
		Score: 0.4 + 0.6*h.RetryShare,
	}
	if e, ok := topError(h.Errors, worst.Type); ok {
		c.Summary += fmt.Sprintf(", mostly %s", describeError(e))
		c.Evidence = append(c.Evidence, fmt.Sprintf("most common failure of %s: %s, %d times: %q", worst.Type, describeError(e), e.Count, e.Message))
	}
	return c, true
}

func describeError(e store.ErrorStats) string {
	parts := []string{e.Class}
	if e.Kind != "" {
		parts = append(parts, "kind "+e.Kind)
	}
	if e.Status != 0 {
		parts = append(parts, fmt.Sprintf("status %d", e.Status))
	}
	if e.Step != "" {
		parts = append(parts, "in step "+e.Step)
	}
	return strings.Join(parts, " ")
}

// slowerAttempts: a type's attempts (or one of its steps) take well longer
// now than then, so the same workers finish fewer tasks.
func (d diagnosis) slowerAttempts(p pace) (store.DiagnosisCause, bool) {
	slower := append(d.slowerTypes(), d.slowerSteps()...)
	if len(slower) == 0 {
		return store.DiagnosisCause{}, false
	}
	slices.SortStableFunc(slower, func(a, b slowdown) int { return cmp.Compare(b.factor(), a.factor()) })
	worst := slower[0]
	c := store.DiagnosisCause{
		Code:    store.CauseSlowerAttempts,
		Summary: fmt.Sprintf("%s take %.1f× as long as before (median %s, was %s)", worst.what, worst.factor(), worst.now.P50, worst.then.P50),
		Score:   min(0.85, 0.5+0.1*math.Log2(worst.factor())),
	}
	for _, s := range slower {
		c.Evidence = append(c.Evidence, s.String())
	}
	if !p.backingUp {
		c.Score /= 2 // slower, but the queue keeps up
		c.Evidence = append(c.Evidence, "the queue is not backing up: the workers keep up so far")
	}
	return c, true
}

func (d diagnosis) slowerTypes() []slowdown {
	var out []slowdown
	for _, now := range d.Now.Types {
		i := slices.IndexFunc(d.Then.Types, func(t store.TypeStats) bool { return t.Type == now.Type })
		if i < 0 {
			continue
		}
		if s := (slowdown{"attempts of " + now.Type, d.Then.Types[i].Attempts, now.Attempts}); s.significant() {
			out = append(out, s)
		}
	}
	return out
}

func (d diagnosis) slowerSteps() []slowdown {
	var out []slowdown
	for _, now := range d.Now.Steps {
		i := slices.IndexFunc(d.Then.Steps, func(t store.StepStats) bool { return t.Type == now.Type && t.Step == now.Step })
		if i < 0 {
			continue
		}
		if s := (slowdown{"step " + now.Step + " of " + now.Type, d.Then.Steps[i].Duration, now.Duration}); s.significant() {
			out = append(out, s)
		}
	}
	return out
}

// inflowSpike: many more tasks arrive now than then, and the workers finish
// them at the pace they had. Only tasks due now are a backlog: a spike of
// tasks not yet due (run later, or waiting for a signal until their wait's
// deadline) is not a cause of anything while none of them is due.
func (d diagnosis) inflowSpike(p pace) (store.DiagnosisCause, bool) {
	in, was := d.Now.Inflow, d.Then.Inflow
	if d.Depth.Due == 0 || in < minSpikeInflow || float64(in) < spikeFactor*float64(was) || !p.growing ||
		float64(d.Now.Outflow) < steadyOutflow*float64(d.Then.Outflow) {
		return store.DiagnosisCause{}, false
	}
	factor := float64(in) / float64(max(was, 1))
	rise := fmt.Sprintf("%.1f×", factor)
	if was == 0 {
		rise = "from none"
	}
	c := store.DiagnosisCause{
		Code:    store.CauseInflowSpike,
		Summary: fmt.Sprintf("inflow jumped to %d tasks in the last %s from %d; workers finish %d", in, roundDuration(p.half), was, d.Now.Outflow),
		Evidence: []string{
			fmt.Sprintf("inflow: %d then, %d now (%s)", was, in, rise),
			fmt.Sprintf("outflow: %d then, %d now", d.Then.Outflow, d.Now.Outflow),
			fmt.Sprintf("the queue grew by %d in the last %s", p.growth, roundDuration(p.half)),
		},
		Score: min(0.9, 0.5+0.1*math.Log2(factor)),
	}
	if spiking := d.spikingType(); spiking != "" {
		c.Evidence = append(c.Evidence, spiking)
	}
	return c, true
}

// spikingType names the type whose inflow grew the most, if any did.
func (d diagnosis) spikingType() string {
	best, bestGrowth := "", 0
	for _, now := range d.Now.Types {
		was := 0
		if i := slices.IndexFunc(d.Then.Types, func(t store.TypeStats) bool { return t.Type == now.Type }); i >= 0 {
			was = d.Then.Types[i].Inflow
		}
		if g := now.Inflow - was; g > bestGrowth {
			best, bestGrowth = fmt.Sprintf("most of the rise is %s: %d then, %d now", now.Type, was, now.Inflow), g
		}
	}
	return best
}

// concurrencyCapped: the queue runs as many tasks as its limit allows while
// due tasks wait; more workers would not help.
func (d diagnosis) concurrencyCapped(p pace) (store.DiagnosisCause, bool) {
	limit := d.Limits.Concurrency
	if limit == 0 || d.Depth.Running < limit || d.Depth.Due == 0 {
		return store.DiagnosisCause{}, false
	}
	c := store.DiagnosisCause{
		Code:    store.CauseConcurrencyCapped,
		Summary: fmt.Sprintf("the queue runs %d tasks, its concurrency limit, while %d due tasks wait", d.Depth.Running, d.Depth.Due),
		Evidence: []string{
			fmt.Sprintf("running: %d, concurrency limit: %d", d.Depth.Running, limit),
			d.dueEvidence(),
			fmt.Sprintf("live workers now: %d (more workers would not start more)", d.Now.Workers),
		},
		Score: 0.8,
	}
	if !p.backingUp {
		c.Score = 0.4
	}
	return c, true
}

// rateLimited: a type with due tasks starts attempts at (nearly) the pace
// its rate limit allows.
func (d diagnosis) rateLimited(p pace) (store.DiagnosisCause, bool) {
	for _, rl := range d.Limits.RateLimits {
		due := 0
		for _, w := range d.WaitingByType {
			if w.Type == rl.Type {
				due += w.Due
			}
		}
		started := 0
		if i := slices.IndexFunc(d.Now.Types, func(t store.TypeStats) bool { return t.Type == rl.Type }); i >= 0 {
			started = d.Now.Types[i].AttemptsStarted
		}
		allowed := float64(rl.MaxStarts) * float64(p.half) / float64(rl.Per.Duration())
		if due == 0 || rl.Per <= 0 || float64(started) < rateBound*allowed {
			continue
		}
		c := store.DiagnosisCause{
			Code:    store.CauseRateLimited,
			Summary: fmt.Sprintf("%s starts at its rate limit (%d per %s) while %d of its tasks are due", rl.Type, rl.MaxStarts, rl.Per, due),
			Evidence: []string{
				fmt.Sprintf("rate limit of %s: %d starts per %s, about %.0f in %s", rl.Type, rl.MaxStarts, rl.Per, allowed, roundDuration(p.half)),
				fmt.Sprintf("attempts of %s started in the last %s: %d", rl.Type, roundDuration(p.half), started),
				fmt.Sprintf("due tasks of %s waiting: %d", rl.Type, due),
			},
			Score: 0.75,
		}
		if !p.backingUp {
			c.Score = 0.35
		}
		return c, true
	}
	return store.DiagnosisCause{}, false
}

// hotKey: one fairness key, or one of several types, holds most of the
// waiting tasks: the growth is theirs.
func (d diagnosis) hotKey(p pace) (store.DiagnosisCause, bool) {
	waiting := d.Depth.Waiting()
	if waiting < minHotWaiting {
		return store.DiagnosisCause{}, false
	}
	name, share, count := "", 0.0, 0
	if len(d.WaitingByKey) > 0 && d.WaitingByKey[0].Share > hotShare && d.WaitingByKey[0].Waiting < waiting {
		k := d.WaitingByKey[0]
		name, share, count = "fairness key "+k.Key, k.Share, k.Waiting
	}
	if len(d.TypeNames()) > 1 && len(d.WaitingByType) > 0 && d.WaitingByType[0].Share > max(hotShare, share) {
		t := d.WaitingByType[0]
		name, share, count = fmt.Sprintf("type %s v%d", t.Type, t.Version), t.Share, t.Waiting
	}
	if name == "" {
		return store.DiagnosisCause{}, false
	}
	c := store.DiagnosisCause{
		Code:    store.CauseHotKey,
		Summary: fmt.Sprintf("%s holds %.0f%% of the waiting tasks (%d of %d)", name, 100*share, count, waiting),
		Evidence: []string{
			fmt.Sprintf("%s: %d of %d waiting tasks (%.0f%%)", name, count, waiting, 100*share),
			d.keyEvidence(),
		},
		Score: 0.3 + 0.8*(share-hotShare),
	}
	if !p.backingUp {
		c.Score *= 0.6
	}
	return c, true
}

func (d diagnosis) keyEvidence() string {
	var parts []string
	for _, k := range d.WaitingByKey {
		parts = append(parts, fmt.Sprintf("%s %d", k.Key, k.Waiting))
	}
	if len(parts) == 0 {
		return "no waiting task has a fairness key"
	}
	return fmt.Sprintf("waiting by fairness key (%d keys): %s", d.FairnessKeys, strings.Join(parts, ", "))
}

func (d diagnosis) dueEvidence() string {
	return fmt.Sprintf("due tasks waiting: %d (of %d waiting), the oldest for %s", d.Depth.Due, d.Depth.Waiting(), d.Depth.OldestWait)
}

// FindCauses judges d's measurements and sets its Causes (ranked), Healthy
// and Summary. [Diagnose] calls it; it is exported so measurements read
// back from JSON, or made up in a test, can be judged again.
func FindCauses(d *store.QueueDiagnosis) { diagnosis{d}.findCauses() }
