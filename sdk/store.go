package sdk

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// configuredStore is the driver a Client or Worker works in: st when set,
// else a PostgreSQL store of pg; in both cases counting its committed
// writes into metrics when it is set. A driver counts into the observer
// it was made with (pgstore.Config.Metrics, sqlitestore.Config.Metrics);
// a store a caller made without one gets metrics attached
// (store.Store.ObserverAttach), and one made with other metrics is
// refused, as every event would be counted twice. Nothing wraps the
// store.
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
	if own := st.ObserverAttach(metrics); own != store.Observer(metrics) {
		return nil, errors.New("sdk: Metrics is set in the config and, to other metrics, on its Store: " +
			"every event would be counted twice; set Metrics in one place (the config, or the store's Config.Metrics)")
	}
	return st, nil
}

// stageConfig is what a Client's or a Worker's payload stage is made of.
type stageConfig struct {
	keys          *seal.Keys
	blobStore     string
	blobThreshold int            // 0: nothing kept by reference
	byReference   []payload.Kind // what goes by reference over the threshold
	archivedBlob  func(ctx context.Context, namespace, key string) (*payload.Blob, bool, error)
}

// newEdge is the SDK's side of st: its payload stage (offloading, then
// encryption) and the only writer of payloads.
func newEdge(st store.Store, c stageConfig) (*edge.Store, error) {
	e, err := edge.New(edge.Config{Store: st, Keys: c.keys, BlobStore: c.blobStore, BlobThreshold: c.blobThreshold,
		ByReference: c.byReference, ArchivedBlob: c.archivedBlob})
	if err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	return e, nil
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
