package sdk

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	sj "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// signalDeclTTL is how long a client keeps the namespace's declared
// signals before it reads them again: a worker's new declarations are
// checked by every client within it.
const signalDeclTTL = 2 * time.Second

// signalDecls is a client's cache of the signals the types of its
// namespace declare (the registry's, [Client.TaskTypes]), compiled.
type signalDecls struct {
	mu       sync.Mutex
	loadedAt time.Time // zero: never loaded
	// types holds the declaring types only; none is the common case,
	// which needs no read of the task.
	types map[store.TypeKey]*typeSignals
}

// typeSignals are the signals one type at one version declares.
type typeSignals struct {
	names   []string              // sorted
	schemas map[string]*sj.Schema // nil: a schema this client cannot compile, which takes anything
}

// declared returns the declaring types of c's namespace, read again when
// the copy is older than signalDeclTTL.
func (c *Client) declared(ctx context.Context) (map[store.TypeKey]*typeSignals, error) {
	d := c.signalDecls
	if d == nil { // a worker's client for its own reads: it sends no signals
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.loadedAt.IsZero() && time.Since(d.loadedAt) < signalDeclTTL {
		return d.types, nil
	}
	types, err := c.TaskTypes(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "read the signals task types declare")
	}
	out := map[store.TypeKey]*typeSignals{}
	for _, t := range types {
		if t.Signals == nil {
			continue
		}
		ts := &typeSignals{schemas: make(map[string]*sj.Schema, len(t.Signals))}
		for name, schema := range t.Signals {
			ts.names = append(ts.names, name)
			// A worker compiled it before declaring it; one this client's
			// validator cannot compile (another version's) takes any
			// payload, as before declarations, rather than none.
			compiled, _ := compileSignalSchema(schema)
			ts.schemas[name] = compiled
		}
		slices.Sort(ts.names)
		out[store.TypeKey{Type: t.Type, Version: t.Version}] = ts
	}
	d.types, d.loadedAt = out, time.Now()
	return out, nil
}

// checkDeclared refuses, before anything is written, a signal p to a task
// whose type (at the task's version) declares the signals it receives,
// when the type declares none of p's name ([SignalNotDeclaredError]) or
// p's payload does not fit its schema ([SignalPayloadError]); both are
// marked [ErrInvalid]. A namespace whose types declare nothing costs no
// read but the registry's, once every signalDeclTTL; otherwise the task's
// row is read for its type.
func (c *Client) checkDeclared(ctx context.Context, p *store.TaskSignalParams) error {
	declared, err := c.declared(ctx)
	if err != nil || len(declared) == 0 {
		return err
	}
	t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: p.Namespace, ID: p.TaskID, IdempotencyKey: p.IdempotencyKey})
	if err != nil {
		if p.TaskID != [16]byte{} {
			return errors.Wrapf(err, "signal %q to task %s", p.Name, p.TaskID)
		}
		return errors.Wrapf(err, "signal %q by idempotency key", p.Name)
	}
	ts := declared[store.TypeKey{Type: t.Type, Version: t.TypeVersion}]
	if ts == nil {
		return nil
	}
	schema, ok := ts.schemas[p.Name]
	if !ok {
		return errmark.Mark(&SignalNotDeclaredError{TaskID: t.ID, Type: t.Type, Version: t.TypeVersion, Name: p.Name,
			Declared: slices.Clone(ts.names)}, ErrInvalid)
	}
	if schema == nil {
		return nil
	}
	problems, err := payloadProblems(schema, p.Payload)
	if err != nil {
		return errors.Wrapf(err, "signal %q to task %s", p.Name, t.ID)
	}
	if len(problems) > 0 {
		return errmark.Mark(&SignalPayloadError{TaskID: t.ID, Type: t.Type, Version: t.TypeVersion, Name: p.Name,
			Problems: problems}, ErrInvalid)
	}
	return nil
}
