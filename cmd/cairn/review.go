package main

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

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// Who answers the demo's approvals (--approve).
const (
	approveAuto    = "auto"    // a simulated reviewer: mostly approves, rejects some, misses a few
	approveAll     = "approve" // a simulated reviewer approves every one
	approveReject  = "reject"  // a simulated reviewer rejects every one
	approveTimeout = "timeout" // nobody answers: every approval escalates, then the default decides
	approveManual  = "manual"  // a person: the console, cairn task signal, or a signed URL
)

var approveModes = []string{approveAuto, approveAll, approveReject, approveTimeout, approveManual}

// reviewRequest is what the reviewers (or, escalated, a supervisor) are
// told of a document waiting for a decision.
type reviewRequest struct {
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

// reviewNotifier hears of every approval a document asks for and every
// escalation, from the workflow's request_review and escalate steps. A
// step may run again (a crash before it was recorded), so it may hear of
// one twice.
type reviewNotifier interface {
	notify(ctx context.Context, req reviewRequest) error
}

// simReviewer answers approvals as a reviewer at a screen would, a short
// delay after being asked, with Client.Signal. What it decides depends on
// the mode and, for auto, on the document: the same in every process, so
// two workers' reviewers agree, and their answers share a dedup id.
type simReviewer struct {
	client *sdk.Client
	mode   string
	delay  time.Duration
	errOut io.Writer

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
}

func newSimReviewer(c *sdk.Client, mode string, delay time.Duration, errOut io.Writer) *simReviewer {
	ctx, cancel := context.WithCancel(context.Background())
	return &simReviewer{client: c, mode: mode, delay: delay, errOut: errOut, ctx: ctx, cancel: cancel}
}

// decide is the simulated reviewer's answer to req, if it gives one.
// auto: 70 % approved, 15 % rejected at once; 10 % answered (approved)
// only by the supervisor after the escalation; 5 % never answered.
func (r *simReviewer) decide(req reviewRequest) (workflow.Decision, bool) {
	by := "reviewer (simulated)"
	if req.Stage == 1 {
		by = "supervisor (simulated)"
	}
	approve := workflow.Decision{Approved: true, Comment: "checked against the scan", By: by}
	reject := workflow.Decision{Approved: false, Comment: "the figures do not match the scan", By: by}
	switch r.mode {
	case approveAll:
		return approve, true
	case approveReject:
		return reject, true
	case approveAuto:
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
func (r *simReviewer) reviewerDelay(req reviewRequest) time.Duration {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d", req.TaskID, req.Stage)
	return time.Duration(float64(r.delay) * (0.5 + float64(h.Sum64()%1000)/1000))
}

func (r *simReviewer) notify(_ context.Context, req reviewRequest) error {
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
		for try := 0; try < 100; try++ {
			_, err = r.client.Signal(r.ctx, req.TaskID, approvalSignal, d, sdk.SignalOpts{
				DedupID: fmt.Sprintf("demo-review/%s/%d", req.TaskID, req.Stage), Sender: d.By, // the decision's By is its sender
				ForWait: &wait})
			if !errors.Is(err, sdk.ErrWaitNotReached) {
				break
			}
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		// A task that finished (the other stage's answer was enough), or
		// whose wait ended, takes no more signals.
		if err != nil && !errors.Is(err, sdk.ErrTaskState) && r.ctx.Err() == nil {
			fmt.Fprintf(r.errOut, "simulated reviewer: task %s: %s\n", req.TaskID, redact(err.Error()))
		}
	}()
	return nil
}

// stop drops the answers not sent yet and waits for those being sent.
func (r *simReviewer) stop() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// personNotifier tells a person, on the terminal, that a document waits
// for their decision, and how to give it.
type personNotifier struct {
	out io.Writer // a lockedWriter: one Write a request
	// howTo is printed before the first request.
	howTo string
	// signal is the command line that signals a task, "cairn task signal"
	// with the flags that name the store.
	signal string
	// console, if set, is the console's address: http://host:port.
	console string
	// callbackSecret and callbackBase, when set, sign a one-time URL for
	// each request, as the server at callbackBase does.
	callbackSecret []byte
	callbackBase   string
	namespace      string

	once sync.Once
}

func (p *personNotifier) notify(_ context.Context, req reviewRequest) error {
	var b strings.Builder
	p.once.Do(func() { b.WriteString(p.howTo) })
	if req.Stage == 0 {
		fmt.Fprintf(&b, "approval needed: document %s (%s), %s; task %s waits %s\n",
			req.DocumentID, req.Kind, req.Reason, req.TaskID, req.Timeout)
	} else {
		fmt.Fprintf(&b, "escalated: no decision on document %s: supervisor notified; task %s waits %s more, then rejects it (no decision)\n",
			req.DocumentID, req.TaskID, req.Timeout)
	}
	fmt.Fprintf(&b, "  %s %s %s --payload '{\"approved\":true}'   (false to reject)\n", p.signal, req.TaskID, approvalSignal)
	if p.console != "" {
		fmt.Fprintf(&b, "  %s/console/tasks/%s\n", p.console, req.TaskID)
	}
	if len(p.callbackSecret) > 0 {
		token, err := sdk.CallbackToken(p.callbackSecret, sdk.Callback{Namespace: p.namespace, TaskID: req.TaskID,
			Name: approvalSignal, Wait: req.Wait, Expires: time.Now().Add(req.Timeout + time.Minute)})
		if err != nil {
			return err
		}
		// The API takes only JSON writes (415 otherwise): the line must
		// work as pasted.
		fmt.Fprintf(&b, "  curl -X POST -H 'Content-Type: application/json' '%s/v1/callbacks/%s?decision=approve'   (or reject)\n",
			strings.TrimSuffix(p.callbackBase, "/"), token)
	}
	_, err := io.WriteString(p.out, b.String())
	return err
}

// lockedWriter serializes writes to w: the demo's progress and the
// notifications of steps running concurrently share the terminal.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// signalCommand is the command line that signals a task in g's store.
func signalCommand(g *globals) string {
	cmd := "cairn"
	if g.embedded() && g.dbPath != "cairn-dev.db" {
		cmd += " --db " + g.dbPath
	}
	if !g.embedded() {
		cmd += " --database-url \"$CAIRN_DATABASE_URL\""
		if g.schema != pgstore.DefaultSchema {
			cmd += " --schema " + g.schema
		}
	}
	if g.namespace != "default" {
		cmd += " --namespace " + g.namespace
	}
	return cmd + " task signal"
}
