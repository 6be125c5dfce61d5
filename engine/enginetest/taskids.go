package enginetest

import (
	"context"
	"reflect"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
)

// TaskIDs returns the id of every task s holds, in every namespace, in id
// order: what a check over a whole test database walks. The seam has no
// such listing (only tests need one), so TaskIDs reads the driver under s
// with SQL of its own: a [pgstore.Store]'s schema, a [sqlitestore.Store]'s
// file. A decorator over the seam (one with an Unwrap method, or one that
// embeds a store.Store, as the tests' fault injectors and the conformance
// suite's wiring under the payload codecs do) is looked through. Another
// store fails the test.
func TaskIDs(tb testing.TB, s store.Store) []uuid.UUID {
	tb.Helper()
	ctx := context.Background()
	switch d := driverOf(s).(type) {
	case *pgstore.Store:
		rows, err := d.Pool().Query(ctx, "SELECT id FROM "+pgx.Identifier{d.Schema()}.Sanitize()+".tasks ORDER BY id")
		require.NoError(tb, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(tb, err)
		return ids
	case *sqlitestore.Store:
		rows, err := d.DB().QueryContext(ctx, "SELECT id FROM tasks ORDER BY id")
		require.NoError(tb, err)
		defer func() { _ = rows.Close() }()
		var ids []uuid.UUID
		for rows.Next() {
			var id uuid.UUID
			require.NoError(tb, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(tb, rows.Err())
		return ids
	default:
		require.Failf(tb, "TaskIDs", "no driver found under a %T", s)
		return nil
	}
}

// driverOf returns the store under s's decorators.
func driverOf(s store.Store) store.Store {
	seam := reflect.TypeFor[store.Store]()
	for {
		if u, ok := s.(interface{ Unwrap() store.Store }); ok {
			s = u.Unwrap()
			continue
		}
		v := reflect.ValueOf(s)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			return s
		}
		f := v.Elem().FieldByName("Store")
		if !f.IsValid() || f.Type() != seam || f.IsNil() {
			return s
		}
		s = f.Interface().(store.Store)
	}
}
