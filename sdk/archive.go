package sdk

import (
	"context"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// errNoArchive: the namespace has no archive, nor the client a default.
var errNoArchive = errors.New("no archive is configured")

// archiveLocations are where the client's namespace may have archived
// histories: its own archive, then the client's DefaultArchive (a
// namespace's archive may have been set after some of its tasks went to
// the default).
func (c *Client) archiveLocations(ctx context.Context) ([]string, error) {
	namespaces, err := c.store.NamespaceList(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	var recorded string // the default a leader recorded (store.DefaultsRow)
	for _, ns := range namespaces {
		switch {
		case ns.Name == c.namespace && ns.Archive != "":
			out = append(out, ns.Archive)
		case ns.Name == store.DefaultsRow:
			recorded = ns.Archive
		}
	}
	for _, location := range []string{c.defaultArchive, recorded} {
		if location != "" && !slices.Contains(out, location) {
			out = append(out, location)
		}
	}
	if len(out) == 0 {
		return nil, errors.WithStack(errNoArchive)
	}
	return out, nil
}

// openArchived opens an archived task's sealed payloads with the client's
// codec, if it has one.
func (c *Client) openArchived(ctx context.Context, t engine.ArchivedTask) engine.ArchivedTask {
	if sealed, ok := c.store.(*engine.SealedStore); ok {
		return sealed.OpenArchived(ctx, t)
	}
	return t
}

// archivedHistory reads task id's history from the namespace's archives.
func (c *Client) archivedHistory(ctx context.Context, id uuid.UUID) ([]history.Event, error) {
	locations, err := c.archiveLocations(ctx)
	if err != nil {
		return nil, err
	}
	for _, location := range locations {
		rec, herr := c.archives.Record(ctx, location, c.namespace, id)
		if !errors.Is(herr, engine.ErrNotArchived) {
			return c.openArchived(ctx, rec).Events, herr
		}
		err = herr // not there: the next location, or this answer
	}
	return nil, err
}

// AuditArchive is [Client.Audit] over the histories retention archived
// (in the namespace's archive and the client's DefaultArchive): every
// archived event in [p.Since, p.Until) that p.Filter matches, with its
// task as its history ends (status, type, queue and labels replayed from
// the events). Records come in the archive's order (objects by the hour
// their tasks were created, events in seq order within a task), not in
// order of time. A task archived twice (it changed between an archiving
// and its removal) is read from its fullest copy only.
func (c *Client) AuditArchive(ctx context.Context, p AuditParams, fn func(AuditRecord) error) error {
	until := p.Until
	if until.IsZero() {
		until = time.Now()
	}
	if !p.Since.Before(until) {
		return errors.Newf("audit: since %s is not before until %s", p.Since.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
	}
	locations, err := c.archiveLocations(ctx)
	if err != nil {
		return errors.Wrap(err, "audit the archive")
	}
	// The fullest copy of each task, then its events in order.
	fullest := map[uuid.UUID]engine.ArchivedTask{}
	var order []uuid.UUID
	for _, location := range locations {
		err = c.archives.Scan(ctx, location, c.namespace, until, func(t engine.ArchivedTask) error {
			t = c.openArchived(ctx, t)
			prev, seen := fullest[t.TaskID]
			if !seen {
				order = append(order, t.TaskID)
			}
			if !seen || len(t.Events) > len(prev.Events) {
				fullest[t.TaskID] = t
			}
			return nil
		})
		if err != nil {
			return errors.Wrap(err, "audit the archive")
		}
	}
	a := &audit{client: c, filter: p.Filter, budget: c.newFilterBudget()}
	handed := 0
	for _, id := range order {
		recs, err := archivedAuditRecords(fullest[id], p.Since, until)
		if err != nil {
			return errors.Wrap(err, "audit the archive")
		}
		for _, rec := range recs {
			if p.Limit > 0 && handed >= p.Limit {
				return a.evalErrors()
			}
			if a.filter != nil {
				ok, _, err := a.filter.match(ctx, &rec)
				if err != nil {
					if a.failedEvals++; a.failedEvals <= maxFilterErrors {
						a.evalErrs = errors.CombineErrors(a.evalErrs, err)
					}
					continue
				}
				if !ok {
					continue
				}
			}
			if err := fn(rec); err != nil {
				return err
			}
			handed++
		}
	}
	return a.evalErrors()
}

// archivedAuditRecords are the audit records of an archived task's events
// in [since, until).
func archivedAuditRecords(t engine.ArchivedTask, since, until time.Time) ([]AuditRecord, error) {
	state, err := history.Replay(t.Events)
	if err != nil {
		return nil, errors.Wrapf(err, "replay archived task %s", t.TaskID)
	}
	sc := state.Scheduled
	task := AuditTask{ID: t.TaskID, Namespace: t.Namespace, Type: sc.TaskType, Version: sc.TypeVersion, Queue: sc.Queue,
		Status: state.Status, TraceID: sc.TraceID, Labels: sc.Labels, FairnessKey: sc.FairnessKey}
	var out []AuditRecord
	for _, e := range t.Events {
		if e.At.Before(since) || !e.At.Before(until) {
			continue
		}
		data, err := history.Encode(e.Data)
		if err != nil {
			return nil, errors.Wrapf(err, "archived task %s event %d", t.TaskID, e.Seq)
		}
		out = append(out, AuditRecord{
			Event: AuditEvent{Type: e.Type(), Seq: e.Seq, At: e.At, Attempt: e.Attempt, Data: data, Payload: e.Data},
			Task:  task,
		})
	}
	return out, nil
}

// Blob is a reference to bytes a step kept out of the history with
// activities.PutBlob: return it from a step or a workflow, and read it
// with [Client.GetBlob] (or activities.GetBlob in a later step).
type Blob = history.BlobRef

// ErrBlobCorrupt marks a blob whose stored bytes do not match their digest:
// the data is damaged, and is never handed out.
var ErrBlobCorrupt = engine.ErrBlobCorrupt

// GetBlob returns the bytes ref names, from the client's namespace,
// checked against its size and SHA-256: a blob whose bytes do not match is
// an error marked [ErrBlobCorrupt] naming the task that wrote it.
func (c *Client) GetBlob(ctx context.Context, ref Blob) ([]byte, error) {
	return c.blobOf(ctx, ref, uuid.Nil)
}

// blobOf is GetBlob; with an owner, for a reference the client resolves
// by itself in a task's payload, only a blob that task wrote is read (see
// engine.GetTaskBlob): another's is answered as not found.
func (c *Client) blobOf(ctx context.Context, ref Blob, owner uuid.UUID) ([]byte, error) {
	var data []byte
	var err error
	if owner == uuid.Nil {
		data, err = engine.GetBlob(ctx, c.store, c.namespace, ref)
	} else {
		data, err = engine.GetTaskBlob(ctx, c.store, c.namespace, ref, owner)
	}
	if !errors.Is(err, ErrNotFound) {
		return data, err
	}
	// Removed with its task: the archive may hold it.
	if archived, aerr := c.archivedBlob(ctx, ref, owner); aerr == nil || !errors.Is(aerr, engine.ErrNotArchived) && !errors.Is(aerr, errNoArchive) {
		return archived, aerr
	}
	return nil, err
}

// archivedBlob reads ref's blob from the namespace's archives, opened
// with the archived task's data key when it is sealed, and checked; with
// an owner, only one that task wrote.
func (c *Client) archivedBlob(ctx context.Context, ref Blob, owner uuid.UUID) ([]byte, error) {
	locations, err := c.archiveLocations(ctx)
	if err != nil {
		return nil, err
	}
	for _, location := range locations {
		id, data, berr := c.archives.Blob(ctx, location, c.namespace, ref.Key)
		if errors.Is(berr, engine.ErrNotArchived) {
			err = berr
			continue
		}
		if berr != nil {
			return nil, berr
		}
		if owner != uuid.Nil && id != owner {
			return nil, errmark.Mark(errors.Newf("blob %s: no such blob of task %s", ref.Key, owner), ErrNotFound)
		}
		sealed, ok := c.store.(*engine.SealedStore)
		if !ok && engine.BlobSealed(data) {
			return nil, errmark.Mark(errors.Newf("blob %s of task %s is encrypted: the client has no keys (ClientConfig.Codec)", ref.Key, id), engine.ErrPayloadSealed)
		}
		if ok {
			rec, rerr := c.archives.Record(ctx, location, c.namespace, id)
			if rerr != nil && !errors.Is(rerr, engine.ErrNotArchived) {
				return nil, rerr
			}
			if data, berr = sealed.OpenArchivedBlob(c.namespace, id, rec.DataKey, ref.Key, data); berr != nil {
				return nil, berr
			}
		}
		return engine.CheckBlob(ref, id, data)
	}
	return nil, err
}

// ReadBlob returns the blob key of the client's namespace with its content
// type, checked against the digest written with it (for a reader that has
// the key but not the reference, such as a download link).
func (c *Client) ReadBlob(ctx context.Context, key string) (data []byte, contentType string, err error) {
	b, err := engine.ReadBlob(ctx, c.store, c.namespace, key)
	if err != nil {
		return nil, "", err
	}
	return b.Data, b.ContentType, nil
}

// resolveOutputs reads back the step outputs events (task id's) keep by
// reference, in a copy of the events where any is: each such event then
// reads as if the output were kept in place.
func (c *Client) resolveOutputs(ctx context.Context, id uuid.UUID, events []history.Event) ([]history.Event, error) {
	var out []history.Event
	for i, e := range events {
		if resolved, changed, err := c.resolveEnvelope(ctx, id, e); err != nil {
			return nil, err
		} else if changed {
			if out == nil {
				out = append([]history.Event(nil), events...)
			}
			out[i] = resolved
			continue
		}
		step, ok := e.Data.(history.StepCompletedData)
		if !ok || step.OutputRef == nil {
			continue
		}
		data, err := c.blobOf(ctx, *step.OutputRef, id)
		if errors.Is(err, ErrNotFound) || errors.Is(err, engine.ErrPayloadSealed) {
			continue // removed with its task, or shredded: the reference is all there is
		}
		if err != nil {
			return nil, errors.Wrapf(err, "the output of step %d (%s)", step.Position, step.Name)
		}
		if out == nil {
			out = append([]history.Event(nil), events...)
		}
		step.Output, step.OutputRef = data, nil // as if kept in place: replayable as it is
		out[i].Data = step
	}
	if out == nil {
		return events, nil
	}
	return out, nil
}

// resolveEnvelope reads back the payload e, an event of task id, keeps as
// a blob ({"cairn_blob": …}: a start's input in task_scheduled, a
// workflow's output in task_completed, a child's in child_finished, a
// signal's payload), reporting whether there was one to read.
func (c *Client) resolveEnvelope(ctx context.Context, id uuid.UUID, e history.Event) (history.Event, bool, error) {
	raw, ok := history.UserData(e.Data)
	if _, isStep := e.Data.(history.StepCompletedData); isStep || !ok {
		return e, false, nil // a step's output by reference is its OutputRef
	}
	if _, ok := history.ParseBlobEnvelope(raw); !ok {
		return e, false, nil
	}
	owner := id // the blob's writer: the task, or for a child's output the child
	if fin, ok := e.Data.(history.ChildFinishedData); ok {
		child, err := uuid.Parse(fin.ChildID)
		if err != nil {
			return e, false, nil
		}
		owner = child
	}
	data, err := c.resolvePayload(ctx, raw, owner)
	if err != nil {
		return e, false, errors.Wrapf(err, "the output in event %d", e.Seq)
	}
	e.Data = history.WithUserData(e.Data, data)
	return e, true, nil
}
