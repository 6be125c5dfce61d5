package sdk

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
)

// AbandonWorker stops w as a crash would: its attempts are cancelled and
// nothing more is written for them, so their tasks wait for their leases to
// expire. Tests of crash recovery use it; Start's context no longer does
// this (it stops gracefully).
func AbandonWorker(w *Worker) {
	w.mu.Lock()
	abandon := w.abandon
	w.mu.Unlock()
	if abandon != nil {
		abandon()
	}
}

// SetHeldBackLinger sets how long w's parents whose starts the cap holds
// back wait for their children within an attempt (negative: not at all,
// every such wait is recorded), and from which history length (negative:
// any). Call it before Start.
func SetHeldBackLinger(w *Worker, d time.Duration, fromEvents int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.heldBackLinger, w.heldBackLingerFrom = d, fromEvents
}

// ClientStore is the store c works in, under its payload stage: tests read
// and write under the client with it (payloads there are as stored), and
// check the projections of what it wrote.
func ClientStore(c *Client) store.Store { return c.store.Engine() }

// SetBeforeForward has c call fn before it passes a signal on to run,
// the current run of the chain the signal's task continued as.
func SetBeforeForward(c *Client, fn func(run uuid.UUID)) { c.beforeForward = fn }

// SetMaxForksListed lowers what Client.Forks lists, for a test (not
// parallel) of the bound; it returns the restore.
func SetMaxForksListed(n int) (restore func()) {
	was := maxForksListed
	maxForksListed = n
	return func() { maxForksListed = was }
}

// SetOnInquiry has c call fn with the id of each inquiry it writes (a
// query asked of the workers), once written.
func SetOnInquiry(c *Client, fn func(id uuid.UUID)) { c.onInquiry = fn }

// CheckSignalPayload checks payload against what d declares, as a client
// does: the problems, and an error when there are any.
func CheckSignalPayload(d SignalDecl, payload json.RawMessage) ([]SignalPayloadProblem, error) {
	if d.err != nil {
		return nil, d.err
	}
	schema, err := compileSignalSchema(d.schema)
	if err != nil {
		return nil, err
	}
	problems, err := payloadProblems(schema, payload)
	if err == nil && len(problems) > 0 {
		err = &SignalPayloadError{Name: d.name, Problems: problems}
	}
	return problems, err
}

// RollUpUsage is the composition of [Client.TaskUsage] over facts load
// reads (at most store.MaxTaskUsageListIDs ids a call), reading at most
// limit task runs: the property tests roll up histories built in memory.
func RollUpUsage(ctx context.Context, load func(ctx context.Context, ids []uuid.UUID) ([]store.TaskUsageFacts, error),
	id uuid.UUID, children bool, limit int) (*cairntype.TaskUsage, error) {
	return rollUpUsage(ctx, load, id, children, limit)
}
