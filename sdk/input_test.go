package sdk_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// TestStartRefusesTextTheStoresWouldDisagreeOn: what PostgreSQL refuses
// (and so once failed as an internal error) and the embedded store kept, or
// what encoding/json would have changed on the way, is refused by the sdk
// on either store with ErrInvalid naming the field, and nothing is
// written.
func TestStartRefusesTextTheStoresWouldDisagreeOn(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		type doc struct {
			ID string `json:"id"`
		}
		for _, tc := range []struct {
			name  string
			input any
			opts  sdk.StartOpts
			names string // the field the error names
		}{
			{"LoneSurrogate", json.RawMessage(`{"id":"\ud800"}`), sdk.StartOpts{}, "input.id"},
			{"LowSurrogateFirst", json.RawMessage(`{"id":"\udc00\ud800"}`), sdk.StartOpts{}, "input.id"},
			{"RawInvalidUTF8", json.RawMessage("{\"id\":\"a\xffb\"}"), sdk.StartOpts{}, "input.id"},
			{"InvalidUTF8Name", json.RawMessage("{\"i\xffd\":1}"), sdk.StartOpts{}, `input["i\xffd"]`},
			{"GoStringInvalidUTF8", doc{ID: "a\xffb"}, sdk.StartOpts{}, "input.id"},
			{"GoMapKeyInvalidUTF8", map[string]int{"a\xffb": 1}, sdk.StartOpts{}, "input"},
			{"DuplicateMember", json.RawMessage(`{"id":"a","id":"b"}`), sdk.StartOpts{}, "input.id"},
			{"NumberOutOfRange", json.RawMessage(`{"n":1e1000000}`), sdk.StartOpts{}, "input.n"},
			{"KeyInvalidUTF8", "x", sdk.StartOpts{IdempotencyKey: "a\xffb"}, "idempotency key"},
			{"QueueInvalidUTF8", "x", sdk.StartOpts{Queue: "q\xff"}, "queue"},
			{"LabelInvalidUTF8", "x", sdk.StartOpts{Labels: map[string]string{"tenant": "a\xffb"}}, "label tenant"},
		} {
			_, err := b.client.StartDynamic(ctx, echo, tc.input, &tc.opts)
			require.Error(t, err, tc.name)
			require.True(t, errors.Is(err, sdk.ErrInvalid), "%s: %v", tc.name, err)
			require.Contains(t, err.Error(), tc.names, tc.name)

			_, err = b.client.StartMany(ctx, []sdk.StartParams{{Workflow: echo, Input: "fine"}, {Workflow: echo, Input: tc.input, Opts: tc.opts}})
			require.True(t, errors.Is(err, sdk.ErrInvalid), "%s: %v", tc.name, err)
		}
		require.Zero(t, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)), "nothing was written")

		// A real U+FFFD, a surrogate pair and escapes are text like any other.
		res, err := b.client.StartDynamic(ctx, echo, json.RawMessage(`{"id":"\ufffd \ud83d\ude00 é"}`), &sdk.StartOpts{IdempotencyKey: "a\uFFFDb"})
		require.NoError(t, err)
		info, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		var back doc
		require.NoError(t, json.Unmarshal(info.Input, &back))
		require.Equal(t, "\uFFFD \U0001F600 é", back.ID)
		require.Equal(t, "a\uFFFDb", info.IdempotencyKey)
	})
}

// TestListRefusesFiltersTheStoresWouldDisagreeOn: ?type=%00, ?queue=%00
// and ?type=%ff once failed on PostgreSQL and matched nothing on the
// embedded store; both now refuse them.
func TestListRefusesFiltersTheStoresWouldDisagreeOn(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		for _, opts := range []sdk.ListOpts{{Type: "\x00"}, {Queue: "\x00"}, {Type: "\xff"}, {Status: history.Status("\xff")}} {
			_, err := b.client.ListPage(ctx, &opts)
			require.True(t, errors.Is(err, sdk.ErrInvalid), "%+v: %v", opts, err)
		}
	})
}

// TestStartReusingAKeyWithAnotherInputIsRefused: a start that reuses an
// idempotency key with another input (or type) once returned the existing
// task; now it fails with ErrIdempotencyKeyReused, names no task, and
// writes nothing, alone or in a batch. The same start repeated, its input
// written otherwise, still returns the existing task.
func TestStartReusingAKeyWithAnotherInputIsRefused(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		opts := sdk.StartOpts{IdempotencyKey: "invoice-42"}
		first, err := b.client.StartDynamic(ctx, echo, json.RawMessage(`{"invoice":42,"pages":[1,2]}`), &opts)
		require.NoError(t, err)

		again, err := b.client.StartDynamic(ctx, echo, map[string]any{"pages": []int{1, 2}, "invoice": 42.0}, &opts)
		require.NoError(t, err, "the same value, encoded otherwise")
		require.Equal(t, sdk.StartResult{ID: first.ID, Existing: true}, again)

		for name, start := range map[string]func() (sdk.StartResult, error){
			"AnotherInput": func() (sdk.StartResult, error) {
				return b.client.StartDynamic(ctx, echo, json.RawMessage(`{"invoice":43,"pages":[1,2]}`), &opts)
			},
			"AnotherType": func() (sdk.StartResult, error) {
				return b.client.StartDynamic(ctx, sdk.TypeRef{Name: "other", Version: 1}, json.RawMessage(`{"invoice":42,"pages":[1,2]}`), &opts)
			},
			"InABatch": func() (sdk.StartResult, error) {
				res, err := b.client.StartMany(ctx, []sdk.StartParams{
					{Workflow: echo, Input: "fresh", Opts: sdk.StartOpts{IdempotencyKey: "fresh"}},
					{Workflow: echo, Input: "reuse", Opts: opts},
				})
				if len(res) > 0 {
					return res[0], err
				}
				return sdk.StartResult{}, err
			},
			"TwiceInABatch": func() (sdk.StartResult, error) {
				_, err := b.client.StartMany(ctx, []sdk.StartParams{
					{Workflow: echo, Input: "a", Opts: sdk.StartOpts{IdempotencyKey: "twice"}},
					{Workflow: echo, Input: "b", Opts: sdk.StartOpts{IdempotencyKey: "twice"}},
				})
				return sdk.StartResult{}, err
			},
		} {
			res, err := start()
			require.True(t, errors.Is(err, sdk.ErrIdempotencyKeyReused), "%s: %v", name, err)
			require.Equal(t, sdk.StartResult{}, res, name)
			require.NotContains(t, err.Error(), first.ID.String(), name)
		}
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)), "the refused starts wrote nothing")
		require.Len(t, taskHistory(t, b.client, first.ID), 1, "nothing appended to the existing task")
	})
}

// TestStartTxReusingAKeyLeavesTheTransactionClean: a refused StartTx undoes
// what it wrote in the caller's transaction (a savepoint), which stays
// usable.
func TestStartTxReusingAKeyLeavesTheTransactionClean(t *testing.T) {
	t.Parallel()
	b := setup(t, sdk.WorkerConfig{})
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	first, err := sdk.StartTx(ctx, b.client, tx, echo, "a", &sdk.StartOpts{IdempotencyKey: "outbox-1"})
	require.NoError(t, err)
	same, err := sdk.StartTx(ctx, b.client, tx, echo, "a", &sdk.StartOpts{IdempotencyKey: "outbox-1"})
	require.NoError(t, err, "the holder is in the same transaction")
	require.True(t, same.Existing)
	require.Equal(t, first.ID, same.ID)
	_, err = sdk.StartTx(ctx, b.client, tx, echo, "b", &sdk.StartOpts{IdempotencyKey: "outbox-1"})
	require.True(t, errors.Is(err, sdk.ErrIdempotencyKeyReused), "%v", err)
	kept, err := sdk.StartTx(ctx, b.client, tx, echo, "c", nil)
	require.NoError(t, err, "the transaction is still usable")
	require.NoError(t, tx.Commit(ctx))
	tasks, err := b.client.List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	for _, task := range tasks {
		require.Contains(t, []string{first.ID.String(), kept.ID.String()}, task.ID.String())
	}
	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
}
