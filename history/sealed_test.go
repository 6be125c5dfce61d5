package history_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
)

// A sealed payload's encoding is what encoding/json writes of it, and
// reads back the same; other JSON is not sealed.
func TestSealedRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []history.Sealed{
		{V: 1, Task: "01a23434-ccaa-76fa-9f11-fe3743ae6937", Data: []byte{1, 2, 3, 250}},
		{V: 1, Task: "01a23434-ccaa-76fa-9f11-fe3743ae6937", Digest: make([]byte, 32), Data: []byte("x")},
		{V: 1, Key: `k"1\u2028`, Data: []byte("y")},
	} {
		enc := s.Encode()
		want, err := json.Marshal(map[string]history.Sealed{history.SealedMember: s})
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(enc))
		got, ok := history.ParseSealed(enc)
		require.True(t, ok, "%s", enc)
		require.Equal(t, s, got)
		spaced := []byte(" {\"cairn_sealed\" : " + string(enc[len(`{"cairn_sealed":`):]))
		_, ok = history.ParseSealed(spaced)
		require.True(t, ok, "as PostgreSQL's jsonb spaces it: %s", spaced)
	}
	for _, raw := range []string{``, `null`, `"cairn_sealed"`, `{"a":1}`, `{"cairn_sealed":{"v":2,"task":"x","data":"AA=="}}`,
		`{"cairn_sealed":{"v":1,"data":"AA=="}}`, `{"cairn_sealed":{"v":1,"task":"t","key":"k","data":"AA=="}}`, `{"cairn_sealed":{"v":1,"task":"t"}}`} {
		_, ok := history.ParseSealed(json.RawMessage(raw))
		require.False(t, ok, raw)
	}
}
