package jsoncheck_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/internal/jsoncheck"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		path string // "" when accepted
		in   string // part of the reason
	}{
		{`{"id":"doc-1","n":[1,2.5,-3e2],"ok":true,"none":null}`, "", ""},
		{`"\ud83d\ude00 é \u00e9"`, "", ""}, // a pair, raw and escaped non-ASCII
		{`"\\ud800"`, "", ""},               // a backslash, then text
		{`{"id":"\ud800"}`, "input.id", "lone surrogate"},
		{`{"id":"\udc00\ud800"}`, "input.id", "lone surrogate"},
		{`{"id":"\ud800x"}`, "input.id", "lone surrogate"},
		{`{"a":["ok","x` + "\xff" + `"]}`, "input.a[1]", "UTF-8"},
		{`"` + "\xed\xa0\x80" + `"`, "input", "UTF-8"}, // a surrogate encoded in UTF-8
		{`{"a` + "\xff" + `b":1}`, `input["a\xffb"]`, "UTF-8"},
		{`{"a":1,"a":2}`, "input.a", "twice"},
		{`{"a":{"b":1,"c":{"b":1}},"d":[{"b":1},{"b":1}]}`, "", ""}, // one name in different objects
		{`{"a b":{"x":1,"x":2}}`, `input["a b"].x`, "twice"},
		{`1e1000`, "", ""},
		{`1e1001`, "input", "exponent"},
		{`[0.` + strings.Repeat("1", 1000) + `]`, "input[0]", "digits"},
	} {
		err := jsoncheck.Check([]byte(tc.text), "input")
		if tc.path == "" {
			require.NoError(t, err, "%q", tc.text)
			continue
		}
		var je *jsoncheck.Error
		require.True(t, errors.As(err, &je), "%q: %v", tc.text, err)
		require.Equal(t, tc.path, je.Path, "%q", tc.text)
		require.Contains(t, je.Reason, tc.in, "%q", tc.text)
	}
	err := jsoncheck.Check([]byte(`{"a":`), "input")
	require.True(t, errors.Is(err, jsoncheck.ErrSyntax), "%v", err)
	err = jsoncheck.Check([]byte(`1 2`), "input")
	require.True(t, errors.Is(err, jsoncheck.ErrSyntax), "%v", err)
}

func TestCheckMarshaled(t *testing.T) {
	t.Parallel()
	text, err := json.Marshal(map[string]any{"ok": "\ufffd", "bad": []string{"a\xffb"}})
	require.NoError(t, err)
	var je *jsoncheck.Error
	require.True(t, errors.As(jsoncheck.CheckMarshaled(text, "input"), &je), "%s", text)
	require.Equal(t, "input.bad[0]", je.Path)
	require.NoError(t, jsoncheck.Check(text, "input"), "as text, \\ufffd is a real U+FFFD")
	text, err = json.Marshal(map[string]string{"ok": "\ufffd"})
	require.NoError(t, err)
	require.NoError(t, jsoncheck.CheckMarshaled(text, "input"), "a real U+FFFD is written as itself")
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b string }{
		{`{"b": [1, 2], "a": "x"}`, `{"a":"x","b":[1,2]}`},
		{`100`, `1e2`},
		{`1.50`, `1.5`},
		{`-0`, `0.0`},
		{`0.1e1`, `1`},
		{`"\u00e9\n"`, "\"é\\n\""},
		{`{"a":1,"a":2}`, `{"a":2}`}, // the last wins, as in jsonb
		{``, `null`},
		{`{"a": 1.0E+2}`, `{"a": 100}`}, // what jsonb gives back
	} {
		require.True(t, jsoncheck.Equal([]byte(tc.a), []byte(tc.b)), "%s vs %s", tc.a, tc.b)
	}
	for _, tc := range []struct{ a, b string }{
		{`1`, `"1"`}, {`{"a":1}`, `{"A":1}`}, {`[1,2]`, `[2,1]`}, {`"a\ufffdb"`, `"ab"`}, {`1`, `10`}, {`-1`, `1`},
	} {
		require.False(t, jsoncheck.Equal([]byte(tc.a), []byte(tc.b)), "%s vs %s", tc.a, tc.b)
	}
	c, err := jsoncheck.Canonical([]byte(`{"z":1.50,"a":[true,null,"<&>"]}`))
	require.NoError(t, err)
	require.Equal(t, `{"a":[true,null,"<&>"],"z":15e-1}`, string(c))
}

// FuzzCanonical: text Check accepts has a canonical form that is valid
// JSON, canonical itself, and holds the value encoding/json reads from the
// text.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":[1,2],"a":"x"}`, `1.50`, `-0e-0`, `"\ud83d\ude00"`, `{"a":{"a":[]}}`, `1e-1000`, `"\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		if !json.Valid(text) || jsoncheck.Check(text, "input") != nil {
			return
		}
		c, err := jsoncheck.Canonical(text)
		require.NoError(t, err)
		require.True(t, json.Valid(c), "%q → %q", text, c)
		again, err := jsoncheck.Canonical(c)
		require.NoError(t, err)
		require.Equal(t, string(c), string(again))
		require.Equal(t, decoded(t, text), decoded(t, c), "%q → %q", text, c)
	})
}

// decoded is text decoded by encoding/json, its numbers in canonical form
// (a float64 would overflow).
func decoded(t *testing.T, text []byte) any {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	var norm func(v any) any
	norm = func(v any) any {
		switch v := v.(type) {
		case json.Number:
			c, err := jsoncheck.Canonical([]byte(v))
			require.NoError(t, err)
			return "number " + string(c)
		case []any:
			for i := range v {
				v[i] = norm(v[i])
			}
		case map[string]any:
			for k := range v {
				v[k] = norm(v[k])
			}
		}
		return v
	}
	return norm(v)
}
