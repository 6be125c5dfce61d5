package historytest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cairnflow/cairn/history"
	"pgregory.net/rapid"
)

// Opts bounds generated histories. The zero value is usable.
type Opts struct {
	// MaxAttempts is the largest max_attempts a generated task is scheduled
	// with (at least 1); 0 means 4.
	MaxAttempts int
	// MaxSteps is the largest number of steps a generated task's workflow
	// has; 0 means 4.
	MaxSteps int
	// Complete, when set, keeps every history to its terminal event. By
	// default about a third of the histories stop part-way, at a point where
	// the log can rest between appends.
	Complete bool
}

func (o Opts) withDefaults() Opts {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = 4
	}
	return o
}

// Events returns a rapid generator of valid task histories: task_scheduled,
// then attempts (each attempt_started under a higher lease epoch, some
// step_completed continuing from the steps already completed, then a retry,
// a lease expiry, a release, completion, or a final failure followed by
// task_failed or task_dead_lettered), possibly stopping part-way. Seq runs
// 1..n, times are UTC, microsecond-precise and non-decreasing.
func Events(opts Opts) *rapid.Generator[[]history.Event] {
	return rapid.Custom(func(t *rapid.T) []history.Event { return Draw(t, opts) })
}

// Draw draws one history as [Events] does, from t.
func Draw(t *rapid.T, opts Opts) []history.Event {
	return generate(rapidSource{t}, opts.withDefaults())
}

// FromSeed returns the history [Events] describes, drawn from a PCG seeded
// with seed: the same seed always gives the same history.
func FromSeed(seed uint64, opts Opts) []history.Event {
	return generate(randSource{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, opts.withDefaults())
}

// Long returns a valid, non-terminal history of exactly n events (n >= 1),
// drawn from a PCG seeded with seed: many attempts, each completing some
// steps and ending in a retry, a lease expiry or a release. It is meant for
// benchmarks and for tests that need a big history.
func Long(n int, seed uint64) []history.Event {
	g := &gen{
		src:         randSource{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))},
		at:          Base,
		limit:       n,
		maxAttempts: n, // never reached: every attempt takes at least two events
		totalSteps:  n,
		perAttempt:  8,
		endless:     true,
	}
	g.run()
	return g.events[:n]
}

// source is where the generator's choices come from.
type source interface {
	// intRange returns a value in [lo, hi].
	intRange(label string, lo, hi int) int
}

type rapidSource struct{ t *rapid.T }

func (s rapidSource) intRange(label string, lo, hi int) int {
	return rapid.IntRange(lo, hi).Draw(s.t, label)
}

type randSource struct{ r *rand.Rand }

func (s randSource) intRange(_ string, lo, hi int) int {
	return lo + s.r.IntN(hi-lo+1)
}

type gen struct {
	src source

	events []history.Event
	at     time.Time
	// rest lists the lengths at which the log may rest between appends:
	// everywhere but between a final attempt_failed and its terminal event.
	rest []int

	limit       int // stop once this many events exist; 0 for no limit
	perAttempt  int // most steps one attempt completes; 0 for no bound
	endless     bool
	maxAttempts int
	totalSteps  int
	steps       int
	epoch       int64
	runAt       time.Time
	budgetFrom  int // attempts before the last requeue: the budget counts from there

	compensable   []bool                     // by position of each completed step
	cancelled     bool                       // cancel_requested was appended
	compRequested bool                       // compensation_requested was appended
	sleeping      bool                       // a timer runs: the next attempt fires it
	waiting       bool                       // a receive waits (wait_started): a signal or the deadline ends it
	receives      int                        // receives the workflow has made: the next one's position
	unconsumed    int                        // signals received that no receive has taken yet
	unconsumedSeq []int64                    // their seqs, oldest first: the one a select takes
	selecting     bool                       // the wait is a select's (wait_started with select)
	matched       *history.SelectMatchedData // a select's wait ended by a signal: the next attempt records it
	children      int                        // children started: the next one's position
	patches       int                        // patch markers recorded: the next one's id
	unfinished    []int                      // positions of the children not finished yet
	awaiting      bool                       // the attempt ended awaiting the last child started
	comp          *compState                 // compensation in progress
	budgetWaiting bool                       // the attempt ended over budget (budget_refused, wait)
	remote        *remoteState               // the remote step dispatched and not completed
}

// remoteState is a remote step dispatched at position pos and not
// completed, its attempt in flight, failed, or to be dispatched again.
type remoteState struct {
	pos, attempt  int
	failed, retry bool
}

// compState is a compensation under way.
type compState struct {
	reason  string
	pending []int
	done    []int
	err     *history.ErrorInfo // the failure that led to it
}

func generate(src source, opts Opts) []history.Event {
	g := &gen{src: src, at: Base}
	g.maxAttempts = src.intRange("max_attempts", 1, opts.MaxAttempts)
	g.totalSteps = src.intRange("steps", 0, opts.MaxSteps)
	g.run()
	if !opts.Complete && g.src.intRange("stop_early", 0, 2) == 0 {
		n := g.rest[g.src.intRange("stop_at", 0, len(g.rest)-1)]
		return g.events[:n]
	}
	// Drawn last, so the histories of earlier seeds (and recorded failure
	// files) stay what they were.
	g.maybeErase()
	g.maybeForked()
	if g.src.intRange("fork", 0, 7) == 0 {
		return g.forkOf()
	}
	return g.events
}

// forkID is the task id generated forks name.
const forkID = "0190a000-0000-7000-8000-00000000f04c"

// maybeForked sometimes ends a history not erased with task_forked: a
// fork made from it at one of its completed steps, in any status.
func (g *gen) maybeForked() {
	s, err := history.Replay(g.events)
	if err != nil || s.Erased || len(s.Steps) == 0 || g.src.intRange("forked", 0, 5) != 0 {
		return
	}
	g.at = g.at.Add(g.delay("fork_lag", time.Hour))
	g.emit(0, history.TaskForkedData{
		ForkTaskID: forkID, Position: g.src.intRange("fork_position", 0, len(s.Steps)-1),
		By: g.pick("forked_by", []string{"", "alice@example.com"}),
	}, true)
}

// forkOf returns, in place of the history generated, a fork of it: its
// task_scheduled forked from a task at one of the generated history's
// steps, that step and those before it copied, then perhaps an attempt
// that runs the next step and completes.
func (g *gen) forkOf() []history.Event {
	s, err := history.Replay(g.events)
	if err != nil || len(s.Steps) == 0 {
		return g.events
	}
	at := g.src.intRange("fork_at", 0, len(s.Steps)-1)
	sched := s.Scheduled
	sched.ForkedFrom = &history.ForkOrigin{TaskID: forkID, Position: at}
	sched.RunAt = g.at
	f := &gen{src: g.src, at: g.at}
	f.emit(0, sched, true)
	for _, st := range s.Steps[:at+1] {
		// The original's markers at the step's position come before it,
		// as they were recorded before it ran.
		for _, p := range s.Patches {
			if p.Position == st.Position {
				f.emit(0, history.PatchRecordedData{PatchID: p.ID, Position: p.Position, CopiedFromSeq: 1}, true)
			}
		}
		f.emit(0, history.StepCompletedData{Position: st.Position, Name: st.Name, Output: st.Output, Compensable: st.Compensable,
			CopiedFromSeq: int64(st.Position + 2)}, true)
	}
	if g.src.intRange("fork_runs", 0, 1) == 1 {
		f.at = f.at.Add(g.delay("delay", time.Second))
		f.emit(1, history.AttemptStartedData{WorkerID: "worker-1", LeaseEpoch: 1, LeaseExpiresAt: f.at.Add(time.Minute)}, true)
		f.emit(1, history.StepCompletedData{Position: at + 1, Name: stepName(at + 1), Output: g.rawOrNil("output", outputs)}, true)
		f.emit(1, history.TaskCompletedData{Output: g.rawOrNil("output", outputs)}, true)
	}
	return f.events
}

// maybeErase sometimes ends a finished history with task_erased, as an
// operator answering an erasure request would.
func (g *gen) maybeErase() {
	s, err := history.Replay(g.events)
	if err != nil || !s.Status.Terminal() || g.src.intRange("erase", 0, 9) != 0 {
		return
	}
	g.at = g.at.Add(g.delay("erase_lag", 24*time.Hour))
	g.emit(0, history.TaskErasedData{
		By: g.pick("erased_by", []string{"", "alice@example.com"}), Reason: g.pick("erase_reason", []string{"", "GDPR art. 17 request"}),
	}, true)
}

func (g *gen) full() bool { return g.limit > 0 && len(g.events) >= g.limit }

// delay returns a pause of up to max, in whole microseconds.
func (g *gen) delay(label string, max time.Duration) time.Duration {
	return time.Duration(g.src.intRange(label, 0, int(max/time.Microsecond))) * time.Microsecond
}

func (g *gen) emit(attempt int, p history.Payload, rest bool) {
	g.events = append(g.events, history.Event{
		Seq:     int64(len(g.events) + 1),
		At:      g.at,
		Attempt: attempt,
		Data:    p,
	})
	if rest {
		g.rest = append(g.rest, len(g.events))
	}
}

func (g *gen) pick(label string, pool []string) string {
	return pool[g.src.intRange(label, 0, len(pool)-1)]
}

var (
	namespaces = []string{"default", "billing"}
	taskTypes  = []string{"send_invoice", "sync_inventory", "résumé_render"}
	queues     = []string{"default", "critical", "bulk"}
	workers    = []string{"worker-1", "worker-2", "host-b/pid-77"}
	stepNames  = []string{"reserve", "charge", "ship", "notify", "archive"}
	inputs     = []string{"", `{"invoice":42,"lines":[1,2,3]}`, `"plain"`, `[]`, `{"note":"\u003chi\u003e \"q\" ü"}`}
	outputs    = []string{"", `{"id":"x-1"}`, `123`, `"ok"`, `null`, `{"nested":{"a":[true,false]}}`}
	messages   = []string{"connection reset", "upstream returned 503", `bad "input" <field>`, "tiempo agotado ⏱", "line1\nline2"}
	kinds      = []string{"", "net", "http", "validation"}
)

func (g *gen) rawOrNil(label string, pool []string) json.RawMessage {
	s := g.pick(label, pool)
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

func (g *gen) errorInfo(class history.Class) history.ErrorInfo {
	info := history.ErrorInfo{
		Class:   class,
		Message: g.pick("message", messages),
		Kind:    g.pick("kind", kinds),
	}
	if g.src.intRange("has_status", 0, 1) == 1 {
		info.Status = 500 + g.src.intRange("status", 0, 4)
	}
	if g.src.intRange("has_attrs", 0, 2) == 0 {
		info.Attrs = map[string]string{"host": "api.example.com", "try": fmt.Sprint(len(g.events))}
	}
	if g.steps < g.totalSteps && g.src.intRange("in_step", 0, 1) == 1 {
		info.Step, info.Position = stepName(g.steps), g.steps
	}
	if class == history.Transient && g.src.intRange("has_retry_after", 0, 3) == 0 {
		info.RetryAfterMillis = int64(g.src.intRange("retry_after", 1, 60_000))
	}
	return info
}

func stepName(position int) string {
	if position < len(stepNames) {
		return stepNames[position]
	}
	return fmt.Sprintf("step-%d", position)
}

// The ways an attempt can end.
const (
	endComplete  = iota // task_completed
	endRetry            // attempt_failed with next_run_at
	endExpire           // lease_expired
	endRelease          // task_released
	endPermanent        // attempt_failed, task_failed
)

func (g *gen) run() {
	g.scheduled()
	if g.full() {
		return
	}
	if !g.endless && g.src.intRange("expire_pending", 0, 19) == 0 {
		// Not started by its start deadline.
		g.at = g.at.Add(g.delay("delay", time.Minute))
		g.emit(0, history.TaskExpiredData{Reason: "not started by its start deadline"}, true)
		return
	}
	if !g.endless && g.src.intRange("fail_pending", 0, 19) == 0 {
		// Refused or expired before any attempt started.
		g.at = g.at.Add(g.delay("delay", time.Minute))
		g.emit(0, history.TaskFailedData{Error: g.errorInfo(history.Permanent)}, true)
		return
	}
	for attempt := 1; !g.full(); attempt++ {
		if g.remote != nil && g.remote.attempt > 0 && !g.remote.failed && !g.remote.retry && !g.cancelled && g.comp == nil {
			// The remote step's worker answers between attempts. (Drawn
			// from nothing: earlier seeds' draws stay what they were.)
			g.at = g.at.Add(time.Second)
			g.finishRemote()
			if g.full() {
				return
			}
		}
		if g.awaiting || (len(g.unfinished) > 0 && g.src.intRange("child_finish", 0, 3) == 0) {
			// A child finishes between attempts; a task awaiting it is
			// due at once.
			g.at = g.at.Add(g.delay("delay", time.Second))
			g.finishChild()
			if g.full() {
				return
			}
		}
		if !g.endless && g.src.intRange("signal", 0, 5) == 0 {
			// A signal arrives between attempts; a task waiting for it is
			// due at once.
			g.at = g.at.Add(g.delay("delay", time.Second))
			g.signal()
			if g.full() {
				return
			}
		}
		if !g.endless && !g.cancelled && g.comp == nil && g.src.intRange("cancel_waiting", 0, 11) == 0 {
			// Cancelled while waiting for its next attempt.
			g.at = g.at.Add(g.delay("delay", time.Second))
			if g.requestCancel() {
				return
			}
		}
		if g.budgetWaiting {
			// Over budget: a raise comes, or the wait's deadline passes.
			// (Drawn from nothing: earlier seeds' draws stay what they
			// were.)
			g.budgetWaiting = false
			if len(g.events)%2 == 0 {
				g.emit(0, history.BudgetRaisedData{Budget: history.BudgetWindowRef{Ref: history.BudgetRefKeyPrefix + "tenant-1"},
					By: "alice@example.com", Reason: "month end", USD: 5, LimitUSD: 15}, true)
				g.runAt = g.at
				if g.full() {
					return
				}
			}
		}
		if g.attempt(attempt) {
			return
		}
	}
}

// signalName is the name of the signals generated histories receive.
const signalName = "approval"

// signal appends signal_received, outside any attempt.
func (g *gen) signal() {
	g.emit(0, history.SignalReceivedData{
		Name: signalName, Payload: g.rawOrNil("payload", outputs), Sender: g.pick("sender", []string{"", "api", "alice@example.com"}),
		DedupID: fmt.Sprintf("sig-%d", len(g.events)+1),
	}, true)
	if g.waiting {
		// The receive that waits takes it at the next attempt.
		g.waiting = false
		if g.selecting {
			// A select's: its next attempt records the signal's case.
			g.selecting = false
			g.matched = &history.SelectMatchedData{Position: g.receives, Kind: history.SelectSignal, Name: signalName, Seq: int64(len(g.events))}
		} else {
			g.receives++
		}
		if g.at.Before(g.runAt) {
			g.runAt = g.at
		}
		return
	}
	g.unconsumed++
	g.unconsumedSeq = append(g.unconsumedSeq, int64(len(g.events)))
}

// update appends update_accepted, outside any attempt, and the running
// attempt's update_completed of it; it reports whether the history is
// full.
func (g *gen) update(attempt int) bool {
	id := fmt.Sprintf("upd-%d", len(g.events)+1)
	g.emit(0, history.UpdateAcceptedData{UpdateID: id, Name: "reassign", Args: g.rawOrNil("args", outputs), RequestedBy: "api"}, true)
	if g.full() {
		return true
	}
	done := history.UpdateCompletedData{UpdateID: id, At: history.UpdatePoint{Call: g.steps + g.receives + g.children, Step: g.steps, Receive: g.receives, Child: g.children}}
	if len(g.events)%2 == 0 {
		done.Error = &history.ErrorInfo{Class: history.Permanent, Message: "not now", ClassifiedBy: "update"}
	} else {
		done.Output = json.RawMessage(`"ok"`)
	}
	g.emit(attempt, done, true)
	return g.full()
}

// finishChild appends child_finished, outside any attempt: for the child
// awaited, or else for the oldest unfinished one.
func (g *gen) finishChild() {
	pos := g.unfinished[0]
	if g.awaiting {
		pos = g.unfinished[len(g.unfinished)-1]
	}
	g.unfinished = slices.DeleteFunc(g.unfinished, func(p int) bool { return p == pos })
	p := history.ChildFinishedData{Position: pos, ChildID: fmt.Sprintf("0190c0de-0000-7000-8000-%012d", pos), Status: history.StatusCompleted,
		Output: g.rawOrNil("output", outputs)}
	if g.src.intRange("child_failed", 0, 3) == 0 {
		info := g.errorInfo(history.Permanent)
		p.Status, p.Output, p.Error = history.StatusFailed, nil, &info
	}
	g.emit(0, p, true)
	if g.awaiting {
		g.awaiting = false
		g.runAt = g.at
	}
}

// dispatchRemote appends the next attempt's remote_step_dispatched of
// the remote step and the wait for it.
func (g *gen) dispatchRemote(attempt int) {
	r := g.remote
	r.attempt++
	r.failed, r.retry = false, false
	g.emit(attempt, history.RemoteStepDispatchedData{Position: r.pos, Name: stepName(r.pos), Queue: "ocr", Attempt: r.attempt,
		Input: json.RawMessage(`{"page":3}`), HeartbeatTimeoutMillis: 30_000, Compensable: r.pos%2 == 1}, true)
	if g.full() {
		return
	}
	g.emit(attempt, history.RemoteWaitStartedData{Positions: []int{r.pos}}, true)
	g.runAt = history.Never
}

// finishRemote appends the remote step's outcome, outside any attempt:
// it fails its first attempts about one time in three.
func (g *gen) finishRemote() {
	r := g.remote
	claim := fmt.Sprintf("claim-%d", len(g.events))
	if r.attempt < 3 && len(g.events)%3 == 0 {
		g.emit(0, history.RemoteStepFailedData{Position: r.pos, Name: stepName(r.pos), Attempt: r.attempt, Worker: "py-1", Claim: claim,
			Error:   history.ErrorInfo{Message: "ocr backend unavailable", Kind: "Unavailable", Status: 503, Attrs: map[string]string{"page": "3"}},
			Streams: []history.StreamClosedData{{Name: "tokens", Position: r.pos, Chunks: 2, Bytes: 9, Outcome: history.StreamRewound}}}, true)
		r.failed = true
	} else {
		g.emit(0, history.RemoteStepCompletedData{Position: r.pos, Name: stepName(r.pos), Attempt: r.attempt, Worker: "ts-1", Claim: claim,
			Output: json.RawMessage(`{"text":"page 3"}`), DurationMillis: 1200, Streams: remoteStreams(r.pos, len(g.events))}, true)
		g.steps++
		g.compensable = append(g.compensable, r.pos%2 == 1)
		g.remote = nil
	}
	g.runAt = g.at
}

// remoteAttempt is an attempt woken while a remote step is dispatched:
// it classifies the step's failure (tried again), dispatches it again,
// or, woken otherwise, waits again.
func (g *gen) remoteAttempt(attempt int) bool {
	r := g.remote
	g.at = g.at.Add(time.Second)
	switch {
	case r.failed:
		info := history.ErrorInfo{Class: history.Transient, Message: "ocr backend unavailable", Kind: "Unavailable", Status: 503,
			Step: stepName(r.pos), Position: r.pos, ClassifiedBy: "default:step"}
		next := g.at.Add(time.Second)
		g.emit(attempt, history.AttemptFailedData{Error: info, NextRunAt: &next}, true)
		g.runAt = next
		r.failed, r.retry = false, true
	case r.retry:
		g.dispatchRemote(attempt)
	default:
		g.emit(attempt, history.RemoteWaitStartedData{Positions: []int{r.pos}}, true)
		g.runAt = history.Never
	}
	return g.full()
}

// requestCancel appends cancel_requested and, when no completed step needs
// compensating, task_cancelled in the same append (a task that is not
// running). It reports whether the task ended.
func (g *gen) requestCancel() bool {
	g.cancelled = true
	g.emit(0, history.CancelRequestedData{By: g.pick("requester", []string{"api", "alice@example.com"}), Reason: "user clicked cancel"},
		len(g.compensablePositions()) > 0)
	g.runAt = g.at
	if len(g.compensablePositions()) > 0 {
		return g.full()
	}
	g.emit(0, history.TaskCancelledData{Reason: "cancelled before it ran"}, true)
	return true
}

// compensablePositions returns the completed compensable steps, latest
// first: the order they are compensated in.
func (g *gen) compensablePositions() []int {
	var out []int
	for pos := len(g.compensable) - 1; pos >= 0; pos-- {
		if g.compensable[pos] {
			out = append(out, pos)
		}
	}
	return out
}

// compensate runs (or resumes) compensation in attempt and reports whether
// the task reached a terminal status (or the limit).
func (g *gen) compensate(attempt int, reason string, cause *history.ErrorInfo) bool {
	if g.comp == nil {
		steps := g.compensablePositions()
		g.comp = &compState{reason: reason, pending: steps, err: cause}
		g.at = g.at.Add(g.delay("delay", time.Second))
		g.emit(attempt, history.CompensationStartedData{Reason: reason, Steps: steps, Error: cause}, true)
		if g.full() {
			return true
		}
	}
	for len(g.comp.pending) > 0 {
		pos := g.comp.pending[0]
		g.at = g.at.Add(g.delay("delay", 2*time.Second))
		switch g.src.intRange("compensation", 0, 9) {
		case 0: // the compensator fails transiently: retried in a later attempt
			info := g.errorInfo(history.Transient)
			if !g.endless && attempt-g.budgetFrom >= g.maxAttempts {
				g.emit(attempt, history.AttemptFailedData{Error: info}, false)
				g.emit(attempt, history.TaskDeadLetteredData{Reason: "compensation retries exhausted", Error: info}, true)
				return !g.requeue(attempt)
			}
			next := g.at.Add(time.Millisecond + g.delay("backoff", time.Minute))
			g.emit(attempt, history.AttemptFailedData{Error: info, NextRunAt: &next}, true)
			g.runAt = next
			return g.full()
		case 1: // it fails permanently: a person must look
			info := g.errorInfo(history.Permanent)
			g.emit(attempt, history.CompensationFailedData{Position: pos, Name: stepName(pos), Error: info}, false)
			g.emit(attempt, history.TaskDeadLetteredData{Reason: "compensation failed", Error: info}, true)
			return !g.requeue(attempt)
		}
		g.emit(attempt, history.StepCompensatedData{Position: pos, Name: stepName(pos)}, true)
		g.comp.done = append(g.comp.done, pos)
		g.comp.pending = g.comp.pending[1:]
		if g.full() {
			return true
		}
	}
	g.at = g.at.Add(g.delay("delay", time.Second))
	if g.comp.reason == history.CompensateFailed {
		g.emit(attempt, history.TaskFailedData{Error: *g.comp.err, Compensated: g.comp.done}, true)
	} else {
		g.emit(attempt, history.TaskCancelledData{Reason: g.comp.reason, Compensated: g.comp.done}, true)
	}
	return true
}

func (g *gen) scheduled() {
	p := history.TaskScheduledData{
		Namespace:   g.pick("namespace", namespaces),
		TaskType:    g.pick("task_type", taskTypes),
		TypeVersion: g.src.intRange("type_version", 1, 3),
		Queue:       g.pick("queue", queues),
		Priority:    g.src.intRange("priority", -2, 2),
		Input:       g.rawOrNil("input", inputs),
		RunAt:       g.at.Add(g.delay("run_at", 10*time.Second)),
		MaxAttempts: g.maxAttempts,
	}
	if g.src.intRange("has_key", 0, 1) == 1 {
		p.IdempotencyKey = fmt.Sprintf("order-%d", g.src.intRange("key", 1, 999))
	}
	if g.src.intRange("has_trace", 0, 1) == 1 {
		p.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	}
	if g.src.intRange("has_labels", 0, 1) == 1 {
		p.Labels = map[string]string{"team": "payments", "tier": g.pick("tier", []string{"gold", "free"})}
	}
	g.runAt = p.RunAt
	g.emit(0, p, true)
}

// attempt appends one attempt and reports whether the task reached a
// terminal status (or the limit).
func (g *gen) attempt(attempt int) bool {
	g.at = g.at.Add(g.delay("delay", 2*time.Second))
	if g.at.Before(g.runAt) {
		g.at = g.runAt.Add(g.delay("claim_lag", 500*time.Millisecond))
	}
	g.epoch += int64(g.src.intRange("epoch_step", 1, 3))
	worker := g.pick("worker", workers)
	leaseExpiresAt := g.at.Add(LeaseTTL)
	g.emit(attempt, history.AttemptStartedData{WorkerID: worker, LeaseEpoch: g.epoch, LeaseExpiresAt: leaseExpiresAt}, true)
	if g.full() {
		return true
	}
	if g.comp != nil {
		return g.compensate(attempt, g.comp.reason, g.comp.err)
	}
	if g.cancelled {
		return g.compensate(attempt, history.CompensateCancelled, nil)
	}
	if g.compRequested {
		return g.compensate(attempt, history.CompensateRequested, nil)
	}
	if g.matched != nil {
		// The select woken by a signal records its case.
		g.at = g.at.Add(g.delay("delay", time.Second))
		g.emit(attempt, *g.matched, true)
		g.matched = nil
		g.receives++
		if g.full() {
			return true
		}
	}
	if g.waiting {
		// No signal came: the deadline woke the task.
		g.at = g.at.Add(g.delay("delay", time.Second))
		if g.selecting {
			// A select's timer won (its second case).
			g.emit(attempt, history.SelectMatchedData{Position: g.receives, Case: 1, Kind: history.SelectTimer}, true)
			g.selecting = false
		} else {
			g.emit(attempt, history.WaitTimedOutData{Name: signalName, Position: g.receives}, true)
		}
		g.receives++
		g.waiting = false
		if g.full() {
			return true
		}
	}
	if g.sleeping {
		g.at = g.at.Add(g.delay("delay", time.Second))
		g.emit(attempt, history.TimerFiredData{Position: g.steps}, true)
		g.steps++
		g.compensable = append(g.compensable, false)
		g.sleeping = false
		if g.full() {
			return true
		}
	}

	if g.remote != nil {
		return g.remoteAttempt(attempt)
	}

	most := g.totalSteps - g.steps
	if g.perAttempt > 0 {
		most = min(most, g.perAttempt)
	}
	for n := g.src.intRange("steps_now", 0, most); n > 0; n-- {
		g.at = g.at.Add(g.delay("delay", 5*time.Second))
		if !g.endless && len(g.events)%11 == 4 {
			// The workflow hands the step to a remote worker and waits.
			// (Drawn from nothing: earlier seeds' draws stay what they
			// were.)
			g.remote = &remoteState{pos: g.steps}
			g.dispatchRemote(attempt)
			return g.full()
		}
		if !g.endless && g.src.intRange("sleep", 0, 7) == 0 {
			// The workflow sleeps: the attempt ends, and the next one fires
			// the timer before going on.
			fireAt := g.at.Add(g.delay("sleep_for", time.Hour))
			g.emit(attempt, history.TimerStartedData{Position: g.steps, FireAt: fireAt}, true)
			g.runAt = fireAt
			g.sleeping = true
			return g.full()
		}
		if !g.endless && g.src.intRange("child", 0, 7) == 0 {
			// The workflow starts a child, and may await it: the attempt
			// ends until the child finishes.
			pos := g.children
			g.emit(attempt, history.ChildStartedData{
				Position: pos, ChildID: fmt.Sprintf("0190c0de-0000-7000-8000-%012d", pos), TaskType: "ocr_page",
				OnParentClose: g.pick("on_parent_close", []string{"", history.ParentCloseCancel, history.ParentCloseAbandon}),
			}, true)
			g.children++
			g.unfinished = append(g.unfinished, pos)
			if g.full() {
				return true
			}
			if g.src.intRange("await_child", 0, 1) == 0 {
				g.emit(attempt, history.ChildWaitStartedData{Positions: []int{pos}}, true)
				g.runAt = history.Never
				g.awaiting = true
				return g.full()
			}
			continue
		}
		if !g.endless && g.src.intRange("receive", 0, 7) == 0 {
			selecting := g.src.intRange("select", 0, 2) == 0
			if g.unconsumed > 0 {
				// A signal is there already: the receive takes it, and
				// nothing is written; a select records its case.
				seq := g.unconsumedSeq[0]
				g.unconsumed--
				g.unconsumedSeq = g.unconsumedSeq[1:]
				if selecting {
					g.emit(attempt, history.SelectMatchedData{Position: g.receives, Kind: history.SelectSignal, Name: signalName, Seq: seq}, true)
				}
				g.receives++
				if g.full() {
					return true
				}
				continue
			}
			// None yet: the attempt ends waiting for one.
			deadline := g.at.Add(g.delay("wait_for", time.Hour))
			wait := history.WaitStartedData{Name: signalName, Position: g.receives, Deadline: deadline}
			if selecting {
				// A select of the signal and a timer.
				wait.Name, wait.Select = "", &history.SelectWait{Signals: []string{signalName}}
			}
			g.emit(attempt, wait, true)
			g.runAt = deadline
			g.waiting, g.selecting = true, selecting
			return g.full()
		}
		if !g.endless && g.src.intRange("patch", 0, 7) == 0 {
			// The workflow passes a workflow.Patched call at the frontier:
			// a marker, at the next step's position, taking none.
			g.emit(attempt, history.PatchRecordedData{PatchID: fmt.Sprintf("patch-%d", g.patches), Position: g.steps}, true)
			g.patches++
			if g.full() {
				return true
			}
		}
		if !g.endless && g.src.intRange("stream", 0, 7) == 0 {
			// The step streamed: its stream closes with its completion.
			g.emit(attempt, history.StreamClosedData{Name: "tokens", Position: g.steps, Chunks: int64(g.src.intRange("chunks", 0, 1000)),
				Bytes: int64(g.src.intRange("bytes", 0, 100_000)), Outcome: history.StreamCompleted}, true)
			if g.full() {
				return true
			}
		}
		// The step declared its spend: reserved before it runs, settled
		// after; or over a budget that waits, the attempt ends. (Drawn
		// from nothing: earlier seeds' draws stay what they were.)
		budgets := []history.BudgetWindowRef{{Ref: history.BudgetRefKeyPrefix + "tenant-1"}}
		budgeted := !g.endless && len(g.events)%5 == 2
		if !g.endless && len(g.events)%17 == 9 {
			deadline := g.at.Add(time.Hour)
			g.emit(attempt, history.BudgetRefusedData{Position: g.steps, Step: stepName(g.steps), Budget: budgets[0], Action: history.BudgetWait,
				Tokens: 1000, LimitUSD: 10, SpentUSD: 10, Deadline: &deadline}, true)
			g.runAt = deadline
			g.budgetWaiting = true
			return g.full()
		}
		if budgeted {
			g.emit(attempt, history.BudgetReservedData{Position: g.steps, Step: stepName(g.steps), Budgets: budgets, Tokens: 1000, CostUSD: 0.01}, true)
			if g.full() {
				return true
			}
		}
		if !g.endless && g.src.intRange("model_wait", 0, 7) == 0 {
			// The step waited its turn under a model rate limit.
			g.emit(attempt, history.ModelLimitWaitedData{Position: g.steps, Step: stepName(g.steps), Model: "gpt-4o",
				WaitedMS: int64(g.src.intRange("waited_ms", 0, 60_000)), Tokens: int64(g.src.intRange("tokens", 0, 20_000)),
				Ahead: g.src.intRange("ahead", 0, 50)}, true)
			if g.full() {
				return true
			}
		}
		compensable := g.src.intRange("compensable", 0, 1) == 1
		g.emit(attempt, history.StepCompletedData{
			Position:    g.steps,
			Name:        stepName(g.steps),
			Output:      g.rawOrNil("output", outputs),
			Compensable: compensable,
		}, true)
		g.steps++
		g.compensable = append(g.compensable, compensable)
		if g.full() {
			return true
		}
		if budgeted {
			g.emit(attempt, history.BudgetSettledData{Position: g.steps - 1, Step: stepName(g.steps - 1), Reason: history.SettleStepCompleted,
				Budgets: budgets, Reserved: true, ReservedTokens: 1000, ReservedUSD: 0.01, Tokens: 800, CostUSD: 0.008}, true)
			if g.full() {
				return true
			}
		}
		if !g.endless && g.src.intRange("signal_running", 0, 9) == 0 {
			// A signal arrives while the attempt runs: the status stays.
			g.at = g.at.Add(g.delay("delay", time.Second))
			g.signal()
			if g.full() {
				return true
			}
			if len(g.events)%3 == 0 {
				// An update arrives too, and the attempt applies it at its
				// next call. (Drawn from nothing: earlier seeds' draws stay
				// what they were.)
				if g.update(attempt) {
					return true
				}
			}
		}
		if !g.endless && g.src.intRange("cancel_running", 0, 9) == 0 {
			// Cancelled while running: the attempt stops at its next
			// checkpoint and compensates what it did.
			g.at = g.at.Add(g.delay("delay", time.Second))
			g.cancelled = true
			g.emit(0, history.CancelRequestedData{By: "api", Reason: "user clicked cancel"}, true)
			if g.full() {
				return true
			}
			if len(g.compensablePositions()) == 0 {
				g.at = g.at.Add(g.delay("delay", time.Second))
				g.emit(attempt, history.TaskCancelledData{Reason: history.CompensateCancelled}, true)
				return true
			}
			return g.compensate(attempt, history.CompensateCancelled, nil)
		}
	}

	var end int
	if g.steps == g.totalSteps {
		// Mostly done by now; the last step's side effects can still fail.
		end = []int{endComplete, endComplete, endComplete, endRetry, endExpire, endRelease, endPermanent}[g.src.intRange("end", 0, 6)]
	} else {
		end = []int{endRetry, endRetry, endExpire, endRelease, endPermanent}[g.src.intRange("end", 0, 4)]
	}
	if g.endless && (end == endComplete || end == endPermanent) {
		end = endRetry
	}
	last := !g.endless && attempt-g.budgetFrom >= g.maxAttempts
	if last && end == endRelease {
		end = endExpire
	}

	g.at = g.at.Add(g.delay("delay", 5*time.Second))
	switch end {
	case endComplete:
		if g.src.intRange("continue", 0, 5) == 0 {
			// The workflow continues as new: this run ends, the next
			// (another history) goes on.
			g.emit(attempt, history.TaskContinuedData{NextTaskID: fmt.Sprintf("run-%d", g.src.intRange("next_run", 1, 999))}, true)
			return true
		}
		g.emit(attempt, history.TaskCompletedData{Output: g.rawOrNil("output", outputs)}, true)
		if len(g.compensablePositions()) > 0 && g.src.intRange("compensate_completed", 0, 4) == 0 && !g.full() {
			// Someone asks for the completed task's effects to be undone.
			g.at = g.at.Add(g.delay("delay", time.Hour))
			g.emit(0, history.CompensationRequestedData{By: "alice@example.com", Reason: "order refunded"}, true)
			g.runAt = g.at
			g.compRequested = true
			return g.full()
		}
		return true
	case endRetry:
		info := g.errorInfo(history.Transient)
		if last {
			g.emit(attempt, history.AttemptFailedData{Error: info}, false)
			g.emit(attempt, history.TaskDeadLetteredData{Reason: "attempts exhausted", Error: info}, true)
			return !g.requeue(attempt)
		}
		next := g.at.Add(time.Millisecond + g.delay("backoff", time.Minute))
		g.emit(attempt, history.AttemptFailedData{Error: info, NextRunAt: &next}, true)
		g.runAt = next
	case endExpire:
		// The rescuer notices some time after the lease ran out.
		if g.at.Before(leaseExpiresAt) {
			g.at = leaseExpiresAt.Add(g.delay("rescue_lag", 5*time.Second))
		}
		if last {
			g.emit(attempt, history.TaskDeadLetteredData{
				Reason: "lease expired on the last attempt",
				Error:  history.ErrorInfo{Class: history.Transient, Message: "lease expired", Kind: "lease"},
			}, true)
			return !g.requeue(attempt)
		}
		g.runAt = g.at.Add(g.delay("backoff", time.Minute))
		g.emit(attempt, history.LeaseExpiredData{WorkerID: worker, LeaseEpoch: g.epoch, NextRunAt: g.runAt}, true)
	case endRelease:
		g.emit(attempt, history.TaskReleasedData{WorkerID: worker, LeaseEpoch: g.epoch, Reason: g.pick("reason", []string{"", "shutdown", "drain"})}, true)
		g.runAt = g.at
	case endPermanent:
		info := g.errorInfo(history.Permanent)
		if len(g.compensablePositions()) > 0 {
			return g.compensate(attempt, history.CompensateFailed, &info)
		}
		if len(g.events)%3 == 0 {
			// Over a budget that fails: the step never started.
			info = history.ErrorInfo{Class: history.Permanent, Kind: "budget_exhausted", Message: "over budget", ClassifiedBy: "rule:budget_exhausted"}
			g.emit(attempt, history.BudgetRefusedData{Position: g.steps, Step: stepName(g.steps),
				Budget: history.BudgetWindowRef{Ref: history.BudgetRefNamespace}, Action: history.BudgetFail, CostUSD: 0.5, LimitUSD: 1, SpentUSD: 0.75}, false)
		}
		g.emit(attempt, history.AttemptFailedData{Error: info}, false)
		g.emit(attempt, history.TaskFailedData{Error: info}, true)
		return true
	}
	return g.full()
}

// requeue sends a dead-lettered task back to the queue, as an operator
// would, in about one history of three, and reports whether it did.
func (g *gen) requeue(attempt int) bool {
	if g.full() || g.src.intRange("requeue", 0, 2) != 0 {
		return false
	}
	g.at = g.at.Add(g.delay("requeue_lag", time.Hour))
	g.emit(0, history.TaskRequeuedData{
		By:     g.pick("operator", []string{"alice@example.com", "ops-bot"}),
		Reason: g.pick("requeue_reason", []string{"", "provider back up", "fixed the parser"}),
	}, true)
	g.runAt = g.at
	g.budgetFrom = attempt
	return true
}

// remoteStreams is what a remote step that completed wrote: nothing, or
// one stream, about half the time.
func remoteStreams(pos, n int) []history.StreamClosedData {
	if n%2 == 0 {
		return nil
	}
	return []history.StreamClosedData{{Name: "progress", Position: pos, Chunks: 3, Bytes: 42,
		Digest: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Outcome: history.StreamCompleted}}
}
