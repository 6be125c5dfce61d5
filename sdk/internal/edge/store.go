package edge

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/offload"
	"github.com/cairnflow/cairn/payload/seal"
)

// Config configures a [Store].
type Config struct {
	// Store is the driver. Required.
	Store store.Store
	// Keys, when set, encrypt at rest the payloads of the namespaces they
	// have keys for (payload/seal).
	Keys *seal.Keys
	// BlobStore is where new blobs keep their bytes (payload/offload's
	// locations); "": the database.
	BlobStore string
	// BlobThreshold: a payload of one of the ByReference kinds with more
	// bytes is kept as a blob of its task. 0: none is.
	BlobThreshold int
	// ByReference are the kinds of payloads kept by reference over
	// BlobThreshold: a client's inputs and signals, a worker's outputs.
	ByReference []payload.Kind
	// ArchivedBlob, when set, reads a blob the store no longer has (its
	// task removed by retention) from the archives, reporting whether it
	// was there: a client's references resolve there too.
	ArchivedBlob func(ctx context.Context, namespace, key string) (*payload.Blob, bool, error)
}

// Store is the store as the SDK uses it: reads through the embedded
// [Reads], writes through its own methods, which encode. It is safe for
// concurrent use.
type Store struct {
	Reads
	st    store.Store
	stage *payload.Stage
	blobs *offload.Store // where blobs are, without the archives
	seal  *seal.Codec    // nil: no keys
}

// Reads are the methods of [store.Store] the SDK calls directly: reads,
// and writes that carry no payload.
type Reads interface {
	TaskGet(ctx context.Context, p *store.TaskGetParams) (*store.Task, error)
	TaskGetMany(ctx context.Context, p *store.TaskGetManyParams) ([]*store.Task, error)
	EventList(ctx context.Context, p *store.EventListParams) (map[uuid.UUID][]history.Event, error)
	TaskList(ctx context.Context, p *store.TaskListParams) ([]*store.Task, error)
	DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.Task, error)
	EventListPage(ctx context.Context, p *store.EventPageParams) ([]history.Event, error)
	EventScan(ctx context.Context, p *store.EventScanParams) ([]store.AuditEvent, error)
	NamespaceSet(ctx context.Context, p *store.NamespaceSetParams) error
	NamespaceList(ctx context.Context, p *store.NamespaceListParams) ([]store.NamespaceConfig, error)
	ScheduleList(ctx context.Context, p *store.ScheduleListParams) ([]store.Schedule, error)
	SchedulePause(ctx context.Context, p *store.SchedulePauseParams) error
	ScheduleDelete(ctx context.Context, p *store.ScheduleDeleteParams) error
	QueueSet(ctx context.Context, p *store.QueueSetParams) error
	QueueList(ctx context.Context, p *store.QueueListParams) ([]store.QueueInfo, error)
	QueueWaitList(ctx context.Context, p *store.QueueWaitListParams) ([]store.QueueWait, error)
	RateLimitSet(ctx context.Context, p *store.RateLimitSetParams) error
	RateLimitDelete(ctx context.Context, p *store.RateLimitDeleteParams) error
	ModelLimitSet(ctx context.Context, p *store.ModelLimitSetParams) error
	ModelLimitList(ctx context.Context, p *store.ModelLimitListParams) ([]store.ModelLimit, error)
	ModelLimitDelete(ctx context.Context, p *store.ModelLimitDeleteParams) error
	TaskTypeRegister(ctx context.Context, p *store.TaskTypeRegisterParams) error
	TaskTypeList(ctx context.Context, p *store.TaskTypeListParams) ([]store.TaskType, error)
	StrandedList(ctx context.Context, p *store.StrandedListParams) ([]store.StrandedTask, error)
	InquiryGet(ctx context.Context, p *store.InquiryGetParams) (*store.Inquiry, error)
	QueueStatsList(ctx context.Context, p *store.QueueStatsListParams) ([]store.QueueStats, error)
	QueueSeries(ctx context.Context, p *store.QueueSeriesParams) ([]store.QueueSeries, error)
	TaskUsageList(ctx context.Context, p *store.TaskUsageListParams) ([]store.TaskUsageFacts, error)
	UsageSeries(ctx context.Context, p *store.UsageSeriesParams) ([]store.UsageCell, error)
}

// New returns the SDK's store over cfg.Store.
func New(cfg Config) (*Store, error) {
	blobs, err := offload.NewStore(table{cfg.Store}, cfg.BlobStore)
	if err != nil {
		return nil, err
	}
	var kept payload.Blobs = blobs
	if cfg.ArchivedBlob != nil {
		kept = archiving{Store: blobs, archived: cfg.ArchivedBlob}
	}
	codecs := []payload.Codec{offload.New(cfg.BlobThreshold, cfg.ByReference...)}
	var sealing *seal.Codec
	if cfg.Keys != nil {
		sealing = seal.New(cfg.Keys, dataKeys{cfg.Store})
		codecs = append(codecs, sealing)
	}
	return &Store{Reads: cfg.Store, st: cfg.Store, stage: payload.NewStage(kept, codecs...), blobs: blobs, seal: sealing}, nil
}

// Engine is the store itself, for the engine's runtime and its requests
// (cancel, requeue, erase, diagnose, the notifier): they write no payload
// of their own, and an attempt's go through [Store.Handler].
func (e *Store) Engine() store.Store { return e.st }

// Forget drops what the stage keeps of task id (its data key): after the
// task was erased.
func (e *Store) Forget(id uuid.UUID) {
	if e.seal != nil {
		e.seal.Forget(id)
	}
}

// Decode decodes ps (see [payload.Stage.Decode]); a payload's error that
// says its blob is not there is marked [store.ErrNotFound] too, as the
// SDK's callers test.
func (e *Store) Decode(ctx context.Context, ps []*payload.Payload) error {
	if err := e.stage.Decode(ctx, ps); err != nil {
		return err
	}
	for _, p := range ps {
		p.Err = notFound(p.Err)
	}
	return nil
}

// notFound marks err store.ErrNotFound when it says a blob is not there.
func notFound(err error) error {
	if err != nil && errors.Is(err, payload.ErrNotFound) && !errors.Is(err, store.ErrNotFound) {
		return errmark.Mark(err, store.ErrNotFound)
	}
	return err
}

// table is the store's blobs table as payload/offload takes it.
type table struct{ st store.Store }

func (t table) BlobPut(ctx context.Context, b *payload.Blob) error {
	return t.st.BlobPut(ctx, &store.BlobPutParams{Namespace: b.Namespace, Key: b.Key, TaskID: b.TaskID, ContentType: b.ContentType,
		SHA256: b.SHA256, Data: b.Data, Size: b.Size, Location: b.Location})
}

func (t table) BlobGet(ctx context.Context, namespace, key string) (*payload.Blob, error) {
	b, err := t.st.BlobGet(ctx, &store.BlobGetParams{Namespace: namespace, Key: key})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = errmark.Mark(err, payload.ErrNotFound)
		}
		return nil, err
	}
	return &payload.Blob{Namespace: b.Namespace, Key: b.Key, TaskID: b.TaskID, ContentType: b.ContentType,
		SHA256: b.SHA256, Data: b.Data, Size: b.Size, CreatedAt: b.CreatedAt, Location: b.Location}, nil
}

// dataKeys are the tasks' data keys as payload/seal takes them: read by
// the ids of the tasks whose payloads the stage holds, in their own
// namespaces.
type dataKeys struct{ st store.Store }

func (d dataKeys) TaskDataKeys(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]byte, error) {
	return d.st.TaskDataKeys(ctx, &store.TaskDataKeysParams{IDs: ids})
}

func (d dataKeys) TaskDataKeySet(ctx context.Context, id uuid.UUID, key []byte) ([]byte, error) {
	return d.st.TaskDataKeySet(ctx, &store.TaskDataKeySetParams{ID: id, DataKey: key})
}

// storeBlobs are blobs as the store's start takes them.
func storeBlobs(bs []*payload.Blob) []*store.Blob {
	if len(bs) == 0 {
		return nil
	}
	out := make([]*store.Blob, len(bs))
	for i, b := range bs {
		out[i] = &store.Blob{Namespace: b.Namespace, Key: b.Key, TaskID: b.TaskID, ContentType: b.ContentType,
			SHA256: b.SHA256, Data: b.Data, Size: b.Size, CreatedAt: b.CreatedAt, Location: b.Location}
	}
	return out
}

// archiving is a blob store that reads a blob the store no longer has
// from the archives.
type archiving struct {
	*offload.Store
	archived func(ctx context.Context, namespace, key string) (*payload.Blob, bool, error)
}

func (a archiving) BlobGet(ctx context.Context, namespace, key string) (*payload.Blob, error) {
	b, err := a.Store.BlobGet(ctx, namespace, key)
	if !errors.Is(err, payload.ErrNotFound) {
		return b, err
	}
	// Removed with its task: the archive may hold it.
	archived, found, aerr := a.archived(ctx, namespace, key)
	if aerr != nil {
		return nil, aerr
	}
	if !found {
		return nil, err
	}
	return archived, nil
}
