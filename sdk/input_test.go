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
			opts  *sdk.StartOpts
			names string // the field the error names
		}{
			{"LoneSurrogate", json.RawMessage(`{"id":"\ud800"}`), nil, "input.id"},
			{"LowSurrogateFirst", json.RawMessage(`{"id":"\udc00\ud800"}`), nil, "input.id"},
			{"RawInvalidUTF8", json.RawMessage("{\"id\":\"a\xffb\"}"), nil, "input.id"},
			{"InvalidUTF8Name", json.RawMessage("{\"i\xffd\":1}"), nil, `input["i\xffd"]`},
			{"GoStringInvalidUTF8", doc{ID: "a\xffb"}, nil, "input.id"},
			{"GoMapKeyInvalidUTF8", map[string]int{"a\xffb": 1}, nil, "input"},
			{"DuplicateMember", json.RawMessage(`{"id":"a","id":"b"}`), nil, "input.id"},
			{"NumberOutOfRange", json.RawMessage(`{"n":1e1000000}`), nil, "input.n"},
			{"KeyInvalidUTF8", "x", &sdk.StartOpts{IdempotencyKey: "a\xffb"}, "idempotency key"},
			{"QueueInvalidUTF8", "x", &sdk.StartOpts{Queue: "q\xff"}, "queue"},
			{"LabelInvalidUTF8", "x", &sdk.StartOpts{Labels: map[string]string{"tenant": "a\xffb"}}, "label tenant"},
		} {
			_, err := b.client.Start(ctx, echo, tc.input, tc.opts)
			require.Error(t, err, tc.name)
			require.True(t, errors.Is(err, sdk.ErrInvalid), "%s: %v", tc.name, err)
			require.Contains(t, err.Error(), tc.names, tc.name)

			_, err = b.client.StartMany(ctx, []sdk.StartParams{{Workflow: echo, Input: "fine"}, {Workflow: echo, Input: tc.input, Opts: tc.opts}})
			require.True(t, errors.Is(err, sdk.ErrInvalid), "%s: %v", tc.name, err)
		}
		require.Zero(t, enginetest.RequireProjectionsMatch(t, b.client.Store()), "nothing was written")

		// A real U+FFFD, a surrogate pair and escapes are text like any other.
		res, err := b.client.Start(ctx, echo, json.RawMessage(`{"id":"\ufffd \ud83d\ude00 é"}`), &sdk.StartOpts{IdempotencyKey: "a\uFFFDb"})
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
		for _, opts := range []*sdk.ListOpts{{Type: "\x00"}, {Queue: "\x00"}, {Type: "\xff"}, {Status: history.Status("\xff")}} {
			_, err := b.client.ListPage(ctx, opts)
			require.True(t, errors.Is(err, sdk.ErrInvalid), "%+v: %v", opts, err)
		}
	})
}
