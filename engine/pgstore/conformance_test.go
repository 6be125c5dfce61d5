package pgstore_test

import (
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
)

// TestStoreConformance runs the store conformance suite against
// PostgreSQL, each test on a fresh migrated schema.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return enginetest.Store(t) })
}
