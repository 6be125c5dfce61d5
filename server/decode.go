package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cairnflow/cairn/internal/jsoncheck"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/cockroachdb/errors"
)

// strictJSON refuses what encoding/json would take but the API does not: a
// string or member name that is not valid UTF-8 or holds a lone surrogate
// escape (encoding/json would turn it into U+FFFD, so two distinct
// idempotency keys could become one), a member named twice (encoding/json
// keeps the last), a number beyond what both stores hold, and a field name
// that matches one of v's only when case is ignored ({"Type": …}). raw is
// valid JSON. The problem names the field.
func strictJSON(raw []byte, v any) *Problem {
	if err := jsoncheck.Check(raw, ""); err != nil {
		var je *jsoncheck.Error
		if !errors.As(err, &je) {
			return web.NewProblem(http.StatusBadRequest, web.CodeMalformedJSON, err.Error())
		}
		if je.Path == "" {
			return web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "the request body "+je.Reason)
		}
		return web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "field "+je.Path+" "+je.Reason)
	}
	return exactNames(raw, reflect.TypeOf(v), "")
}

var timeType = reflect.TypeFor[time.Time]()

// exactNames refuses a member of the object raw whose name is not exactly
// the JSON name of a field of t (a struct, or a pointer to one), and so on
// into the members that are structs themselves. Other values (maps, raw
// JSON, times) are not looked into.
func exactNames(raw []byte, t reflect.Type, path string) *Problem {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == timeType {
		return nil
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return nil // not an object: decoding says what is wrong
	}
	fields := jsonFields(t)
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ft, ok := fields[name]
		if !ok {
			detail := "unknown field " + strconv.Quote(path+name)
			for known := range fields {
				if strings.EqualFold(known, name) {
					detail += " (field names are case-sensitive: " + strconv.Quote(path+known) + ")"
					break
				}
			}
			return web.NewProblem(http.StatusBadRequest, web.CodeUnknownField, detail)
		}
		if p := exactNames(members[name], ft, path+name+"."); p != nil {
			return p
		}
	}
	return nil
}

// jsonFields maps the JSON names of struct type t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// checkQuery refuses a request whose path or query parameters are not text
// both stores keep as given: invalid UTF-8 (?type=%ff) or NUL (?type=%00),
// which PostgreSQL refuses and the embedded store would take. The problem
// names the parameter.
func checkQuery(r *http.Request) *Problem {
	if !validText(r.URL.Path) {
		return web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "the path "+strconv.Quote(r.URL.Path)+" is not valid UTF-8 text without NUL characters")
	}
	q, _ := url.ParseQuery(r.URL.RawQuery) // as r.URL.Query() reads it
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		bad := !validText(k)
		for _, v := range q[k] {
			bad = bad || !validText(v)
		}
		if bad {
			return web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
				"query parameter "+strconv.Quote(k)+" is not valid UTF-8 text without NUL characters")
		}
	}
	return nil
}

// validText is valid UTF-8 without NUL.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
