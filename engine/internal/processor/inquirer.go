package processor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
)

// InquiryHandler answers one inquiry a worker took (store.Inquiry): the
// SDK's, which replays the task and writes the answer itself
// (InquiryAnswer through its payload stage). It runs on a goroutine of
// its own, ctx ending when the inquiry's deadline passes or the worker
// stops; its error is logged, and the inquiry is left to its hold's end
// (another worker may take it then) or its deadline.
type InquiryHandler func(ctx context.Context, in *store.Inquiry) error

// InquirerConfig configures an [Inquirer].
type InquirerConfig struct {
	Store     store.Store // required
	Notifier  *notifier.Notifier
	Namespace string          // required
	Types     []store.TypeKey // the types whose inquiries it takes; none: it takes none
	// Kinds are the kinds it takes; none: every kind.
	Kinds    []string
	Handler  InquiryHandler // required
	WorkerID string         // required
	// Concurrency bounds the inquiries answered at once. Default
	// [DefaultInquiryConcurrency].
	Concurrency int
	// PollInterval between takes when no notification arrives. Default
	// 1s; the notifier's fallback pace while notifications are lost, and
	// at least 1s while they arrive (see liveInquiryPoll).
	PollInterval time.Duration
	// Lease is how long a take holds an inquiry for this worker before
	// another may take it. Default [DefaultInquiryLease].
	Lease  time.Duration
	Logger *slog.Logger
}

// DefaultInquiryConcurrency is [InquirerConfig.Concurrency]'s default: a
// worker answers up to 4 inquiries at once, beside its tasks' slots.
const DefaultInquiryConcurrency = 4

// liveInquiryPoll is the longest an inquirer waits between takes while
// its notifier is live, however short PollInterval is: every inquiry is
// announced, so the poll only catches one whose notification was lost.
// A worker's short PollInterval is for its claims (work a clock makes
// due, which nothing announces); at 20 ms an idle worker's inquiry takes
// were as many statements as its claims (issue 39's scale-out runs).
const liveInquiryPoll = time.Second

// DefaultInquiryLease is [InquirerConfig.Lease]'s default: 30s.
const DefaultInquiryLease = 30 * time.Second

// Inquirer is a worker's service beside its claim loop that answers
// inquiries (queries, updates' validators) about tasks of its types: it
// takes pending ones when the notifier says some were made (polling as
// well), and answers each through its handler, a bounded number at once.
// It uses no task slot and holds no task's lease: an inquiry reads a
// task's history; what it writes, it writes fenced on its own.
type Inquirer struct {
	cfg InquirerConfig
	svc service.Base
}

// NewInquirer returns an inquirer; it does nothing until started.
func NewInquirer(cfg InquirerConfig) (*Inquirer, error) {
	switch {
	case cfg.Store == nil || cfg.Handler == nil:
		return nil, errors.New("engine: InquirerConfig needs a Store and a Handler")
	case cfg.Namespace == "" || cfg.WorkerID == "":
		return nil, errors.New("engine: InquirerConfig needs a Namespace and a WorkerID")
	case cfg.Concurrency < 0 || cfg.PollInterval < 0 || cfg.Lease < 0:
		return nil, errors.New("engine: InquirerConfig's Concurrency, PollInterval and Lease must not be negative")
	case len(cfg.Types) > store.MaxInquiryTypes:
		return nil, errors.Newf("engine: an inquirer takes inquiries of at most %d types, not %d", store.MaxInquiryTypes, len(cfg.Types))
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultInquiryConcurrency
	}
	cfg.Concurrency = min(cfg.Concurrency, store.MaxInquiryTake)
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultInquiryLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Inquirer{cfg: cfg}, nil
}

// Start takes and answers inquiries until Stop or until ctx is done.
func (q *Inquirer) Start(ctx context.Context) error {
	return q.svc.Start(ctx, q.run)
}

// Stop stops taking, cancels the answers under way, and waits for them.
func (q *Inquirer) Stop() { q.svc.Stop() }

func (q *Inquirer) run(ctx context.Context) {
	if len(q.cfg.Types) == 0 {
		<-ctx.Done()
		return
	}
	var wake <-chan struct{}
	if q.cfg.Notifier != nil {
		ch, unsubscribe := q.cfg.Notifier.SubscribeInquiries()
		defer unsubscribe()
		wake = ch
	}
	slots := make(chan struct{}, q.cfg.Concurrency) // a token per answer under way
	freed := make(chan struct{}, 1)                 // an answer ended: take again at once
	var answering sync.WaitGroup
	defer answering.Wait()
	down := service.NewOutage(q.cfg.Logger, "inquirer (polling continues)")
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		free := q.cfg.Concurrency - len(slots)
		full := free == 0
		if !full {
			taken, err := q.cfg.Store.InquiryTake(ctx, &store.InquiryTakeParams{Namespace: q.cfg.Namespace, Types: q.cfg.Types,
				Kinds: q.cfg.Kinds, Owner: q.cfg.WorkerID, Max: free, Lease: q.cfg.Lease})
			switch {
			case err != nil && ctx.Err() == nil:
				down.Failed(err)
				backoff = service.NextBackoff(max(backoff, service.MinBackoff), service.MaxBackoff)
			case err == nil:
				down.OK()
				backoff = 0
			}
			for _, in := range taken {
				slots <- struct{}{}
				answering.Add(1)
				go func() {
					defer answering.Done()
					defer func() {
						<-slots
						select {
						case freed <- struct{}{}:
						default:
						}
					}()
					q.answer(ctx, in)
				}()
			}
			if len(taken) == free {
				continue // more may wait: take again
			}
		}
		wait := q.cfg.PollInterval
		if q.cfg.Notifier != nil {
			if q.cfg.Notifier.Live() {
				wait = max(wait, liveInquiryPoll)
			} else {
				wait = min(wait, notifier.FallbackPollInterval)
			}
		}
		if backoff > 0 {
			wait = backoff
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-freed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// answer runs the handler for in, bounded by its deadline.
func (q *Inquirer) answer(ctx context.Context, in *store.Inquiry) {
	ctx, cancel := context.WithDeadline(ctx, in.Deadline)
	defer cancel()
	if err := q.cfg.Handler(ctx, in); err != nil && ctx.Err() == nil {
		q.cfg.Logger.Warn("inquirer: answer an inquiry", "inquiry", in.ID, "task", in.TaskID, "kind", in.Kind, service.ErrAttr(err))
	}
}
