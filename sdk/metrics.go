package sdk

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// configuredStore is the store a Client or Worker writes through: st when
// set, else a PostgreSQL store of pg; in both cases counting into
// metrics when it is set (see observedStore).
// sealedStore is configuredStore with encryption: codec's decorator over
// it, outermost. A Store sealed already keeps its own codec (codec, when
// set too, must be the same), with the metrics' wrapper put under it: two
// decorators, or one hidden under the metrics', would seal twice or not
// be found (StartDynamicTx, archives, erasure look for it).
func sealedStore(st store.Store, pg pgstore.Config, metrics *engine.Metrics, codec *engine.Codec, blobStore string) (store.Store, error) {
	if sealed, ok := st.(*engine.SealedStore); ok {
		if codec != nil && codec != sealed.Codec() {
			return nil, errors.New("sdk: Codec is set in the config and, to another codec, on its Store: set it in one place")
		}
		codec, st = sealed.Codec(), sealed.Unwrap()
	}
	if blobs, ok := st.(*engine.BlobStore); ok {
		switch {
		case blobStore == "":
			blobStore = blobs.Location()
		case blobs.Location() != "" && blobs.Location() != blobStore:
			return nil, errors.New("sdk: BlobStore is set in the config and, to another location, on its Store (engine.BlobStoreOver): set it in one place")
		}
		st = blobs.Unwrap()
	}
	st, err := configuredStore(st, pg, metrics)
	if err != nil {
		return nil, err
	}
	if st, err = engine.BlobStoreOver(st, blobStore, nil); err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	return engine.SealStore(st, codec), nil
}

func configuredStore(st store.Store, pg pgstore.Config, metrics *engine.Metrics) (store.Store, error) {
	if st == nil {
		if metrics != nil {
			pg.Metrics = metrics
		}
		return pgstore.New(pg)
	}
	if metrics == nil {
		return st, nil
	}
	switch own := ownObserver(st); {
	case own == nil:
		return &observedStore{Store: st, obs: metrics}, nil
	case own == store.Observer(metrics):
		return st, nil // the store counts into the same metrics already
	default:
		return nil, errors.New("sdk: Metrics is set in the config and, to other metrics, on its Store: " +
			"every event would be counted twice; set Metrics in one place (the config, or the store's Config.Metrics)")
	}
}

// observerReporter is a store that says which observer it counts its
// writes into: both drivers do (pgstore.Store.Observer,
// sqlitestore.Store.Observer). A decorator that embeds store.Store does
// not, and is counted again by the SDK's Metrics.
type observerReporter interface {
	Observer() store.Observer
}

// ownObserver is the observer st counts into itself, nil when none (or
// when it does not say).
func ownObserver(st store.Store) store.Observer {
	r, ok := st.(observerReporter)
	if !ok {
		return nil
	}
	own := r.Observer()
	if m, isMetrics := own.(*engine.Metrics); isMetrics && m == nil {
		return nil // a typed nil counts nothing
	}
	return own
}

// observedStore counts what a caller-given store commits into obs, as a
// driver does with its Config.Metrics: an append once it is written (a
// refused one counts nothing), a batch of claims once it is made, a
// schedule's skipped tick once it is recorded. A driver's own EventAppend
// goes through its own EventAppendMany, and its TaskClaimMany through its
// own TaskClaim, not through these methods, so nothing is counted twice.
type observedStore struct {
	store.Store
	obs store.Observer
}

func (s *observedStore) EventAppend(ctx context.Context, p *store.EventAppendParams) (history.State, error) {
	next, err := s.Store.EventAppend(ctx, p)
	if err == nil {
		s.obs.ObserveAppended(p, next)
	}
	return next, err
}

func (s *observedStore) EventAppendMany(ctx context.Context, ps []*store.EventAppendParams) ([]store.AppendResult, error) {
	out, err := s.Store.EventAppendMany(ctx, ps)
	if err != nil {
		return out, err
	}
	for i, res := range out {
		if res.Err == nil {
			s.obs.ObserveAppended(ps[i], res.State)
		}
	}
	return out, nil
}

func (s *observedStore) TaskClaimMany(ctx context.Context, p *store.TaskClaimManyParams) ([]*store.ClaimedTask, error) {
	claimed, err := s.Store.TaskClaimMany(ctx, p)
	if err == nil {
		s.obs.ObserveClaimed(claimed)
	}
	return claimed, err
}

func (s *observedStore) TaskClaim(ctx context.Context, p *store.TaskClaimManyParams) (store.ClaimResult, error) {
	res, err := s.Store.TaskClaim(ctx, p)
	if err == nil {
		s.obs.ObserveClaimed(res.Tasks)
	}
	return res, err
}

// ScheduleFireDue counts each skipped tick, as the drivers do; a firing
// that started its task is counted by the append of its first event.
func (s *observedStore) ScheduleFireDue(ctx context.Context, max int) ([]store.ScheduleFiring, error) {
	firings, err := s.Store.ScheduleFireDue(ctx, max)
	for _, f := range firings {
		if f.Skipped() {
			s.obs.ObserveScheduleSkipped(f)
		}
	}
	return firings, err
}

// TaskRemoveFinished counts what retention removed, as the drivers do.
func (s *observedStore) TaskRemoveFinished(ctx context.Context, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	res, err := s.Store.TaskRemoveFinished(ctx, p)
	if err == nil && res.Tasks > 0 {
		s.obs.ObserveRemoved(p.Namespace, res)
	}
	return res, err
}

// baseStore is the store under the SDK's metrics decorator, for what needs
// the driver itself (StartTx joins a pgx transaction).
func baseStore(st store.Store) store.Store {
	if sealed, ok := st.(*engine.SealedStore); ok {
		st = sealed.Unwrap()
	}
	if blobs, ok := st.(*engine.BlobStore); ok {
		st = blobs.Unwrap()
	}
	if o, ok := st.(*observedStore); ok {
		return o.Store
	}
	return st
}

// placedStore is the store a namespace's client uses: its cell's, when
// cfg.Cells is set, else cfg.Store (nil: a PostgreSQL store over the pool).
func placedStore(cfg ClientConfig, namespace string) (store.Store, error) {
	if cfg.Cells == nil {
		return cfg.Store, nil
	}
	if err := cellsAlone(cfg.Store, cfg.Pool != nil, cfg.Schema, cfg.ListenURL); err != nil {
		return nil, err
	}
	_, st, err := cfg.Cells.Of(namespace)
	if err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	return st, nil
}

// cellsAlone refuses, beside Cells, the settings the cells' stores already
// have: they would be ignored.
func cellsAlone(st store.Store, pool bool, schema, listenURL string) error {
	if st != nil || pool || schema != "" || listenURL != "" {
		return errmark.Mark(errors.New("sdk: Cells is set with Store, Pool, Schema or ListenURL: the cells' stores have their own; set Cells alone"), ErrInvalid)
	}
	return nil
}
