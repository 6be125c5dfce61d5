package intake

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// Who answers the approvals: the modes of a [SimulatedReviewer] (auto,
// approve, reject and timeout), or a person ([PersonNotifier]).
const (
	ApproveAuto    = "auto"    // a simulated reviewer: mostly approves, rejects some, misses a few
	ApproveAll     = "approve" // a simulated reviewer approves every one
	ApproveReject  = "reject"  // a simulated reviewer rejects every one
	ApproveTimeout = "timeout" // nobody answers: every approval escalates, then the default decides
	ApproveManual  = "manual"  // a person: the console, cairn task signal, or a signed URL
)

// ApproveModes returns who may answer the approvals, in the order a
// command line offers them.
func ApproveModes() []string {
	return []string{ApproveAuto, ApproveAll, ApproveReject, ApproveTimeout, ApproveManual}
}

// ReviewRequest is what the reviewers (or, escalated, a supervisor) are
// told of a document waiting for a decision.
type ReviewRequest struct {
	TaskID     uuid.UUID
	DocumentID string
	Kind       string
	Confidence float64
	Reason     string
	// Stage 0 asks the reviewers; stage 1 is the escalation to a
	// supervisor, after the first wait timed out.
	Stage int
	// Wait is the task's receive the decision is for (a callback
	// token's sdk.Callback.Wait).
	Wait    int
	Timeout time.Duration // how long this stage waits
}

// Notifier hears of every approval a document asks for and every
// escalation ([Config.Reviewers]), from the workflow's request_review and
// escalate steps, on the steps' goroutines (several at once). A step may
// run again (a crash before it was recorded), so it may hear of one twice.
// An error fails the step's attempt, which is retried.
type Notifier interface {
	Notify(ctx context.Context, req ReviewRequest) error
}

// SimulatedReviewer is a [Notifier] that answers approvals as a reviewer
// at a screen would, a short delay after being asked, with
// [sdk.Client.Signal]. What it decides depends on the mode and, for auto,
// on the document: the same in every process, so two workers' reviewers
// agree, and their answers share a dedup id.
type SimulatedReviewer struct {
	client *sdk.Client
	mode   string
	delay  time.Duration
	// onError hears of an answer that could not be sent; nil: nobody.
	onError func(task uuid.UUID, err error)
	// tries and retryEvery bound the sends of an answer to a task that
	// does not wait for it yet.
	tries      int
	retryEvery time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
}

// NewSimulatedReviewer returns a reviewer that answers as mode says
// (ApproveAuto, ApproveAll, ApproveReject; any other mode answers none)
// about delay after being asked, give or take half, through c. onError, if
// set, hears of an answer that could not be sent (not of one a task no
// longer takes), from the reviewer's goroutine. Stop it after the worker
// whose steps it hears from.
func NewSimulatedReviewer(c *sdk.Client, mode string, delay time.Duration, onError func(task uuid.UUID, err error)) *SimulatedReviewer {
	ctx, cancel := context.WithCancel(context.Background())
	return &SimulatedReviewer{client: c, mode: mode, delay: delay, onError: onError, tries: 100, retryEvery: 50 * time.Millisecond,
		ctx: ctx, cancel: cancel}
}

// decide is the simulated reviewer's answer to req, if it gives one.
// auto: 70 % approved, 15 % rejected at once; 10 % answered (approved)
// only by the supervisor after the escalation; 5 % never answered.
func (r *SimulatedReviewer) decide(req ReviewRequest) (workflow.Decision, bool) {
	by := "reviewer (simulated)"
	if req.Stage == 1 {
		by = "supervisor (simulated)"
	}
	approve := workflow.Decision{Approved: true, Comment: "checked against the scan", By: by}
	reject := workflow.Decision{Approved: false, Comment: "the figures do not match the scan", By: by}
	switch r.mode {
	case ApproveAll:
		return approve, true
	case ApproveReject:
		return reject, true
	case ApproveAuto:
		h := fnv.New64a()
		_, _ = io.WriteString(h, req.DocumentID)
		switch u := float64(h.Sum64()%1000) / 1000; {
		case u < 0.70:
			return approve, true
		case u < 0.85:
			return reject, true
		case u < 0.95 && req.Stage == 1:
			approve.Comment = "approved on escalation"
			return approve, true
		}
	}
	return workflow.Decision{}, false
}

// reviewerDelay is how long the reviewer takes over req: delay, give or
// take half, the same for the same request.
func (r *SimulatedReviewer) reviewerDelay(req ReviewRequest) time.Duration {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d", req.TaskID, req.Stage)
	return time.Duration(float64(r.delay) * (0.5 + float64(h.Sum64()%1000)/1000))
}

// Notify implements [Notifier]: it answers req, if the mode gives an
// answer, on a goroutine of its own after the reviewer's delay.
func (r *SimulatedReviewer) Notify(_ context.Context, req ReviewRequest) error {
	d, ok := r.decide(req)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil // the worker is stopping; the wait times out, or another answers
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(r.reviewerDelay(req)):
		}
		// ForWait: an answer for the first stage that comes after its wait
		// timed out must not decide the supervisor's escalation.
		// A task not waiting there yet (its request_review step ran, its
		// receive has not begun) is asked again shortly.
		wait := req.Wait
		var err error
		for try := 0; try < r.tries; try++ {
			_, err = r.client.Signal(r.ctx, req.TaskID, ApprovalSignal, d, &sdk.SignalOpts{
				DedupID: fmt.Sprintf("demo-review/%s/%d", req.TaskID, req.Stage), Sender: d.By, // the decision's By is its sender
				ForWait: &wait})
			if !errors.Is(err, sdk.ErrWaitNotReached) {
				break
			}
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(r.retryEvery):
			}
		}
		// A task that finished (the other stage's answer was enough), or
		// whose wait ended, takes no more signals. One that has not reached
		// the wait yet would still take the answer: giving up on it is
		// reported, not dropped.
		tookNoMore := errors.Is(err, sdk.ErrTaskState) && !errors.Is(err, sdk.ErrWaitNotReached)
		if err != nil && !tookNoMore && r.ctx.Err() == nil && r.onError != nil {
			r.onError(req.TaskID, err)
		}
	}()
	return nil
}

// Stop drops the answers not sent yet and waits for those being sent.
func (r *SimulatedReviewer) Stop() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// PersonNotifier is a [Notifier] that tells a person, on the terminal,
// that a document waits for their decision, and how to give it. Set its
// fields before the first Notify and leave them.
type PersonNotifier struct {
	// Out is written a request at a time, one Write each, from several
	// goroutines at once: it must serialize them (and its other writers').
	Out io.Writer
	// HowTo is printed before the first request.
	HowTo string
	// Signal is the command line that signals a task, "cairn task signal"
	// with the flags that name the store.
	Signal string
	// Console, if set, is the console's address: http://host:port.
	Console string
	// CallbackSecret and CallbackBase, when set, sign a one-time URL for
	// each request, as the server at CallbackBase does; Namespace is the
	// tasks' namespace, which the URL names.
	CallbackSecret []byte
	CallbackBase   string
	Namespace      string

	once sync.Once
}

// Notify implements [Notifier]: it writes req, and before the first the
// how-to, to p.Out in one Write.
func (p *PersonNotifier) Notify(_ context.Context, req ReviewRequest) error {
	var b strings.Builder
	p.once.Do(func() { b.WriteString(p.HowTo) })
	if req.Stage == 0 {
		fmt.Fprintf(&b, "approval needed: document %s (%s), %s; task %s waits %s\n",
			req.DocumentID, req.Kind, req.Reason, req.TaskID, req.Timeout)
	} else {
		fmt.Fprintf(&b, "escalated: no decision on document %s: supervisor notified; task %s waits %s more, then rejects it (no decision)\n",
			req.DocumentID, req.TaskID, req.Timeout)
	}
	// Each line works as pasted into a shell: what follows it is a
	// comment.
	fmt.Fprintf(&b, "  %s %s %s --payload '{\"approved\":true}'   # false to reject\n", p.Signal, req.TaskID, ApprovalSignal)
	if p.Console != "" {
		fmt.Fprintf(&b, "  %s/console/tasks/%s\n", p.Console, req.TaskID)
	}
	if len(p.CallbackSecret) > 0 {
		token, err := sdk.CallbackToken(p.CallbackSecret, sdk.Callback{Namespace: p.Namespace, TaskID: req.TaskID,
			Name: ApprovalSignal, Wait: req.Wait, Expires: time.Now().Add(req.Timeout + time.Minute)})
		if err != nil {
			return err
		}
		// The link opens a page to decide on in a browser; the API takes
		// only JSON writes (415 otherwise).
		link := strings.TrimSuffix(p.CallbackBase, "/") + "/v1/callbacks/" + token
		fmt.Fprintf(&b, "  %s   (open in a browser to approve or reject)\n", link)
		fmt.Fprintf(&b, "  curl -X POST -H 'Content-Type: application/json' '%s?decision=approve'   # or ?decision=reject\n", link)
	}
	_, err := io.WriteString(p.Out, b.String())
	return err
}
