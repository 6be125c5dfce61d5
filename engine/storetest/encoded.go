package storetest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/offload"
	"github.com/cairnflow/cairn/payload/seal"
)

// RunEncoded runs the suite as [Run] does, with every payload the tests
// write passing through the payload codecs the SDK chains at its edge:
// offloading (a payload of a task over encodedThreshold bytes kept as a
// blob of the task, its bytes in a directory bucket) and then encryption
// (keys for the namespaces the tests use). So the driver is given, and
// holds, what production writes: sealed inputs that an idempotency key's
// reuse compares by their keyed digests, references, wrapped data keys,
// blob rows naming a bucket, sealed outputs a child's end copies into its
// parent. The tests read back through the same codecs, so their
// assertions hold as they are; the check that ends every test replays the
// driver's own stored events against its own rows.
//
// The tests of what the codecs own (blob rows and data keys, which they
// write and read themselves) run bare only, in [Run].
func RunEncoded(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	keys := encodedKeys(t)
	run(t, newStore, func(t *testing.T, s store.Store) store.Store { return newEncodedStore(t, s, keys) })
}

// encodedThreshold is the offloading threshold of [RunEncoded]: the
// tests' small payloads stay in place, their large ones go by reference.
const encodedThreshold = 512

// encodedNamespaces are the namespaces [RunEncoded] encrypts: the ones the
// tests use.
var encodedNamespaces = []string{store.DefaultNamespace, "tenant-b", "other"}

// encodedKeys are fresh keys for encodedNamespaces.
func encodedKeys(t *testing.T) *seal.Keys {
	t.Helper()
	cfg := seal.Config{Namespaces: map[string]seal.NamespaceKeys{}}
	for _, ns := range encodedNamespaces {
		k := make([]byte, 32)
		_, err := rand.Read(k)
		require.NoError(t, err)
		cfg.Namespaces[ns] = seal.NamespaceKeys{Current: "k1", Keys: []seal.KeyEntry{{ID: "k1", Key: base64.StdEncoding.EncodeToString(k)}}}
	}
	keys, err := seal.NewKeys(cfg)
	require.NoError(t, err)
	return keys
}

// encodedStore is the test's wiring of a driver under the payload codecs,
// as the SDK's edge wires its own (sdk/internal/edge): it encodes the
// payloads of what the tests write and decodes what they read. It is
// test code: in production nothing wraps a store, and the SDK's edge alone
// writes payloads.
type encodedStore struct {
	store.Store
	stage *payload.Stage
	blobs *offload.Store

	mu         sync.Mutex
	namespaces map[uuid.UUID]string // of the tasks seen, for decoding their events
}

func newEncodedStore(t *testing.T, s store.Store, keys *seal.Keys) *encodedStore {
	blobs, err := offload.NewStore(blobTable{s}, "file://"+filepath.ToSlash(t.TempDir()))
	require.NoError(t, err)
	stage := payload.NewStage(blobs, offload.New(encodedThreshold), seal.New(keys, dataKeys{s}))
	return &encodedStore{Store: s, stage: stage, blobs: blobs, namespaces: map[uuid.UUID]string{}}
}

// blobTable is a store's blobs table as payload/offload takes it.
type blobTable struct{ s store.Store }

func (t blobTable) BlobPut(ctx context.Context, b *payload.Blob) error {
	return t.s.BlobPut(ctx, &store.BlobPutParams{Namespace: b.Namespace, Key: b.Key, TaskID: b.TaskID, ContentType: b.ContentType,
		SHA256: b.SHA256, Data: b.Data, Size: b.Size, Location: b.Location})
}

func (t blobTable) BlobGet(ctx context.Context, namespace, key string) (*payload.Blob, error) {
	b, err := t.s.BlobGet(ctx, &store.BlobGetParams{Namespace: namespace, Key: key})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = errmark.Mark(err, payload.ErrNotFound)
		}
		return nil, err
	}
	return &payload.Blob{Namespace: b.Namespace, Key: b.Key, TaskID: b.TaskID, ContentType: b.ContentType,
		SHA256: b.SHA256, Data: b.Data, Size: b.Size, CreatedAt: b.CreatedAt, Location: b.Location}, nil
}

// dataKeys are a store's data keys as payload/seal takes them, as the
// SDK's edge adapts its own.
type dataKeys struct{ s store.Store }

func (d dataKeys) TaskDataKeys(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]byte, error) {
	return d.s.TaskDataKeys(ctx, &store.TaskDataKeysParams{IDs: ids})
}

func (d dataKeys) TaskDataKeySet(ctx context.Context, id uuid.UUID, key []byte) ([]byte, error) {
	return d.s.TaskDataKeySet(ctx, &store.TaskDataKeySetParams{ID: id, DataKey: key})
}

func storeBlob(b *payload.Blob) *store.Blob {
	return &store.Blob{Namespace: b.Namespace, Key: b.Key, TaskID: b.TaskID, ContentType: b.ContentType,
		SHA256: b.SHA256, Data: b.Data, Size: b.Size, CreatedAt: b.CreatedAt, Location: b.Location}
}

// learn records the namespace of task id.
func (s *encodedStore) learn(id uuid.UUID, namespace string) {
	if id == uuid.Nil || namespace == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.namespaces[id] = namespace
}

// namespaceOf is task id's namespace: as seen, else its row's ("" when it
// has none).
func (s *encodedStore) namespaceOf(ctx context.Context, id uuid.UUID) string {
	s.mu.Lock()
	ns, ok := s.namespaces[id]
	s.mu.Unlock()
	if ok {
		return ns
	}
	tasks, err := s.Store.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []uuid.UUID{id}})
	if err != nil || len(tasks) == 0 {
		return ""
	}
	s.learn(id, tasks[0].Namespace)
	return tasks[0].Namespace
}

// decode decodes ps whole (references read back); a payload that does not
// decode stays as it is stored.
func (s *encodedStore) decode(ctx context.Context, ps []*payload.Payload) error {
	if len(ps) == 0 {
		return nil
	}
	return s.stage.Decode(ctx, ps)
}

// encodeStarts returns ps with their inputs encoded, each with its id, and
// what was encoded (to discard for starts not written). A start that sets
// a data key or blobs of its own is a test of those: it passes as it is.
func (s *encodedStore) encodeStarts(ctx context.Context, ps []*store.TaskStartParams) ([]*store.TaskStartParams, payload.Encoded, error) {
	var batch []*payload.Payload
	var at []int
	out := slices.Clone(ps)
	for i, p := range ps {
		if p.DataKey != nil || len(p.Blobs) > 0 {
			continue
		}
		q := *p
		if q.ID == uuid.Nil {
			q.ID = uuid.Must(uuid.NewV7())
		}
		out[i] = &q
		s.learn(q.ID, q.Namespace)
		batch = append(batch, &payload.Payload{Namespace: q.Namespace, Task: q.ID, Kind: payload.Input, Data: q.Scheduled.Input,
			Start: &payload.Start{Keyed: q.Scheduled.IdempotencyKey != ""}})
		at = append(at, i)
	}
	enc, err := s.stage.Encode(ctx, batch)
	if err != nil {
		return nil, payload.Encoded{}, err
	}
	for j, i := range at {
		pl := enc.At(j)
		out[i].Scheduled.Input, out[i].DataKey = pl.Data, pl.Start.DataKey
		for _, b := range pl.Start.Blobs {
			out[i].Blobs = append(out[i].Blobs, storeBlob(b))
		}
	}
	return out, enc, nil
}

// TaskStart implements [store.Store].
func (s *encodedStore) TaskStart(ctx context.Context, p *store.TaskStartParams) (store.TaskStartResult, error) {
	qs, enc, err := s.encodeStarts(ctx, []*store.TaskStartParams{p})
	if err != nil {
		return store.TaskStartResult{}, err
	}
	res, err := s.Store.TaskStart(ctx, qs[0])
	s.stage.Discard(ctx, enc, func(int) bool { return err == nil && !res.Existing })
	return res, err
}

// TaskStartMany implements [store.Store].
func (s *encodedStore) TaskStartMany(ctx context.Context, ps []*store.TaskStartParams) ([]store.TaskStartResult, error) {
	qs, enc, err := s.encodeStarts(ctx, ps)
	if err != nil {
		return nil, err
	}
	res, err := s.Store.TaskStartMany(ctx, qs)
	s.stage.Discard(ctx, enc, func(int) bool { return err == nil })
	return res, err
}

// encodeAppend returns p with the payloads it writes encoded, and its
// state's output as the row holds it: the driver writes the row's output
// from the state, which the test holds decoded.
func (s *encodedStore) encodeAppend(ctx context.Context, p *store.EventAppendParams) (*store.EventAppendParams, error) {
	q := *p
	ns := p.State.Scheduled.Namespace
	if ns == "" {
		ns = s.namespaceOf(ctx, p.TaskID)
	}
	if len(p.State.Output) > 0 {
		t, err := s.Store.TaskGet(ctx, &store.TaskGetParams{Namespace: ns, ID: p.TaskID})
		if err == nil {
			q.State.Output = t.Output
		}
	}
	var batch []*payload.Payload
	var at []int
	for i, d := range p.Payloads {
		if pl := payload.OfEvent(ns, p.TaskID, d); pl != nil && len(pl.Data) > 0 {
			batch, at = append(batch, pl), append(at, i)
		}
	}
	if len(batch) == 0 {
		return &q, nil
	}
	enc, err := s.stage.Encode(ctx, batch)
	if err != nil {
		return nil, err
	}
	q.Payloads = slices.Clone(p.Payloads)
	for j, i := range at {
		pl := enc.At(j)
		q.Payloads[i] = pl.Into(p.Payloads[i])
	}
	return &q, nil
}

// EventAppend implements [store.Store]. A signal (requests.Signal over
// this store) writes through it too: its payload is encoded here, after
// the signal checked it is JSON (sealed, the store could not tell).
func (s *encodedStore) EventAppend(ctx context.Context, p *store.EventAppendParams) (history.State, error) {
	q, err := s.encodeAppend(ctx, p)
	if err != nil {
		return p.State, err
	}
	next, err := s.Store.EventAppend(ctx, q)
	if err != nil {
		return p.State, err
	}
	return s.decodeState(ctx, p.TaskID, next)
}

// EventAppendMany implements [store.Store].
func (s *encodedStore) EventAppendMany(ctx context.Context, ps []*store.EventAppendParams) ([]store.AppendResult, error) {
	qs := make([]*store.EventAppendParams, len(ps))
	for i, p := range ps {
		var err error
		if qs[i], err = s.encodeAppend(ctx, p); err != nil {
			return nil, err
		}
	}
	res, err := s.Store.EventAppendMany(ctx, qs)
	for i := range res {
		if res[i].Err != nil {
			res[i].State = ps[i].State
			continue
		}
		if res[i].State, err = s.decodeState(ctx, ps[i].TaskID, res[i].State); err != nil {
			return nil, err
		}
	}
	return res, err
}

// startChildren starts children as [requests.StartChildren] does over
// the driver, their inputs (and the parent's append) encoded first, as
// the SDK's edge encodes them before the engine's attempt starts them.
func (s *encodedStore) startChildren(ctx context.Context, p *store.ChildStartParams) (store.ChildStartResult, error) {
	q := *p
	starts := make([]*store.TaskStartParams, len(p.Children))
	for i := range p.Children {
		starts[i] = &p.Children[i].Task
	}
	encoded, enc, err := s.encodeStarts(ctx, starts)
	if err != nil {
		return store.ChildStartResult{State: p.Parent.State}, err
	}
	q.Children = slices.Clone(p.Children)
	for i := range q.Children {
		q.Children[i].Task = *encoded[i]
	}
	parent, err := s.encodeAppend(ctx, &p.Parent)
	if err != nil {
		return store.ChildStartResult{State: p.Parent.State}, err
	}
	q.Parent = *parent
	res, err := requests.StartChildren(ctx, s.Store, &q)
	s.stage.Discard(ctx, enc, func(int) bool { return err == nil })
	if err != nil {
		res.State = p.Parent.State
		return res, err
	}
	res.State, err = s.decodeState(ctx, p.Parent.TaskID, res.State)
	return res, err
}

// ScheduleCreate implements [store.Store].
func (s *encodedStore) ScheduleCreate(ctx context.Context, p *store.ScheduleCreateParams) error {
	enc, err := s.stage.Encode(ctx, []*payload.Payload{{Namespace: p.Namespace, Kind: payload.ScheduleInput, Data: p.Input}})
	if err != nil {
		return err
	}
	q := *p
	q.Input = enc.At(0).Data
	return s.Store.ScheduleCreate(ctx, &q)
}

// BlobGet implements [store.Store]: the bytes from where the row says.
func (s *encodedStore) BlobGet(ctx context.Context, p *store.BlobGetParams) (*store.Blob, error) {
	b, err := s.blobs.BlobGet(ctx, p.Namespace, p.Key)
	if err != nil {
		return nil, err
	}
	return storeBlob(b), nil
}

// decodeTasks decodes the payloads of tasks, in place.
func (s *encodedStore) decodeTasks(ctx context.Context, tasks []*store.Task) error {
	var ps []*payload.Payload
	for _, t := range tasks {
		if t == nil {
			continue
		}
		s.learn(t.ID, t.Namespace)
		ps = append(ps,
			&payload.Payload{Namespace: t.Namespace, Task: t.ID, Kind: payload.Input, Data: t.Input},
			&payload.Payload{Namespace: t.Namespace, Task: t.ID, Kind: payload.Output, Data: t.Output})
	}
	if err := s.decode(ctx, ps); err != nil {
		return err
	}
	i := 0
	for _, t := range tasks {
		if t == nil {
			continue
		}
		t.Input, t.Output = ps[i].Data, ps[i+1].Data
		i += 2
	}
	return nil
}

// decodeEvents returns events of task id of namespace ns decoded.
func (s *encodedStore) decodeEvents(ctx context.Context, ns string, id uuid.UUID, events []history.Event) ([]history.Event, error) {
	if len(events) == 0 {
		return events, nil
	}
	if sc, ok := events[0].Data.(history.TaskScheduledData); ok && ns == "" {
		ns = sc.Namespace
	}
	if ns == "" {
		ns = s.namespaceOf(ctx, id)
	}
	var ps []*payload.Payload
	var at []int
	for i, e := range events {
		if p := payload.OfEvent(ns, id, e.Data); p != nil && (len(p.Data) > 0 || p.Ref != nil) {
			ps, at = append(ps, p), append(at, i)
		}
	}
	if err := s.decode(ctx, ps); err != nil {
		return nil, err
	}
	out := slices.Clone(events)
	for j, i := range at {
		out[i].Data = ps[j].Into(events[i].Data)
	}
	return out, nil
}

// decodeState returns st, task id's, with its payloads decoded.
func (s *encodedStore) decodeState(ctx context.Context, id uuid.UUID, st history.State) (history.State, error) {
	ns := st.Scheduled.Namespace
	var ps []*payload.Payload
	var set []func(json.RawMessage, *history.BlobRef)
	add := func(owner uuid.UUID, kind payload.Kind, data json.RawMessage, ref *history.BlobRef, put func(json.RawMessage, *history.BlobRef)) {
		if len(data) == 0 && ref == nil {
			return
		}
		ps = append(ps, &payload.Payload{Namespace: ns, Task: owner, Kind: kind, Data: data, Ref: ref})
		set = append(set, put)
	}
	add(id, payload.Input, st.Scheduled.Input, nil, func(d json.RawMessage, _ *history.BlobRef) { st.Scheduled.Input = d })
	add(id, payload.Output, st.Output, nil, func(d json.RawMessage, _ *history.BlobRef) { st.Output = d })
	st.Steps, st.Ahead = slices.Clone(st.Steps), slices.Clone(st.Ahead)
	for _, steps := range [][]history.Step{st.Steps, st.Ahead} {
		for i := range steps {
			step := &steps[i]
			add(id, payload.StepOutput, step.Output, step.OutputRef, func(d json.RawMessage, r *history.BlobRef) { step.Output, step.OutputRef = d, r })
		}
	}
	st.Signals = slices.Clone(st.Signals)
	for i := range st.Signals {
		sig := &st.Signals[i]
		add(id, payload.Signal, sig.Payload, nil, func(d json.RawMessage, _ *history.BlobRef) { sig.Payload = d })
	}
	st.Children = slices.Clone(st.Children)
	for i := range st.Children {
		child := &st.Children[i]
		if owner, err := uuid.Parse(child.ID); err == nil {
			add(owner, payload.Output, child.Output, nil, func(d json.RawMessage, _ *history.BlobRef) { child.Output = d })
		}
	}
	if err := s.decode(ctx, ps); err != nil {
		return st, err
	}
	for i, p := range ps {
		set[i](p.Data, p.Ref)
	}
	return st, nil
}

// TaskGet implements [store.Store].
func (s *encodedStore) TaskGet(ctx context.Context, p *store.TaskGetParams) (*store.Task, error) {
	t, err := s.Store.TaskGet(ctx, p)
	if err != nil {
		return nil, err
	}
	return t, s.decodeTasks(ctx, []*store.Task{t})
}

// TaskGetMany implements [store.Store].
func (s *encodedStore) TaskGetMany(ctx context.Context, p *store.TaskGetManyParams) ([]*store.Task, error) {
	ts, err := s.Store.TaskGetMany(ctx, p)
	if err != nil {
		return nil, err
	}
	return ts, s.decodeTasks(ctx, ts)
}

// TaskList implements [store.Store].
func (s *encodedStore) TaskList(ctx context.Context, p *store.TaskListParams) ([]*store.Task, error) {
	ts, err := s.Store.TaskList(ctx, p)
	if err != nil {
		return nil, err
	}
	return ts, s.decodeTasks(ctx, ts)
}

// DeadLetterList implements [store.Store].
func (s *encodedStore) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.Task, error) {
	ts, err := s.Store.DeadLetterList(ctx, p)
	if err != nil {
		return nil, err
	}
	return ts, s.decodeTasks(ctx, ts)
}

// EventListPage implements [store.Store].
func (s *encodedStore) EventListPage(ctx context.Context, p *store.EventPageParams) ([]history.Event, error) {
	events, err := s.Store.EventListPage(ctx, p)
	if err != nil {
		return nil, err
	}
	return s.decodeEvents(ctx, p.Namespace, p.TaskID, events)
}

// EventList implements [store.Store].
func (s *encodedStore) EventList(ctx context.Context, p *store.EventListParams) (map[uuid.UUID][]history.Event, error) {
	all, err := s.Store.EventList(ctx, p)
	if err != nil {
		return nil, err
	}
	for id, events := range all {
		if all[id], err = s.decodeEvents(ctx, p.Namespace, id, events); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// TaskClaim implements [store.Store].
func (s *encodedStore) TaskClaim(ctx context.Context, p *store.TaskClaimParams) (store.ClaimResult, error) {
	res, err := s.Store.TaskClaim(ctx, p)
	if err != nil {
		return res, err
	}
	return res, s.decodeClaimed(ctx, res.Tasks)
}

func (s *encodedStore) decodeClaimed(ctx context.Context, claimed []*store.ClaimedTask) error {
	for _, c := range claimed {
		if c.Task == nil {
			continue
		}
		if err := s.decodeTasks(ctx, []*store.Task{c.Task}); err != nil {
			return err
		}
		var err error
		if c.Events, err = s.decodeEvents(ctx, c.Task.Namespace, c.Task.ID, c.Events); err != nil {
			return err
		}
		if c.State, err = s.decodeState(ctx, c.Task.ID, c.State); err != nil {
			return err
		}
	}
	return nil
}

// EventScan implements [store.Store].
func (s *encodedStore) EventScan(ctx context.Context, p *store.EventScanParams) ([]store.AuditEvent, error) {
	out, err := s.Store.EventScan(ctx, p)
	if err != nil {
		return nil, err
	}
	for i := range out {
		e := &out[i]
		events, err := s.decodeEvents(ctx, e.Namespace, e.TaskID, []history.Event{e.Event})
		if err != nil {
			return nil, err
		}
		if data, err := history.Encode(events[0].Data); err == nil && string(data) != string(e.Data) {
			e.Event, e.Data = events[0], data
		}
	}
	return out, nil
}

// ScheduleList implements [store.Store].
func (s *encodedStore) ScheduleList(ctx context.Context, p *store.ScheduleListParams) ([]store.Schedule, error) {
	out, err := s.Store.ScheduleList(ctx, p)
	if err != nil {
		return nil, err
	}
	ps := make([]*payload.Payload, len(out))
	for i, sc := range out {
		ps[i] = &payload.Payload{Namespace: p.Namespace, Kind: payload.ScheduleInput, Data: sc.Input}
	}
	if err := s.decode(ctx, ps); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Input = ps[i].Data
	}
	return out, nil
}

// stored is the store under s, where the payloads are as the driver holds
// them: encoded, under the payload codecs.
func stored(s store.Store) store.Store {
	if e, ok := s.(*encodedStore); ok {
		return e.Store
	}
	return s
}

// requireEncoded checks that the store holds every payload of the
// encrypted namespaces sealed, in the tasks' rows and in their events: the
// driver was given, and kept, only what the codecs wrote.
func requireEncoded(t *testing.T, s store.Store) {
	t.Helper()
	ctx := testContext(t)
	ids := allTaskIDs(t, s)
	tasks, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: ids})
	require.NoError(t, err)
	byTask, err := s.EventList(ctx, store.EventListAll("", ids...))
	require.NoError(t, err)
	for _, task := range tasks {
		if !slices.Contains(encodedNamespaces, task.Namespace) {
			continue
		}
		for what, raw := range map[string]json.RawMessage{"input": task.Input, "output": task.Output} {
			require.True(t, len(raw) == 0 || history.MaybeSealed(raw), "task %s: its %s is stored in clear: %s", task.ID, what, raw)
		}
		for _, e := range byTask[task.ID] {
			raw, _ := history.UserData(e.Data)
			require.True(t, len(raw) == 0 || history.MaybeSealed(raw), "task %s: event %d (%s) holds its payload in clear: %s", task.ID, e.Seq, e.Type(), raw)
		}
	}
}
