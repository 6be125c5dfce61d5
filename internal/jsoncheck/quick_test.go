package jsoncheck

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuickValid: the shapes most inputs have are accepted without the
// decoder; what the quick read cannot vouch for is left to it, which
// accepts or refuses it as before.
func TestQuickValid(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		`{"steps":1}`, ` {"a": [1, 2.5, -0.1e-3, true, false, null], "b": {"c": "d"}} `, `[]`, `{}`, `"x"`, `0`, `-12`,
		`{"":1}`, `[[[[1]]]]`, `1E+999`, `{"a":"~ !#$%&'()*+,-./09:;<=>?@AZ[]^_` + "`" + `az{|}"}`,
	} {
		require.True(t, quickValid([]byte(text)), "%s", text)
		require.NoError(t, Check([]byte(text), "input"), "%s", text)
	}
	for _, c := range []struct {
		text     string
		accepted bool // by Check, through the decoder
	}{
		{`{"a":"\u00e9"}`, true}, {`{"a":"é"}`, true}, {`{"a\u0062":1}`, true},
		{`{"a":1,"a":2}`, false}, {`{"a":1,"a\u0000":2}`, true}, {`{"a":1,"\u0061":2}`, false},
		{`1e1000`, true}, {`1e1001`, false}, {`1e0001`, true},
		{strings.Repeat("9", 41), true}, {strings.Repeat("9", 1001), false},
		{strings.Repeat("[", 17) + strings.Repeat("]", 17), true},
		{`{"a":"` + "\x7f" + `"}`, true}, {"\"\xff\"", false}, {`"\ud800"`, false},
		{``, false}, {` `, false}, {`{`, false}, {`[1,]`, false}, {`{"a":1,}`, false}, {`01`, false}, {`1.`, false},
		{`-`, false}, {`.5`, false}, {`tru`, false}, {`nul`, false}, {`1 2`, false}, {`{"a" 1}`, false}, {`{1:2}`, false},
		{`"a` + "\n" + `"`, false}, {`[1 2]`, false},
	} {
		require.False(t, quickValid([]byte(c.text)), "%q", c.text)
		require.Equal(t, c.accepted, Check([]byte(c.text), "input") == nil, "%q", c.text)
	}
}

// FuzzQuickValid: text the quick read vouches for is text the decoder's
// walk accepts (as Check and as CheckMarshaled) and encoding/json reads.
func FuzzQuickValid(f *testing.F) {
	for _, s := range []string{`{"steps":1}`, `{"a":[1,{"b":null}],"c":"d"}`, `[0,-1.5e+10,true]`, `{"a":1,"a":2}`,
		`"x"`, `1e999`, `{"a":"\u0041"}`, `01`, `[1,]`, `{"a":{"b":{"c":{}}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		if !quickValid(text) {
			return
		}
		require.True(t, json.Valid(text), "%q", text)
		require.NoError(t, walk(text, "input", false), "%q", text)
		require.NoError(t, walk(text, "input", true), "%q", text)
	})
}
