package history_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
)

// corpus returns the golden histories, good and bad, and a few generated
// ones, as encoded event arrays: the seeds of the fuzz targets.
func corpus(f *testing.F) [][]byte {
	f.Helper()
	var out [][]byte
	for _, pattern := range []string{"testdata/*.json", "testdata/bad/*.json"} {
		paths, err := filepath.Glob(filepath.FromSlash(pattern))
		require.NoError(f, err)
		require.NotEmpty(f, paths, pattern)
		for _, path := range paths {
			data, err := os.ReadFile(path)
			require.NoError(f, err)
			out = append(out, data)
		}
	}
	for seed := range uint64(8) {
		data, err := historytest.EncodeEvents(historytest.FromSeed(seed, historytest.Opts{}))
		require.NoError(f, err)
		out = append(out, data)
	}
	return out
}

// FuzzDecode: Decode never panics; what it refuses is marked
// ErrInvalidHistory; what it accepts encodes, and decodes back to an equal
// payload. "Equal" is up to what JSON does not distinguish (whitespace inside
// raw fields, an empty map against none, a time's zone name for the same
// offset), so it is checked as equal encodings, and as deep equality from the
// first re-encoding on.
func FuzzDecode(f *testing.F) {
	for _, data := range corpus(f) {
		var encoded []historytest.EncodedEvent
		if json.Unmarshal(data, &encoded) != nil {
			continue
		}
		for _, ee := range encoded {
			f.Add(string(ee.Type), []byte(ee.Data))
		}
	}
	f.Add("step_completed", []byte(` {"name":"a","v":1,"output":[ 1, {"x" : null} ]} `))
	f.Add("task_scheduled", []byte(`{"v":1,"labels":{},"run_at":"2026-01-02T03:04:05+01:00"}`))
	f.Add("attempt_failed", []byte(`{"v":1,"error":{"attrs":{"a":"\ud800"}},"next_run_at":null}`))

	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		p, err := history.Decode(history.Type(typ), data)
		if err != nil {
			require.Nil(t, p)
			requireMarked(t, err)
			return
		}
		require.Equal(t, history.Type(typ), p.EventType())

		enc, err := history.Encode(p)
		require.NoError(t, err, "accepted payload does not encode: %#v", p)
		require.True(t, json.Valid(enc), "%s", enc)
		require.True(t, bytes.HasPrefix(enc, []byte(`{"v":1`)), "%s", enc)

		p2, err := history.Decode(p.EventType(), enc)
		require.NoError(t, err, "%s", enc)
		enc2, err := history.Encode(p2)
		require.NoError(t, err)
		require.Equal(t, string(enc), string(enc2))

		p3, err := history.Decode(p.EventType(), enc2)
		require.NoError(t, err)
		require.Equal(t, p2, p3)
	})
}

// FuzzReplay: bytes read as an encoded event array. Decoding and replaying
// never panic, every error is marked ErrInvalidHistory, Replay agrees with
// the event-by-event fold, and an accepted history replays the same after
// encode→decode.
func FuzzReplay(f *testing.F) {
	for _, data := range corpus(f) {
		f.Add(data)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		events, err := historytest.DecodeEvents(data)
		if err != nil {
			requireMarked(t, err)
			return
		}
		s, err := history.Replay(events)

		var inc history.State
		var incErr error
		for _, e := range events {
			var next history.State
			next, incErr = history.Apply(inc, e)
			if incErr != nil {
				break
			}
			inc = next
		}
		require.Equal(t, inc, s)
		if err != nil {
			requireMarked(t, err)
			if incErr != nil {
				require.Equal(t, incErr.Error(), err.Error())
			}
			return
		}
		require.NoError(t, incErr)
		require.Equal(t, int64(len(events)), s.LastSeq)

		enc, err := historytest.EncodeEvents(events)
		require.NoError(t, err)
		again, err := historytest.DecodeEvents(enc)
		require.NoError(t, err, "%s", enc)
		s2, err := history.Replay(again)
		require.NoError(t, err, "%s", enc)
		require.Equal(t, normalized(t, s), normalized(t, s2))
	})
}

// normalized is s's summary with its output compacted, which is all an
// encode→decode round trip may change.
func normalized(t *testing.T, s history.State) goldenSummary {
	t.Helper()
	sum := summarize(s)
	if sum.Output != "" {
		var buf bytes.Buffer
		require.NoError(t, json.Compact(&buf, s.Output))
		sum.Output = buf.String()
	}
	return sum
}
