package engine

import (
	"bytes"
	"context"
	"crypto/cipher"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// SealedStore is a store decorator that encrypts at rest, with its
// [Codec], the payloads of the namespaces the codec has keys for: it
// seals inputs, step outputs, outputs, signal payloads, schedule inputs
// and blobs on the way in, and opens them on the way out, so the runtime
// above it (workers, the API, the CLI, the console) sees plaintext and the
// database holds none. A payload it cannot open (the task was erased, or
// its key is not configured here) is handed on sealed: readers show the
// {"cairn_sealed": …} object, never garbage. Payloads of other namespaces
// pass through as they are.
//
// Error messages, types, times, attempts, labels, idempotency keys and
// who did what are not encrypted: they are the audit trail an erasure
// keeps (docs/guarantees.md, Encryption and erasure).
type SealedStore struct {
	store.Store
	codec *Codec
	keys  keyCache
}

// SealStore returns st sealing with codec, or st itself when codec is
// nil. A store already sealed is not sealed twice.
func SealStore(st store.Store, codec *Codec) store.Store {
	if codec == nil {
		return st
	}
	if s, ok := st.(*SealedStore); ok && s.codec == codec {
		return s
	}
	return &SealedStore{Store: st, codec: codec, keys: keyCache{m: map[uuid.UUID]cachedKey{}}}
}

// Unwrap returns the store under the decorator (a driver's own methods,
// pgstore's TaskStartTx, take params [SealedStore.SealStart] sealed).
func (s *SealedStore) Unwrap() store.Store { return s.Store }

// Observer returns the observer the store under the decorator counts its
// writes into, if it says (the drivers do): sealing counts nothing more.
func (s *SealedStore) Observer() store.Observer {
	if r, ok := s.Store.(interface{ Observer() store.Observer }); ok {
		return r.Observer()
	}
	return nil
}

// Codec returns the decorator's codec.
func (s *SealedStore) Codec() *Codec { return s.codec }

// keyCache keeps opened data keys for a minute: a worker appends a
// task's outputs with the key it read at the claim. An erasure, which
// only a finished task allows, evicts its key here; another process may
// keep opening its payloads for up to keyTTL (docs/guarantees.md).
type keyCache struct {
	mu sync.Mutex
	m  map[uuid.UUID]cachedKey
}

type cachedKey struct {
	aead cipher.AEAD
	at   time.Time
}

const (
	keyTTL      = time.Minute
	maxKeyCache = 20_000
)

func (c *keyCache) get(id uuid.UUID) cipher.AEAD {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[id]
	if !ok || time.Since(k.at) > keyTTL {
		return nil
	}
	return k.aead
}

func (c *keyCache) put(id uuid.UUID, aead cipher.AEAD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxKeyCache {
		clear(c.m) // rare: refilled from the database as needed
	}
	c.m[id] = cachedKey{aead: aead, at: time.Now()}
}

func (c *keyCache) drop(id uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// SealStart returns p with its input sealed under a new data key of its
// own task, and ID and DataKey set; p itself when its namespace is not
// encrypted. p is not modified.
func (s *SealedStore) SealStart(p *store.TaskStartParams) (*store.TaskStartParams, error) {
	if !s.codec.Encrypts(p.Namespace) || p.DataKey != nil {
		// Sealed already (a decorator over this one made its key and
		// sealed its input): a second key would orphan the input's.
		return p, nil
	}
	q := *p
	if q.ID == uuid.Nil {
		var err error
		if q.ID, err = uuid.NewV7(); err != nil {
			return nil, errors.Wrap(err, "new task id")
		}
	}
	aead, wrapped, err := s.codec.newDataKey(p.Namespace, q.ID)
	if err != nil {
		return nil, err
	}
	q.DataKey = wrapped
	if in := p.Scheduled.Input; len(in) > 0 {
		var digest []byte
		if p.Scheduled.IdempotencyKey != "" {
			digest = s.codec.digest(p.Namespace, in)
		}
		q.Scheduled.Input = sealPayload(aead, q.ID, in, digest)
	}
	if len(p.Blobs) > 0 {
		q.Blobs = make([]*store.Blob, len(p.Blobs))
		for i, b := range p.Blobs {
			sealed := *b
			sealed.Data = sealInto(aead, []byte(sealedBlobMagic), b.Data, blobAD(b.Key))
			q.Blobs[i] = &sealed
		}
	}
	s.keys.put(q.ID, aead)
	return &q, nil
}

func (s *SealedStore) sealStarts(ps []*store.TaskStartParams) ([]*store.TaskStartParams, error) {
	out := make([]*store.TaskStartParams, len(ps))
	for i, p := range ps {
		var err error
		if out[i], err = s.SealStart(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TaskStart implements [store.Store].
func (s *SealedStore) TaskStart(ctx context.Context, p *store.TaskStartParams) (store.TaskStartResult, error) {
	q, err := s.SealStart(p)
	if err != nil {
		return store.TaskStartResult{}, err
	}
	return s.Store.TaskStart(ctx, q)
}

// TaskStartMany implements [store.Store].
func (s *SealedStore) TaskStartMany(ctx context.Context, ps []*store.TaskStartParams) ([]store.TaskStartResult, error) {
	qs, err := s.sealStarts(ps)
	if err != nil {
		return nil, err
	}
	return s.Store.TaskStartMany(ctx, qs)
}

// TaskStartChildren implements [store.Store].
func (s *SealedStore) TaskStartChildren(ctx context.Context, p *store.ChildStartParams) (store.ChildStartResult, error) {
	q := *p
	q.Children = make([]store.ChildStart, len(p.Children))
	for i, c := range p.Children {
		sealed, err := s.SealStart(&c.Task)
		if err != nil {
			return store.ChildStartResult{State: p.Parent.State}, err
		}
		c.Task = *sealed
		q.Children[i] = c
	}
	parent, err := s.sealAppend(ctx, &p.Parent)
	if err != nil {
		return store.ChildStartResult{State: p.Parent.State}, err
	}
	q.Parent = *parent
	res, err := s.Store.TaskStartChildren(ctx, &q)
	res.State = s.openState(ctx, res.State)
	return res, err
}

// EventAppend implements [store.Store].
func (s *SealedStore) EventAppend(ctx context.Context, p *store.EventAppendParams) (history.State, error) {
	q, err := s.sealAppend(ctx, p)
	if err != nil {
		return p.State, err
	}
	next, err := s.Store.EventAppend(ctx, q)
	if err != nil {
		return p.State, err
	}
	return s.openAppended(ctx, p, q, next), nil
}

// EventAppendMany implements [store.Store].
func (s *SealedStore) EventAppendMany(ctx context.Context, ps []*store.EventAppendParams) ([]store.AppendResult, error) {
	qs := make([]*store.EventAppendParams, len(ps))
	for i, p := range ps {
		var err error
		if qs[i], err = s.sealAppend(ctx, p); err != nil {
			return nil, err
		}
	}
	res, err := s.Store.EventAppendMany(ctx, qs)
	for i := range res {
		if res[i].Err != nil {
			res[i].State = ps[i].State
			continue
		}
		res[i].State = s.openAppended(ctx, ps[i], qs[i], res[i].State)
	}
	return res, err
}

// openAppended opens the state an append of q (p sealed) led to: the
// payloads it sealed are p's, so nothing is decrypted for them, and the
// rest of the state was p's own, open already (a child's output the
// driver wrote into it aside, which is opened).
func (s *SealedStore) openAppended(ctx context.Context, p, q *store.EventAppendParams, next history.State) history.State {
	if p == q || !s.codec.Encrypts(next.Scheduled.Namespace) {
		return next
	}
	o := s.newOpener(ctx)
	for i, pl := range q.Payloads {
		sealedRaw, plainRaw := payloadRaw(pl), payloadRaw(p.Payloads[i])
		if len(sealedRaw) > 0 {
			o.opened[string(sealedRaw)] = plainRaw
		}
	}
	if len(q.State.Output) > 0 {
		o.opened[string(q.State.Output)] = p.State.Output
	}
	return o.openState(next)
}

// payloadRaw is the payload a sealing append seals in pl, if any: what a
// worker's appends write (steps, outcomes, signals). A child's outcome
// comes sealed with the child's key; a task_scheduled is no append's.
func payloadRaw(pl history.Payload) json.RawMessage {
	switch pl.(type) {
	case history.StepCompletedData, history.TaskCompletedData, history.SignalReceivedData:
		data, _ := history.UserData(pl)
		return data
	}
	return nil
}

// sealAppend returns p with the payloads it writes sealed with its task's
// data key (made now if the task has none), and its state's output as the
// row holds it: the driver writes the projection's output column from the
// state, which was replayed from opened events.
func (s *SealedStore) sealAppend(ctx context.Context, p *store.EventAppendParams) (*store.EventAppendParams, error) {
	ns := p.State.Scheduled.Namespace
	if !s.codec.Encrypts(ns) {
		return p, nil
	}
	q := *p
	if out := p.State.Output; len(out) > 0 && !history.MaybeSealed(out) {
		// An operator's append to a completed task (an erasure, a request
		// to compensate): the state was replayed from opened events. The
		// row keeps the output as its task_completed sealed it, the same
		// bytes replay gives; sealing it again would differ from both.
		t, err := s.Store.TaskGetByID(ctx, ns, p.TaskID)
		if err != nil {
			return nil, err
		}
		q.State.Output = t.Output
	}
	if !appendCarriesPayload(p) {
		return &q, nil
	}
	aead, err := s.dataKey(ctx, ns, p.TaskID, true)
	if err != nil {
		return nil, err
	}
	// Whatever it looks like: a user's value shaped like a sealed one is
	// sealed too, never stored as it is.
	seal := func(raw json.RawMessage) json.RawMessage { return sealPayload(aead, p.TaskID, raw, nil) }
	q.Payloads = make([]history.Payload, len(p.Payloads))
	for i, pl := range p.Payloads {
		if raw := payloadRaw(pl); len(raw) > 0 {
			pl = history.WithUserData(pl, seal(raw))
		}
		q.Payloads[i] = pl
	}
	return &q, nil
}

// appendCarriesPayload reports whether p writes a payload to seal.
func appendCarriesPayload(p *store.EventAppendParams) bool {
	for _, pl := range p.Payloads {
		if len(payloadRaw(pl)) > 0 {
			return true
		}
	}
	return false
}

// dataKey returns task id's data key: from the cache, else from its row;
// with create, a task without one gets one (a task a schedule started).
func (s *SealedStore) dataKey(ctx context.Context, ns string, id uuid.UUID, create bool) (cipher.AEAD, error) {
	if aead := s.keys.get(id); aead != nil {
		return aead, nil
	}
	keys, err := s.Store.TaskDataKeys(ctx, []uuid.UUID{id})
	if err != nil {
		return nil, err
	}
	wrapped := keys[id]
	if wrapped == nil && create {
		_, fresh, err := s.codec.newDataKey(ns, id)
		if err != nil {
			return nil, err
		}
		if wrapped, err = s.Store.TaskDataKeySet(ctx, id, fresh); err != nil {
			return nil, err
		}
	}
	if wrapped == nil {
		return nil, errmark.Mark(errors.Wrapf(errNoDataKey, "task %s", id), ErrPayloadSealed)
	}
	aead, err := s.codec.unwrap(ns, id, wrapped)
	if err != nil {
		return nil, err
	}
	s.keys.put(id, aead)
	return aead, nil
}

// errNoDataKey is dataKey's error for a task without a data key: erased,
// gone, or finished without one.
var errNoDataKey = errors.New("the task has no data key: it was erased, or finished without writing a payload under encryption")

// TaskSignal implements [store.Store]. A signal to a task named by its
// idempotency key is sealed with the namespace key (the task is not known
// before the store finds it): an erasure of the task does not shred it.
func (s *SealedStore) TaskSignal(ctx context.Context, p *store.TaskSignalParams) (store.SignalResult, error) {
	if !s.codec.Encrypts(p.Namespace) || len(p.Payload) == 0 {
		return s.Store.TaskSignal(ctx, p)
	}
	q := *p
	if p.TaskID == uuid.Nil {
		q.Payload = s.codec.sealWithNamespaceKey(p.Namespace, p.Payload)
		return s.Store.TaskSignal(ctx, &q)
	}
	aead, err := s.dataKey(ctx, p.Namespace, p.TaskID, true)
	if errors.Is(err, errNoDataKey) {
		// No key, and none can be given: the task has finished (the store
		// refuses the signal) or is gone (not found). Nothing is written
		// either way; the store says which.
		q.Payload = s.codec.sealWithNamespaceKey(p.Namespace, p.Payload)
		return s.Store.TaskSignal(ctx, &q)
	}
	if err != nil {
		return store.SignalResult{}, err
	}
	q.Payload = sealPayload(aead, p.TaskID, p.Payload, nil)
	return s.Store.TaskSignal(ctx, &q)
}

// BlobPut implements [store.Store]: the blob's bytes are sealed with its
// task's data key (the digest the caller recorded stays the plaintext's).
func (s *SealedStore) BlobPut(ctx context.Context, b *store.Blob) error {
	if !s.codec.Encrypts(b.Namespace) {
		return s.Store.BlobPut(ctx, b)
	}
	aead, err := s.dataKey(ctx, b.Namespace, b.TaskID, true)
	if err != nil {
		return err
	}
	q := *b
	q.Data = sealInto(aead, []byte(sealedBlobMagic), b.Data, blobAD(b.Key))
	return s.Store.BlobPut(ctx, &q)
}

// sealedBlobMagic begins a sealed blob's bytes: a blob written before its
// namespace was encrypted has none, and is read as it is.
const sealedBlobMagic = "\x00cairn-sealed-blob-v1\x00"

// BlobGet implements [store.Store].
func (s *SealedStore) BlobGet(ctx context.Context, namespace, key string) (*store.Blob, error) {
	b, err := s.Store.BlobGet(ctx, namespace, key)
	if err != nil || !bytes.HasPrefix(b.Data, []byte(sealedBlobMagic)) {
		return b, err
	}
	aead, err := s.dataKey(ctx, namespace, b.TaskID, false)
	if err != nil {
		return nil, errors.Wrapf(err, "blob %s", key)
	}
	if b.Data, err = openFrom(aead, b.Data[len(sealedBlobMagic):], blobAD(key)); err != nil {
		return nil, errmark.Mark(errors.Newf("blob %s of task %s does not open with its task's key", key, b.TaskID), ErrPayloadCorrupt)
	}
	return b, nil
}

func blobAD(key string) []byte { return []byte("cairn blob " + key) }

// ScheduleCreate implements [store.Store]: a schedule's input belongs to
// no one task, so it is sealed with the namespace key itself.
func (s *SealedStore) ScheduleCreate(ctx context.Context, sc store.Schedule) error {
	if s.codec.Encrypts(sc.Namespace) && len(sc.Input) > 0 {
		sc.Input = s.codec.sealWithNamespaceKey(sc.Namespace, sc.Input)
	}
	return s.Store.ScheduleCreate(ctx, sc)
}

// ScheduleList implements [store.Store].
func (s *SealedStore) ScheduleList(ctx context.Context, namespace string) ([]store.Schedule, error) {
	out, err := s.Store.ScheduleList(ctx, namespace)
	if err != nil {
		return nil, err
	}
	o := s.newOpener(ctx)
	for i := range out {
		out[i].Input = o.open(namespace, out[i].Input)
	}
	return out, o.err
}

// TaskGetByID implements [store.Store].
func (s *SealedStore) TaskGetByID(ctx context.Context, namespace string, id uuid.UUID) (*store.Task, error) {
	t, err := s.Store.TaskGetByID(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	return t, s.openTasks(ctx, []*store.Task{t})
}

// TaskGetManyByID implements [store.Store].
func (s *SealedStore) TaskGetManyByID(ctx context.Context, ids []uuid.UUID) ([]*store.Task, error) {
	ts, err := s.Store.TaskGetManyByID(ctx, ids)
	if err != nil {
		return nil, err
	}
	return ts, s.openTasks(ctx, ts)
}

// TaskList implements [store.Store].
func (s *SealedStore) TaskList(ctx context.Context, p *store.TaskListParams) ([]*store.Task, error) {
	ts, err := s.Store.TaskList(ctx, p)
	if err != nil {
		return nil, err
	}
	return ts, s.openTasks(ctx, ts)
}

// DeadLetterList implements [store.Store].
func (s *SealedStore) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.Task, error) {
	ts, err := s.Store.DeadLetterList(ctx, p)
	if err != nil {
		return nil, err
	}
	return ts, s.openTasks(ctx, ts)
}

// EventListByTask implements [store.Store].
func (s *SealedStore) EventListByTask(ctx context.Context, id uuid.UUID) ([]history.Event, error) {
	events, err := s.Store.EventListByTask(ctx, id)
	if err != nil || len(events) == 0 {
		return events, err
	}
	o := s.newOpener(ctx)
	ns := namespaceOf(events)
	for i := range events {
		events[i] = o.openEvent(ns, events[i])
	}
	return events, o.err
}

// EventListPage implements [store.Store]: the page's payloads opened
// with the keys of p's namespace and task.
func (s *SealedStore) EventListPage(ctx context.Context, p *store.EventPageParams) ([]history.Event, error) {
	events, err := s.Store.EventListPage(ctx, p)
	if err != nil || len(events) == 0 {
		return events, err
	}
	o := s.newOpener(ctx)
	for i := range events {
		events[i] = o.openEvent(p.Namespace, events[i])
	}
	return events, o.err
}

// EventListByTasks implements [store.Store].
func (s *SealedStore) EventListByTasks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]history.Event, error) {
	all, err := s.Store.EventListByTasks(ctx, ids)
	if err != nil {
		return nil, err
	}
	return all, s.openEventsByTask(ctx, all, nil)
}

// EventListAfter implements [store.Store]. A task's namespace, which
// opening takes, is in its first event: for a part of a log without it
// that holds a sealed payload, it is read from the task's row unless the
// task's key is cached (a parent polled for its children's ends).
func (s *SealedStore) EventListAfter(ctx context.Context, after map[uuid.UUID]int64) (map[uuid.UUID][]history.Event, error) {
	all, err := s.Store.EventListAfter(ctx, after)
	if err != nil {
		return nil, err
	}
	var unknown []uuid.UUID
	for id, events := range all {
		if namespaceOf(events) == "" && anySealed(events) && s.keys.get(id) == nil {
			unknown = append(unknown, id)
		}
	}
	namespaces := map[uuid.UUID]string{}
	if len(unknown) > 0 {
		tasks, err := s.Store.TaskGetManyByID(ctx, unknown)
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			namespaces[t.ID] = t.Namespace
		}
	}
	return all, s.openEventsByTask(ctx, all, namespaces)
}

// anySealed reports whether an event of events has a payload that may be
// sealed.
func anySealed(events []history.Event) bool {
	for _, e := range events {
		if raw, ok := history.UserData(e.Data); ok && history.MaybeSealed(raw) {
			return true
		}
	}
	return false
}

// openEventsByTask opens the payloads of events of several tasks, in
// place, each in its namespace: namespaces's, or its first event's.
func (s *SealedStore) openEventsByTask(ctx context.Context, all map[uuid.UUID][]history.Event, namespaces map[uuid.UUID]string) error {
	o := s.newOpener(ctx)
	o.prefetch(slices.Collect(maps.Keys(all)))
	for id, events := range all {
		ns, ok := namespaces[id]
		if !ok {
			ns = namespaceOf(events)
		}
		for i := range events {
			events[i] = o.openEvent(ns, events[i])
		}
	}
	return o.err
}

// TaskClaim implements [store.Store].
func (s *SealedStore) TaskClaim(ctx context.Context, p *store.TaskClaimManyParams) (store.ClaimResult, error) {
	res, err := s.Store.TaskClaim(ctx, p)
	if err != nil {
		return res, err
	}
	s.openClaimed(ctx, res.Tasks)
	return res, nil
}

// TaskClaimMany implements [store.Store].
func (s *SealedStore) TaskClaimMany(ctx context.Context, p *store.TaskClaimManyParams) ([]*store.ClaimedTask, error) {
	claimed, err := s.Store.TaskClaimMany(ctx, p)
	if err != nil {
		return nil, err
	}
	s.openClaimed(ctx, claimed)
	return claimed, nil
}

func (s *SealedStore) openClaimed(ctx context.Context, claimed []*store.ClaimedTask) {
	if len(claimed) == 0 {
		return
	}
	o := s.newOpener(ctx)
	ids := make([]uuid.UUID, 0, len(claimed))
	for _, c := range claimed {
		if c.Task != nil && s.codec.Encrypts(c.Task.Namespace) {
			ids = append(ids, c.Task.ID)
		}
	}
	o.prefetch(ids) // one read of the batch's keys
	for _, c := range claimed {
		if c.Task == nil || !s.codec.Encrypts(c.Task.Namespace) {
			continue
		}
		ns := c.Task.Namespace
		c.Task.Input, c.Task.Output = o.open(ns, c.Task.Input), o.open(ns, c.Task.Output)
		for i := range c.Events {
			c.Events[i] = o.openEvent(ns, c.Events[i])
		}
		c.State = o.openState(c.State)
	}
}

// EventScan implements [store.Store].
func (s *SealedStore) EventScan(ctx context.Context, p *store.EventScanParams) ([]store.AuditEvent, error) {
	out, err := s.Store.EventScan(ctx, p)
	if err != nil {
		return nil, err
	}
	o := s.newOpener(ctx)
	for i := range out {
		e := &out[i]
		if !s.codec.Encrypts(e.Namespace) {
			continue
		}
		opened := o.openEvent(e.Namespace, e.Event)
		if data, err := history.Encode(opened.Data); err == nil && o.changed {
			e.Event, e.Data = opened, data
		}
		o.changed = false
	}
	return out, o.err
}

func (s *SealedStore) openTasks(ctx context.Context, ts []*store.Task) error {
	o := s.newOpener(ctx)
	for _, t := range ts {
		if t == nil || !s.codec.Encrypts(t.Namespace) {
			continue
		}
		t.Input, t.Output = o.open(t.Namespace, t.Input), o.open(t.Namespace, t.Output)
	}
	return o.err
}

func (s *SealedStore) openState(ctx context.Context, st history.State) history.State {
	if !s.codec.Encrypts(st.Scheduled.Namespace) {
		return st
	}
	return s.newOpener(ctx).openState(st)
}

// opener opens the sealed payloads of one read, fetching the data keys it
// needs once.
type opener struct {
	ctx     context.Context
	s       *SealedStore
	keys    map[uuid.UUID]cipher.AEAD // nil entry: no key (erased, or not configured here)
	pending map[uuid.UUID][]byte      // wrapped keys prefetched, not yet opened
	// opened memoizes open by the sealed bytes: a claimed task's input is
	// in its row, its first event and its state, the same bytes thrice.
	// An append's result also finds here the plaintexts it sealed.
	opened  map[string]json.RawMessage
	changed bool // a payload was opened since this was last reset
	// err is the first failure to read keys from the database: a read
	// reports it rather than handing payloads on sealed as if erased.
	err error
}

func (s *SealedStore) newOpener(ctx context.Context) *opener {
	return &opener{ctx: ctx, s: s, keys: map[uuid.UUID]cipher.AEAD{}, opened: map[string]json.RawMessage{}}
}

// prefetch reads the data keys of ids not cached, in one read.
func (o *opener) prefetch(ids []uuid.UUID) {
	var missing []uuid.UUID
	for _, id := range ids {
		if aead := o.s.keys.get(id); aead != nil {
			o.keys[id] = aead
		} else if _, seen := o.keys[id]; !seen {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return
	}
	wrapped, err := o.s.Store.TaskDataKeys(o.ctx, missing)
	if err != nil {
		o.fail(err)
		return
	}
	for _, id := range missing {
		if wrapped[id] == nil {
			o.keys[id] = nil
		}
	}
	o.pending = wrapped
}

// key returns task id's data key in namespace ns, nil when there is none.
func (o *opener) key(ns string, id uuid.UUID) cipher.AEAD {
	if aead, seen := o.keys[id]; seen {
		return aead
	}
	if wrapped, ok := o.pending[id]; ok {
		delete(o.pending, id)
		aead, err := o.s.codec.unwrap(ns, id, wrapped)
		if err == nil {
			o.s.keys.put(id, aead)
		}
		o.keys[id] = aead
		return aead
	}
	aead, err := o.s.dataKey(o.ctx, ns, id, false)
	if err != nil {
		o.fail(err)
		aead = nil
	}
	o.keys[id] = aead
	return aead
}

// fail records err unless it only says a payload stays sealed (no key
// for it, or one that does not open it).
func (o *opener) fail(err error) {
	if o.err == nil && !errors.Is(err, ErrPayloadSealed) && !errors.Is(err, ErrPayloadCorrupt) {
		o.err = errors.Wrap(err, "read the data keys to open payloads")
	}
}

// open returns raw opened, or raw as it is when it is not sealed or does
// not open here.
func (o *opener) open(ns string, raw json.RawMessage) json.RawMessage {
	if !history.MaybeSealed(raw) {
		return raw
	}
	if plain, ok := o.opened[string(raw)]; ok {
		o.changed = true
		return plain
	}
	plain := o.openSealed(ns, raw)
	if len(plain) > 0 && !bytes.Equal(plain, raw) {
		o.opened[string(raw)] = plain
		o.changed = true
	}
	return plain
}

// openSealed is open without the memo.
func (o *opener) openSealed(ns string, raw json.RawMessage) json.RawMessage {
	sealed, ok := history.ParseSealed(raw)
	if !ok {
		return raw
	}
	var plain []byte
	var err error
	if sealed.Key != "" {
		plain, err = o.s.codec.openWithNamespaceKey(ns, sealed)
	} else {
		owner, perr := uuid.Parse(sealed.Task)
		if perr != nil {
			return raw
		}
		aead := o.key(ns, owner)
		if aead == nil {
			return raw
		}
		plain, err = openFrom(aead, sealed.Data, payloadAD(sealed.Task))
	}
	if err != nil {
		return raw
	}
	return plain
}

func (o *opener) openEvent(ns string, e history.Event) history.Event {
	if raw, ok := history.UserData(e.Data); ok {
		e.Data = history.WithUserData(e.Data, o.open(ns, raw))
	}
	return e
}

func (o *opener) openState(st history.State) history.State {
	ns := st.Scheduled.Namespace
	st.Scheduled.Input = o.open(ns, st.Scheduled.Input)
	st.Output = o.open(ns, st.Output)
	st.Steps = openEach(st.Steps, func(x *history.Step) { x.Output = o.open(ns, x.Output) })
	st.Ahead = openEach(st.Ahead, func(x *history.Step) { x.Output = o.open(ns, x.Output) })
	st.Signals = openEach(st.Signals, func(x *history.Signal) { x.Payload = o.open(ns, x.Payload) })
	st.Children = openEach(st.Children, func(x *history.Child) { x.Output = o.open(ns, x.Output) })
	return st
}

// openEach returns a copy of xs with open applied to each (xs itself when
// empty): a state's slices may be shared with the caller's.
func openEach[T any](xs []T, open func(*T)) []T {
	if len(xs) == 0 {
		return xs
	}
	out := slices.Clone(xs)
	for i := range out {
		open(&out[i])
	}
	return out
}

func namespaceOf(events []history.Event) string {
	if len(events) == 0 {
		return ""
	}
	if sc, ok := events[0].Data.(history.TaskScheduledData); ok {
		return sc.Namespace
	}
	return ""
}

// OpenArchived opens the sealed payloads of an archived task with the
// wrapped data key its record keeps (an erased task's has none, and its
// payloads stay sealed). Records of namespaces the codec has no keys for
// are returned as they are.
func (s *SealedStore) OpenArchived(ctx context.Context, t ArchivedTask) ArchivedTask {
	if !s.codec.Encrypts(t.Namespace) {
		return t
	}
	o := s.newOpener(ctx)
	if len(t.DataKey) > 0 {
		if aead, err := s.codec.unwrap(t.Namespace, t.TaskID, t.DataKey); err == nil {
			o.keys[t.TaskID] = aead
		}
	} else {
		o.keys[t.TaskID] = nil // erased: not looked up in the database either
	}
	events := make([]history.Event, len(t.Events))
	for i, e := range t.Events {
		events[i] = o.openEvent(t.Namespace, e)
	}
	t.Events = events
	return t
}

// OpenArchivedBlob opens the bytes of an archived blob of task id with the
// wrapped data key of the task's archived record (sealed bytes only; a
// blob written in clear is returned as it is).
func (s *SealedStore) OpenArchivedBlob(namespace string, id uuid.UUID, wrapped []byte, key string, data []byte) ([]byte, error) {
	if !bytes.HasPrefix(data, []byte(sealedBlobMagic)) {
		return data, nil
	}
	if len(wrapped) == 0 {
		return nil, errmark.Mark(errors.Newf("blob %s of task %s: the task was erased", key, id), ErrPayloadSealed)
	}
	aead, err := s.codec.unwrap(namespace, id, wrapped)
	if err != nil {
		return nil, errors.Wrapf(err, "blob %s", key)
	}
	out, err := openFrom(aead, data[len(sealedBlobMagic):], blobAD(key))
	if err != nil {
		return nil, errmark.Mark(errors.Newf("blob %s of task %s does not open with its task's key", key, id), ErrPayloadCorrupt)
	}
	return out, nil
}

// BlobSealed reports whether blob bytes, as a database or an archive
// holds them, are sealed (encrypted with their task's data key).
func BlobSealed(data []byte) bool { return bytes.HasPrefix(data, []byte(sealedBlobMagic)) }
