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
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/seal"
)

// errNoArchive: the namespace has no archive, nor the client a default.
var errNoArchive = errors.New("no archive is configured")

// archiveLocations are where the client's namespace may have archived
// histories: its own archive, then the client's DefaultArchive (a
// namespace's archive may have been set after some of its tasks went to
// the default).
func (c *Client) archiveLocations(ctx context.Context) ([]string, error) {
	namespaces, err := c.store.NamespaceList(ctx, &store.NamespaceListParams{})
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

// archivedHistory reads task id's history from the namespace's archives,
// its payloads decoded as keepRefs says (see [Client.decodeEvents]):
// opened with the data key the record keeps.
func (c *Client) archivedHistory(ctx context.Context, id uuid.UUID, keepRefs bool) ([]history.Event, error) {
	locations, err := c.archiveLocations(ctx)
	if err != nil {
		return nil, err
	}
	for _, location := range locations {
		rec, herr := c.archives.Record(ctx, location, c.namespace, id)
		if !errors.Is(herr, engine.ErrNotArchived) {
			if herr != nil {
				return nil, herr
			}
			return c.decodeEvents(ctx, id, rec.Events, archivedOf(rec), keepRefs)
		}
		err = herr // not there: the next location, or this answer
	}
	return nil, err
}

// archivedOf is what an archived task's record keeps beside its events.
func archivedOf(t engine.ArchivedTask) *payload.Archived {
	return &payload.Archived{Task: t.TaskID, DataKey: t.DataKey}
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
			events, err := c.decodeEvents(ctx, t.TaskID, t.Events, archivedOf(t), true)
			if err != nil {
				return err
			}
			t.Events = events
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
var ErrBlobCorrupt = payload.ErrBlobCorrupt

// GetBlob returns the bytes ref names, from the client's namespace,
// checked against its size and SHA-256: a blob whose bytes do not match is
// an error marked [ErrBlobCorrupt] naming the task that wrote it. A blob
// removed with its task is read from the archive, when it was archived.
func (c *Client) GetBlob(ctx context.Context, ref Blob) ([]byte, error) {
	return c.store.GetBlob(ctx, c.namespace, ref, uuid.Nil)
}

// archivedBlob reads blob key of namespace from the namespace's archives,
// with the data key of its task's archived record to open it with:
// what the client's payload stage reads a blob the store no longer has
// from. found is false when no archive holds it.
func (c *Client) archivedBlob(ctx context.Context, namespace, key string) (*payload.Blob, bool, error) {
	locations, err := c.archiveLocations(ctx)
	if errors.Is(err, errNoArchive) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, location := range locations {
		id, data, berr := c.archives.Blob(ctx, location, namespace, key)
		if errors.Is(berr, engine.ErrNotArchived) {
			continue
		}
		if berr != nil {
			return nil, false, berr
		}
		b := &payload.Blob{Namespace: namespace, Key: key, TaskID: id, Data: data, Archived: &payload.Archived{Task: id}}
		if c.keys == nil {
			if seal.BlobSealed(data) {
				return nil, false, errmark.Mark(errors.Newf("blob %s of task %s is encrypted: the client has no keys (ClientConfig.Keys)", key, id), payload.ErrSealed)
			}
			return b, true, nil
		}
		rec, rerr := c.archives.Record(ctx, location, namespace, id)
		if rerr != nil && !errors.Is(rerr, engine.ErrNotArchived) {
			return nil, false, rerr
		}
		b.Archived.DataKey = rec.DataKey
		return b, true, nil
	}
	return nil, false, nil
}

// ReadBlob returns the blob key of the client's namespace with its content
// type, checked against the digest written with it (for a reader that has
// the key but not the reference, such as a download link).
func (c *Client) ReadBlob(ctx context.Context, key string) (data []byte, contentType string, err error) {
	b, err := c.store.ReadBlob(ctx, c.namespace, key)
	if err != nil {
		return nil, "", err
	}
	return b.Data, b.ContentType, nil
}
