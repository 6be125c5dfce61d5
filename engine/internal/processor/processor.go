package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// DefaultLeaseTTL is how long a lease lasts without a heartbeat unless
// configured otherwise: a crashed worker's tasks are picked up again about
// this long after it stopped renewing them.
const DefaultLeaseTTL = 30 * time.Second

// Config configures a [Processor]. Zero values take the defaults named on
// each field.
type Config struct {
	Store store.Store // required
	// Notifier wakes the processor when work is ready. Optional: without it
	// the processor relies on polling.
	Notifier  *notifier.Notifier
	Namespace string   // default [store.DefaultNamespace]
	Queues    []string // default ["default"]
	Types     []store.TypeKey
	Handler   Handler // required
	// Concurrency is the number of attempts run at once. Default 10.
	Concurrency int
	// LeaseTTL is how long a lease lasts without a heartbeat. Default
	// [DefaultLeaseTTL].
	LeaseTTL time.Duration
	// HeartbeatInterval between lease renewals. Default LeaseTTL/3.
	HeartbeatInterval time.Duration
	// PollInterval between claims when nothing wakes the processor.
	// Default 1s.
	PollInterval time.Duration
	// WorkerID names this worker in leases and history. Default
	// host-pid-random.
	WorkerID string
	Logger   *slog.Logger
	// StrictPriority turns the claim's aging off: due tasks start in
	// priority order only. By default one claimed slot in eight goes to
	// the longest-waiting due task whatever its priority; strict priority
	// trades that guarantee away, so a steady flow of high-priority work
	// can starve lower priorities indefinitely.
	StrictPriority bool
	// Exclude, when set, returns the tasks the claims must leave
	// (store.TaskClaimParams.Exclude): those the worker's code cannot
	// replay. Called before each claim; it must be cheap and return at
	// most store.MaxClaimExclude ids.
	Exclude func() []uuid.UUID
}

// Processor claims tasks under leases and runs them through a [Handler]:
// a claim loop woken by notifications and polling, bounded executors, and a
// heartbeater that renews leases in one statement per tick.
type Processor struct {
	cfg      Config
	stopping chan struct{} // closed by Stop; read by the claim loop and handlers

	startOnce, stopOnce sync.Once
	baseCtx             context.Context // Start's context: cancelled only when the caller abandons the worker
	cancelWork          context.CancelCauseFunc
	loopDone            chan struct{}
	heartbeatDone       chan struct{}
	stopHeartbeat       context.CancelFunc
	executors           sync.WaitGroup // one per running attempt, added by the claim loop
	handBacks           sync.WaitGroup // one per hand-back after a conflicted outcome (handBack)
	slotFreed           chan struct{}  // size 1: wake-ups coalesce
	localDue            *localDue      // run times this worker's appends set, for the claim loop
	appender            *appender      // group commit of every append an attempt makes
	stopCancels         func()         // ends the notifier's cancel callbacks; set by Start

	claimOutage, renewOutage *service.Outage // log database trouble once per change of state

	mu sync.Mutex
	// inflight is keyed by lease, not task: a task can come back to this
	// worker under a new epoch while its old attempt is still winding down.
	inflight map[store.LeaseRef]*inflightAttempt // written by the claim loop and executors; read by the heartbeater
}

type inflightAttempt struct {
	lastRenewed time.Time               // when the last successful renewal was sent
	cancel      context.CancelCauseFunc // ends the attempt: lease lost, hard stop, done
	// requestCancel cancels the handler's context with ErrCancelRequested,
	// leaving the lease context (for irreversible steps) running.
	requestCancel context.CancelCauseFunc
}

// New validates cfg, fills in defaults, and returns a processor.
func New(cfg Config) (*Processor, error) {
	if cfg.Store == nil || cfg.Handler == nil {
		return nil, errors.New("engine: ProcessorConfig needs Store and Handler")
	}
	if len(cfg.Types) == 0 {
		return nil, errors.New("engine: ProcessorConfig.Types is empty: register at least one task type")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = store.DefaultNamespace
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = []string{"default"}
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 10
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = cfg.LeaseTTL / 3
	}
	if cfg.HeartbeatInterval >= cfg.LeaseTTL {
		return nil, errors.Newf("engine: HeartbeatInterval %s must be shorter than LeaseTTL %s", cfg.HeartbeatInterval, cfg.LeaseTTL)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = NewWorkerID()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Processor{
		cfg:       cfg,
		stopping:  make(chan struct{}),
		slotFreed: make(chan struct{}, 1),
		localDue:  newLocalDue(),
		// An attempt holds its slot until its outcome is written, and has
		// at most one append queued: the queue never holds more than
		// Concurrency appends.
		appender:    newAppender(cfg.Store, cfg.Concurrency, cfg.Logger),
		inflight:    map[store.LeaseRef]*inflightAttempt{},
		claimOutage: service.NewOutage(cfg.Logger, "processor: claim"),
		renewOutage: service.NewOutage(cfg.Logger, "processor: renew leases"),
	}, nil
}

// NewWorkerID returns an id naming this process: host, pid and a random
// suffix, so two workers in one process differ.
func NewWorkerID() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// WorkerID returns the id this processor records as lease owner.
func (p *Processor) WorkerID() string { return p.cfg.WorkerID }

// Start begins claiming and running tasks. It returns at once.
//
// Cancelling ctx abandons all work as a crash would: attempts are cancelled
// and nothing more is written, so their tasks are rescued once their leases
// expire. Use [Processor.Stop] to shut down gracefully.
func (p *Processor) Start(ctx context.Context) error {
	select {
	case <-p.stopping:
		return errors.New("engine: processor already stopped")
	default:
	}
	started := false
	p.startOnce.Do(func() {
		started = true
		p.baseCtx = ctx
		var workCtx context.Context
		workCtx, p.cancelWork = context.WithCancelCause(ctx)
		var hbCtx context.Context
		hbCtx, p.stopHeartbeat = context.WithCancel(ctx)
		p.loopDone, p.heartbeatDone = make(chan struct{}), make(chan struct{})
		p.appender.start(ctx)
		if p.cfg.Notifier != nil {
			// Until every attempt has ended, not just until claiming stops:
			// attempts finishing during a graceful stop still hear of cancels.
			p.stopCancels = p.cfg.Notifier.OnCancel(p.requestCancel)
		}
		go p.claimLoop(workCtx)
		go p.heartbeatLoop(hbCtx)
	})
	if !started {
		return errors.New("engine: processor already started")
	}
	return nil
}

// Stop shuts down gracefully: it stops claiming, lets in-flight attempts
// reach their next checkpoint (a handler releases its task there), and waits
// for them until ctx is done. Then it cancels what still runs, waits a short
// grace period for those attempts to release their tasks, and returns
// ctx.Err(). Stop is idempotent and safe before Start.
func (p *Processor) Stop(ctx context.Context) error {
	return p.stop(ctx, false)
}

// StopAndCancel shuts down at once: it stops claiming and cancels in-flight
// attempts, which release their tasks, and waits for them until ctx is done.
func (p *Processor) StopAndCancel(ctx context.Context) error {
	return p.stop(ctx, true)
}

func (p *Processor) stop(ctx context.Context, cancelNow bool) error {
	var err error
	p.stopOnce.Do(func() {
		close(p.stopping)
		if p.loopDone == nil { // never started
			return
		}
		// Claiming stops first: a claim in flight when the stop began
		// finishes before attempts are cancelled, so it cannot take back a
		// task an attempt is just handing back.
		select {
		case <-p.loopDone:
		case <-ctx.Done():
			// A claim is stuck on the database; it gives up after its
			// timeout, and the loop ends then.
			err = ctx.Err()
			p.cancelWork(service.ErrStopped)
			<-p.loopDone
		}
		if cancelNow {
			p.cancelWork(service.ErrStopped)
		}
		drained := make(chan struct{})
		go func() { p.executors.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-ctx.Done():
			err = ctx.Err()
			p.cancelWork(service.ErrStopped)
			select {
			case <-drained:
			case <-time.After(5 * time.Second):
				p.cfg.Logger.Warn("processor: attempts still running after cancellation; leaving them to lease expiry")
			}
		}
		p.cancelWork(service.ErrStopped)
		if p.stopCancels != nil {
			p.stopCancels()
		}
		p.appender.stop()
		p.handBacks.Wait() // bounded by handBackTimeout
		p.stopHeartbeat()
		<-p.heartbeatDone
	})
	return err
}

// execute runs one attempt on a goroutine of its own and queues its outcome
// for the next group commit. The attempt keeps its slot, and its lease is
// renewed, until the outcome is written; the goroutine does not wait for
// that. A goroutine per attempt rather than a fixed pool: pooled
// goroutines parked between attempts would have their stacks shrunk by
// every GC and grown again by the next attempt, and an idle worker holds no
// goroutines for the GC to scan. The stack is grown once, first (see
// [growAttemptStack]).
func (p *Processor) execute(a *Attempt) {
	growAttemptStack()
	defer p.executors.Done()
	ref := store.LeaseRef{TaskID: a.Task.ID, Epoch: a.state.Lease.Epoch}
	payloads, err := p.handle(a.ctx, a)
	switch {
	case errors.Is(err, ErrReleased):
		// A stopping worker hands the task back only once it claims no
		// more: a claim still in flight could otherwise take it right back.
		select {
		case <-p.stopping:
			<-p.loopDone
		default:
		}
		payloads = []history.Payload{history.TaskReleasedData{
			WorkerID: p.cfg.WorkerID, LeaseEpoch: a.state.Lease.Epoch, Reason: "worker shutting down",
		}}
	case errors.Is(err, ErrEnded):
		// Written already, with what ended it (a continue as new).
		p.release(ref)
		return
	case err != nil:
		if p.baseCtx.Err() == nil {
			p.cfg.Logger.Warn("processor: attempt abandoned; the task is rescued when its lease expires",
				"task_id", a.Task.ID, "attempt", a.state.Attempt, service.ErrAttr(err))
		}
		p.release(ref)
		return
	}
	// Record the outcome even when the attempt context was cancelled by a
	// stop: only abandoning the whole worker (baseCtx) drops it.
	params := a.appendParams(payloads)
	p.appender.appendAsync(p.baseCtx, params, func(res store.AppendResult) {
		if res.Err != nil && p.baseCtx.Err() == nil {
			p.cfg.Logger.Warn("processor: record attempt outcome", "task_id", a.Task.ID, "attempt", a.state.Attempt, service.ErrAttr(res.Err))
			if errors.Is(res.Err, store.ErrConflict) && !failed(payloads) {
				// Off the appender's flusher, which must not block; the
				// slot and the lease are kept until it is done.
				p.handBacks.Go(func() {
					p.handBack(params, res.Err)
					p.release(ref)
				})
				return
			}
		}
		if res.Err == nil && waiting(res.State.Status) {
			// A retry, a durable timer or a hand-back: this worker knows
			// when the task is due again before any claim could tell it.
			p.localDue.arm(res.State.RunAt)
		}
		p.release(ref)
	})
}

// handBackTries bounds the hand-back's tries: each is a read of the log
// and a fenced append onto it, and each loses only to another writer's
// append in between.
const handBackTries = 3

// handBackTimeout bounds the hand-back, which holds the attempt's slot
// and its lease while it runs, and which Stop waits for.
const handBackTimeout = 5 * time.Second

// failed says whether an attempt's outcome is a failure (a retry with its
// backoff, or the task's end): such an outcome is not handed back, which
// would retry at once without spending an attempt; its conflict is left to
// the rescuer, which counts the attempt.
func failed(payloads []history.Payload) bool {
	for _, pl := range payloads {
		switch pl.(type) {
		case history.AttemptFailedData, history.TaskFailedData, history.TaskDeadLetteredData:
			return true
		}
	}
	return false
}

// handBack hands the task back (task_released, due at once, no retry
// spent) when its attempt's outcome p could not be written because its
// log moved on: other writers kept appending to it through every rebase
// (a parent's children ending one after another), or appended what the
// attempt's events cannot follow. Left alone, the task would stay running
// until its lease expired (DefaultLeaseTTL, 30 s); handed back, its next
// attempt replays what the log holds and goes on. Only a log that moved
// is handed back: a conflict with no events after the outcome's state is
// some other refusal, left to the rescuer as before. The hand-back is
// appended onto the log as it is now, fenced by the attempt's lease, so
// it is refused once the lease has passed to a rescue; then, or when it
// loses every try, the rescuer sees to the task.
func (p *Processor) handBack(params *store.EventAppendParams, cause error) {
	ctx, cancel := context.WithTimeout(p.baseCtx, handBackTimeout)
	defer cancel()
	id, state := params.TaskID, params.State
	release := []history.Payload{history.TaskReleasedData{WorkerID: p.cfg.WorkerID, LeaseEpoch: params.Epoch,
		Reason: "its outcome could not be recorded: " + cause.Error()}}
	var err error
	for try := range handBackTries {
		events, lerr := p.cfg.Store.EventList(ctx, &store.EventListParams{After: map[uuid.UUID]int64{id: state.LastSeq}})
		if lerr != nil {
			err = lerr
			break
		}
		if try == 0 && len(events[id]) == 0 {
			return // the log did not move: not a conflict a hand-back answers
		}
		if state, err = history.ApplyAll(state, events[id]); err != nil || state.Status != history.StatusRunning {
			break
		}
		_, err = p.cfg.Store.EventAppend(ctx, &store.EventAppendParams{TaskID: id, State: state,
			Epoch: params.Epoch, Attempt: params.Attempt, Payloads: release})
		if !errors.Is(err, store.ErrConflict) {
			break
		}
	}
	switch {
	case err != nil:
		p.cfg.Logger.Warn("processor: could not hand the task back; it is rescued when its lease expires",
			"task_id", id, "attempt", params.Attempt, service.ErrAttr(err))
	case state.Status != history.StatusRunning:
		p.cfg.Logger.Info("processor: no hand-back: the task is no longer running under this attempt",
			"task_id", id, "attempt", params.Attempt, "status", state.Status)
	default:
		p.cfg.Logger.Info("processor: handed the task back after its outcome conflicted", "task_id", id, "attempt", params.Attempt)
	}
}

// waiting says whether a task of status st waits to be claimed.
func waiting(st history.Status) bool {
	return st == history.StatusPending || st == history.StatusRetrying
}

// requestCancel cancels the handler context of the attempts of task id
// this worker runs, with cause ErrCancelRequested.
func (p *Processor) requestCancel(id uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ref, in := range p.inflight {
		if ref.TaskID == id {
			in.requestCancel(ErrCancelRequested)
		}
	}
}

// release ends an attempt's hold on its slot and lease renewal, and wakes a
// claim loop waiting for a free slot.
func (p *Processor) release(ref store.LeaseRef) {
	p.mu.Lock()
	if in := p.inflight[ref]; in != nil {
		in.requestCancel(nil)
		in.cancel(nil)
		delete(p.inflight, ref)
	}
	p.mu.Unlock()
	select {
	case p.slotFreed <- struct{}{}:
	default:
	}
}

// handle runs the handler, turning a panic into an error so one bad task
// cannot take the worker down.
func (p *Processor) handle(ctx context.Context, a *Attempt) (payloads []history.Payload, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.Newf("handler panicked: %v", r)
		}
	}()
	return p.cfg.Handler.HandleAttempt(ctx, a)
}

// sleepUnlessStopped waits d; it reports false when the processor stops or
// ctx ends first.
func (p *Processor) sleepUnlessStopped(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.stopping:
		return false
	case <-ctx.Done():
		return false
	}
}

// attemptStackFrame is the frame growAttemptStack takes: with the frames
// below it, the goroutine's stack grows to 32 KiB in one step. 16 KiB, the
// size before step gates (budgets, model limits), no longer held a step:
// the gate's frames, under the executor's and the workflow body's, grew
// every attempt's stack a second time, copying some 16 KiB of frames
// (11% of the worker's CPU in the drain benchmark).
const attemptStackFrame = 28 << 10

// growAttemptStack grows a fresh attempt goroutine's stack to 16 KiB before
// the attempt runs. The runtime's adaptive initial stack follows the mean
// of all goroutines, most of them small, so an attempt (the executor's
// frames, the workflow body, JSON decoding of its input) outgrew it two or
// three times, each growth copying a deep stack and adjusting every frame:
// 15% of a worker's CPU in the drain benchmark. Grown here, at the top of
// the goroutine, it is one copy of one frame. Measured with `cairn bench
// throughput -n 100000`, three runs each: 41-42 µs of worker CPU per task
// before, 36-38 after; runtime.newstack from 15% of the profile to 4%.
//
//go:noinline
func growAttemptStack() byte {
	var frame [attemptStackFrame]byte
	return lastByte(frame[:])
}

// lastByte reads the frame so the compiler keeps it.
//
//go:noinline
func lastByte(b []byte) byte { return b[len(b)-1] }
