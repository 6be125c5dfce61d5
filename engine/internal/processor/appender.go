package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// appender group-commits a processor's appends: attempts hand it their
// events and wait; a few flusher goroutines each take everything queued (up
// to maxAppendBatch) and write it in one EventAppendMany statement. Under
// load, batches grow by themselves while a flush is in flight; when idle, a
// lone append is written at once, with no timer to wait for. So an outcome is
// durable and visible within one round trip plus whatever flush is ahead of
// it, not after a fixed interval.
type appender struct {
	store  store.Store
	logger *slog.Logger
	outage *service.Outage // database trouble, logged once per change of state
	ctx    context.Context // the worker's base context, set by start: ends every write and wait
	reqs   chan *appendReq // written by attempts; read by flushers; never closed
	quit   chan struct{}   // closed by stop: flushers write what is queued, then exit
	done   chan struct{}   // closed when every flusher has exited
	wg     sync.WaitGroup
}

type appendReq struct {
	params *store.EventAppendParams
	// Either done or then is set. done has size 1, so the flusher never
	// blocks on it; then runs on the flusher and must not block.
	done chan store.AppendResult
	then func(store.AppendResult)
}

func (r *appendReq) finish(res store.AppendResult) {
	if r.then != nil {
		r.then(res)
		return
	}
	r.done <- res
}

const (
	// maxAppendBatch bounds one statement: large enough to amortize the
	// round trip and commit, small enough to keep its latency low.
	maxAppendBatch = 1000
	// appendFlushers write batches concurrently, so one slow commit does not
	// hold every outcome back.
	appendFlushers = 2
)

func newAppender(s store.Store, queue int, logger *slog.Logger) *appender {
	return &appender{store: s, logger: logger, outage: service.NewOutage(logger, "appender"),
		reqs: make(chan *appendReq, queue), quit: make(chan struct{}), done: make(chan struct{})}
}

// start runs the flushers until stop. ctx bounds every write: cancelling it
// is abandoning the worker, after which nothing more is written.
func (a *appender) start(ctx context.Context) {
	a.ctx = ctx
	for range appendFlushers {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.flushLoop(ctx)
		}()
	}
	go func() {
		a.wg.Wait()
		close(a.done)
	}()
}

// stop waits for the flushers to write what was queued. An append made
// after stop fails with [service.ErrStopped] instead of being written.
func (a *appender) stop() {
	close(a.quit)
	<-a.done
	// An asynchronous append queued as the last flusher left is not
	// written; its callback still hears so.
	for {
		select {
		case req := <-a.reqs:
			req.finish(store.AppendResult{State: req.params.State, Err: service.ErrStopped})
		default:
			return
		}
	}
}

// append queues p and waits for its result. A task has at most one append in
// flight: its attempt waits for each before making the next.
func (a *appender) append(ctx context.Context, p *store.EventAppendParams) (history.State, error) {
	req := &appendReq{params: p, done: make(chan store.AppendResult, 1)}
	select {
	case <-a.quit:
		return p.State, service.ErrStopped
	default:
	}
	select {
	case a.reqs <- req:
	case <-ctx.Done():
		return p.State, ctx.Err()
	case <-a.done:
		return p.State, service.ErrStopped
	}
	// Once queued, the write happens (or fails) regardless of ctx: waiting
	// for it keeps the attempt's view of its state exact. Only abandoning
	// the worker ends the wait.
	select {
	case res := <-req.done:
		return res.State, res.Err
	case <-a.ctx.Done():
		return p.State, a.ctx.Err()
	case <-a.done:
		// Queued too late for the last flush.
		select {
		case res := <-req.done:
			return res.State, res.Err
		default:
			return p.State, service.ErrStopped
		}
	}
}

// appendAsync queues p and returns; then gets the result once p is written
// or has failed. then runs on a flusher goroutine, or on the caller's when p
// cannot be queued (stopped, or ctx done), and must return quickly.
func (a *appender) appendAsync(ctx context.Context, p *store.EventAppendParams, then func(store.AppendResult)) {
	req := &appendReq{params: p, then: then}
	select {
	case <-a.quit:
		then(store.AppendResult{State: p.State, Err: service.ErrStopped})
		return
	case <-a.done:
		then(store.AppendResult{State: p.State, Err: service.ErrStopped})
		return
	default:
	}
	select {
	case a.reqs <- req:
	case <-ctx.Done():
		then(store.AppendResult{State: p.State, Err: ctx.Err()})
	case <-a.done:
		then(store.AppendResult{State: p.State, Err: service.ErrStopped})
	}
}

func (a *appender) flushLoop(ctx context.Context) {
	batch := make([]*appendReq, 0, maxAppendBatch)
	params := make([]*store.EventAppendParams, 0, maxAppendBatch)
	for {
		var first *appendReq
		select {
		case first = <-a.reqs:
		case <-ctx.Done():
			return
		case <-a.quit:
			// Write what is still queued, then exit.
			select {
			case first = <-a.reqs:
			default:
				return
			}
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < maxAppendBatch {
			select {
			case req := <-a.reqs:
				batch = append(batch, req)
			default:
				break fill
			}
		}
		// In task id order, as heartbeats lock rows, so the two rarely
		// deadlock.
		slices.SortFunc(batch, func(x, y *appendReq) int {
			return bytes.Compare(x.params.TaskID[:], y.params.TaskID[:])
		})
		params = params[:0]
		for _, req := range batch {
			params = append(params, req.params)
		}
		// Heartbeats lock the same rows in another order and can deadlock
		// with a batch; PostgreSQL aborts one of the two, and running the
		// batch again is all it takes.
		results, err := a.write(ctx, params)
		if err != nil {
			for _, req := range batch {
				req.finish(store.AppendResult{State: req.params.State, Err: err})
			}
			continue
		}
		// Answer what was written at once; appends that lost a race to a
		// cancel request wait for one more round.
		var conflicted []int
		for i, req := range batch {
			if errors.Is(results[i].Err, store.ErrConflict) && params[i].Epoch != 0 {
				conflicted = append(conflicted, i)
				continue
			}
			req.finish(results[i])
		}
		// A rebased append can lose the race again (children ending one
		// after another write into their parent's log): a few rounds.
		for round := 0; len(conflicted) > 0 && round < maxRebaseRounds; round++ {
			a.rebaseConflicts(ctx, params, results, conflicted)
			still := conflicted[:0]
			for _, i := range conflicted {
				if errors.Is(results[i].Err, store.ErrConflict) && round+1 < maxRebaseRounds {
					still = append(still, i)
					continue
				}
				batch[i].finish(results[i])
			}
			conflicted = still
		}
	}
}

// write runs one EventAppendMany. Heartbeats lock the same rows in another
// order and can deadlock with a batch; PostgreSQL aborts one of the two,
// and running the batch again is all it takes. While the database is out
// of reach (restarting, a network blip), the batch is tried again with
// backoff for up to maxOutageRetry, so outcomes finished meanwhile are
// kept rather than redone after their leases expire. Trying again is safe
// even if a try committed before its connection dropped: the appends are
// fenced by sequence and epoch, so a second write of the same events is
// refused, never doubled.
//
// A try whose connection dropped may have committed all the same (the
// commit reached the database, its answer did not reach us: a primary
// failing over). The next try is then refused, and the refusal is checked
// against the log: an append whose events are there already, as its own
// (same attempt, same payloads, in the seqs it expected), succeeded, and
// its attempt goes on rather than being abandoned to the rescuer.
func (a *appender) write(ctx context.Context, params []*store.EventAppendParams) ([]store.AppendResult, error) {
	results, err := a.store.EventAppendMany(ctx, params)
	for try := 1; try < 5 && errors.Is(err, store.ErrRetryable); try++ {
		results, err = a.store.EventAppendMany(ctx, params)
	}
	uncertain := false
	deadline := time.Now().Add(maxOutageRetry)
	for wait := time.Duration(0); service.Unavailable(err) && time.Now().Before(deadline); {
		uncertain = true
		a.outage.Failed(err)
		wait = service.NextBackoff(wait, service.WorkBackoff)
		if !service.Sleep(ctx, wait) {
			return results, err
		}
		results, err = a.store.EventAppendMany(ctx, params)
	}
	if err == nil {
		a.outage.OK()
		if uncertain {
			a.recognizeOwnCommits(ctx, params, results)
		}
	}
	return results, err
}

// recognizeOwnCommits turns the refusals among results that an earlier,
// unanswered try of the same appends caused into the successes they are
// (see write). results are updated in place.
func (a *appender) recognizeOwnCommits(ctx context.Context, params []*store.EventAppendParams, results []store.AppendResult) {
	var refused []int
	var ids []uuid.UUID
	for i, r := range results {
		if errors.Is(r.Err, store.ErrConflict) || errors.Is(r.Err, store.ErrFenced) {
			refused, ids = append(refused, i), append(ids, params[i].TaskID)
		}
	}
	if len(refused) == 0 {
		return
	}
	events, err := a.store.EventList(ctx, store.EventListAll("", ids...))
	if err != nil {
		return // the refusals stand: the rescuer will see to those tasks
	}
	for _, i := range refused {
		if state, ok := committedAlready(params[i], events[params[i].TaskID]); ok {
			a.logger.Info("appender: an append whose commit went unanswered was committed; its attempt goes on",
				slog.String("task_id", params[i].TaskID.String()), slog.Int64("seq", params[i].State.LastSeq+1))
			results[i] = store.AppendResult{State: state}
		}
	}
}

// committedAlready reports whether p's events are in the task's log
// (events, whole) right after p.State: the same payloads, of p's attempt,
// at the seqs p expected, under p's lease. Only the holder of p's lease
// writes an attempt's events, so finding them there means p's own write
// committed. It returns the state after them.
//
// The lease matters: a claim lost in a failover leaves its attempt running
// while the same worker claims the task again, and the new attempt has the
// same number and writes the same steps, under another epoch.
func committedAlready(p *store.EventAppendParams, events []history.Event) (history.State, bool) {
	from, n := p.State.LastSeq, int64(len(p.Payloads))
	if n == 0 || int64(len(events)) < from+n || leaseEpochAt(events[:from]) != p.Epoch {
		return p.State, false
	}
	state := p.State
	for k, e := range events[from : from+n] {
		if e.Seq != from+int64(k)+1 || e.Attempt != p.Attempt || !samePayload(e.Data, p.Payloads[k]) {
			return p.State, false
		}
		var err error
		if state, err = history.Apply(state, e); err != nil {
			return p.State, false
		}
	}
	return state, true
}

// leaseEpochAt is the epoch of the last attempt_started in events: the
// lease the next events of a running attempt are written under (0 if none).
func leaseEpochAt(events []history.Event) int64 {
	for i := len(events) - 1; i >= 0; i-- {
		if started, ok := events[i].Data.(history.AttemptStartedData); ok {
			return started.LeaseEpoch
		}
	}
	return 0
}

// samePayload reports whether two payloads are the same event: the same
// type and the same JSON value. Values, not bytes: PostgreSQL's jsonb keeps
// an object's keys in an order of its own, so an output read back is not
// the bytes that were written.
func samePayload(a, b history.Payload) bool {
	if a == nil || b == nil || a.EventType() != b.EventType() {
		return false
	}
	va, okA := jsonValue(a)
	vb, okB := jsonValue(b)
	return okA && okB && reflect.DeepEqual(va, vb)
}

// jsonValue is p's JSON decoded into maps, slices and json.Numbers.
func jsonValue(p history.Payload) (any, bool) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	return v, dec.Decode(&v) == nil
}

// maxRebaseRounds bounds how often an attempt's append is rebased onto
// others' appends before its conflict stands.
const maxRebaseRounds = 5

// maxOutageRetry bounds how long an outcome waits for the database to come
// back: about a lease, after which the task is rescued and runs again
// anyway.
const maxOutageRetry = 30 * time.Second

// rebaseConflicts retries the attempt appends at the conflicted indexes,
// which lost a race to a cancel request, a signal or a child's end: a
// client appends cancel_requested or signal_received, and a child's
// terminal append child_finished, to a running task without its lease, which moves the log past the attempt's expected seq. Such an
// append is replayed onto the new events (one query for all of them, of the events after each append's state) and written again, so the attempt's work is
// kept and it learns of the cancel from the state it gets back (a
// completion does not stand over a cancel: see releaseCancelledCompletion). results are
// updated in place; an append that cannot be rebased keeps its conflict.
func (a *appender) rebaseConflicts(ctx context.Context, params []*store.EventAppendParams, results []store.AppendResult, conflicted []int) {
	after := make(map[uuid.UUID]int64, len(conflicted))
	for _, i := range conflicted {
		p := params[i]
		if seq, ok := after[p.TaskID]; !ok || p.State.LastSeq < seq {
			after[p.TaskID] = p.State.LastSeq
		}
	}
	events, err := a.store.EventList(ctx, &store.EventListParams{After: after})
	if err != nil {
		return
	}
	var retry []*store.EventAppendParams
	var at []int
	for _, i := range conflicted {
		rebased, ok := rebaseOntoRequests(params[i], events[params[i].TaskID])
		if !ok {
			continue
		}
		retry, at = append(retry, rebased), append(at, i)
	}
	if len(retry) == 0 {
		return
	}
	again, err := a.write(ctx, retry)
	if err != nil {
		return // the original conflicts stand
	}
	for k, i := range at {
		results[i] = again[k]
	}
}

// rebaseOntoRequests returns p moved onto the task's events after p.State
// (events is the task's log, whole or after p.State), if those are only the appends other
// writers make to a running task without its lease (cancel_requested,
// signal_received, child_finished, and task_forked, which changes nothing
// the attempt depends on) and p's events can follow them, and false
// otherwise.
//
// A wait_started for a signal that came meanwhile would leave the task
// waiting for what it has: it becomes task_released instead, so the task is
// due at once and its next attempt's receive takes the signal. A
// wait_timed_out cannot follow a signal of its name (the signal came
// first, so the receive takes it): that append keeps its conflict, and the
// attempt is retried.
func rebaseOntoRequests(p *store.EventAppendParams, events []history.Event) (*store.EventAppendParams, bool) {
	since, ok := eventsAfter(events, p.State.LastSeq)
	if !ok {
		return nil, false
	}
	signalled := map[string]bool{}
	finished := map[int]bool{}
	remote := map[int]bool{} // remote steps whose outcome came
	cancelled := false
	for _, e := range since {
		switch d := e.Data.(type) {
		case history.CancelRequestedData:
			cancelled = true
		case history.SignalReceivedData:
			signalled[d.Name] = true
		case history.ChildFinishedData:
			finished[d.Position] = true
		case history.RemoteStepCompletedData:
			remote[d.Position] = true
		case history.RemoteStepFailedData:
			remote[d.Position] = true
		case history.TaskForkedData:
			// A fork made of the task meanwhile: nothing to take in.
		default:
			return nil, false
		}
	}
	// All at once: Apply copies a parent's children for each child's end,
	// ApplyAll once for the lot.
	state, err := history.ApplyAll(p.State, since)
	if err != nil {
		return nil, false
	}
	rebased := *p
	rebased.State = state
	rebased.Payloads = releaseSignalledWait(p, signalled)
	rebased.Payloads = releaseFinishedChildWait(p, rebased.Payloads, finished)
	rebased.Payloads = releaseFinishedRemoteWait(p, rebased.Payloads, remote)
	if cancelled {
		rebased.Payloads = releaseCancelledCompletion(p, rebased.Payloads)
	}
	if !canFollow(state, rebased.Attempt, rebased.Payloads) {
		return nil, false
	}
	return &rebased, true
}

// releaseCancelledCompletion returns payloads with a final task_completed,
// or a final wait (wait_started, timer_started, child_wait_started),
// replaced by task_released: a cancel recorded before the task's terminal
// event wins (see docs/guarantees.md, "Race with completion"). The steps
// the attempt finished are kept; the task is due at once, and its next
// attempt compensates them and ends cancelled.
func releaseCancelledCompletion(p *store.EventAppendParams, payloads []history.Payload) []history.Payload {
	n := len(payloads)
	if n == 0 {
		return payloads
	}
	reason := ""
	switch payloads[n-1].(type) {
	case history.TaskCompletedData:
		reason = "cancel requested as the task completed: it compensates instead"
	case history.WaitStartedData, history.TimerStartedData, history.ChildWaitStartedData, history.RemoteWaitStartedData:
		// Parked at the wait's end (or never), the task would not see
		// its cancel until then: it is due at once instead.
		reason = "cancel requested as the task began to wait: it compensates instead"
	default:
		return payloads
	}
	out := append([]history.Payload(nil), payloads[:n-1]...)
	return append(out, history.TaskReleasedData{
		WorkerID: p.State.Lease.Owner, LeaseEpoch: p.State.Lease.Epoch, Reason: reason,
	})
}

// eventsAfter returns the events after seq of a task's log given whole or
// from after seq on, and false when they do not follow seq (a whole log
// shorter than the state).
func eventsAfter(events []history.Event, seq int64) ([]history.Event, bool) {
	i := 0
	for i < len(events) && events[i].Seq <= seq {
		i++
	}
	if (i > 0 && events[i-1].Seq != seq) || (i < len(events) && events[i].Seq != seq+1) {
		return nil, false
	}
	return events[i:], true
}

// releaseSignalledWait returns p's payloads with a final wait_started for
// one of the signals named in signalled (its name, or a select's names)
// replaced by task_released.
func releaseSignalledWait(p *store.EventAppendParams, signalled map[string]bool) []history.Payload {
	n := len(p.Payloads)
	if n == 0 {
		return p.Payloads
	}
	wait, ok := p.Payloads[n-1].(history.WaitStartedData)
	if !ok {
		return p.Payloads
	}
	name, found := wait.Name, signalled[wait.Name]
	if wait.Select != nil {
		// A select's wait, for any of its names.
		found = false
		for _, n := range wait.Select.Signals {
			if signalled[n] {
				name, found = n, true
				break
			}
		}
	}
	if !found {
		return p.Payloads
	}
	out := append([]history.Payload(nil), p.Payloads[:n-1]...)
	return append(out, history.TaskReleasedData{
		WorkerID: p.State.Lease.Owner, LeaseEpoch: p.State.Lease.Epoch,
		Reason: fmt.Sprintf("signal %q arrived as its receive began to wait", name),
	})
}

// releaseFinishedChildWait returns payloads with a final
// child_wait_started (or a select's wait_started) for a child that
// finished meanwhile (in finished) replaced by task_released: the task is due at once, and its next
// attempt finds the child's outcome.
func releaseFinishedChildWait(p *store.EventAppendParams, payloads []history.Payload, finished map[int]bool) []history.Payload {
	n := len(payloads)
	if n == 0 || len(finished) == 0 {
		return payloads
	}
	var positions []int
	switch wait := payloads[n-1].(type) {
	case history.ChildWaitStartedData:
		positions = wait.Positions
	case history.WaitStartedData:
		if wait.Select != nil {
			positions = wait.Select.Children // a select's wait, for any of its children
		}
	}
	for _, pos := range positions {
		if finished[pos] {
			out := append([]history.Payload(nil), payloads[:n-1]...)
			return append(out, history.TaskReleasedData{
				WorkerID: p.State.Lease.Owner, LeaseEpoch: p.State.Lease.Epoch,
				Reason: fmt.Sprintf("child %d finished as the workflow began to await it", pos),
			})
		}
	}
	return payloads
}

// releaseFinishedRemoteWait returns payloads with a final
// remote_wait_started replaced by task_released when the outcome of one
// of the remote steps it awaits came meanwhile: the task is due at once,
// and its next attempt takes the outcome in.
func releaseFinishedRemoteWait(p *store.EventAppendParams, payloads []history.Payload, done map[int]bool) []history.Payload {
	n := len(payloads)
	if n == 0 || len(done) == 0 {
		return payloads
	}
	wait, ok := payloads[n-1].(history.RemoteWaitStartedData)
	if !ok {
		return payloads
	}
	for _, pos := range wait.Positions {
		if done[pos] {
			out := append([]history.Payload(nil), payloads[:n-1]...)
			return append(out, history.TaskReleasedData{
				WorkerID: p.State.Lease.Owner, LeaseEpoch: p.State.Lease.Epoch,
				Reason: fmt.Sprintf("remote step %d ended as the workflow began to await it", pos),
			})
		}
	}
	return payloads
}

// canFollow reports whether payloads, appended for attempt, can follow
// state. (plan.Append, tried in its place, refused the rebased appends of
// a cancel race and left TestCancelDuringStepTwoOfFour hanging: it plans
// the driver's write, with the driver's checks; this checks only that the
// events can follow.)
func canFollow(state history.State, attempt int, payloads []history.Payload) bool {
	events := make([]history.Event, len(payloads))
	for i, payload := range payloads {
		events[i] = history.Event{Seq: state.LastSeq + int64(i) + 1, At: state.UpdatedAt, Attempt: attempt, Data: payload}
	}
	_, err := history.ApplyAll(state, events)
	return err == nil
}
