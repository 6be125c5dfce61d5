// Package namedsql reads SQL files of named statements, the one format
// every query file of cairn's uses (both store drivers, the bench): a
// statement follows its "-- name: X" line and runs to the next one. Other
// comment lines are dropped, so nothing in them is taken for a parameter.
// What a reader does with markers in the text (the schema, column lists)
// is its own business.
//
// It imports nothing of cairn.
package namedsql

import (
	"io/fs"
	"strings"

	"github.com/cockroachdb/errors"
)

// Parse adds the statements of src to out, by name. A name defined twice
// (in src or already in out) or a statement left empty is an error.
func Parse(src string, out map[string]string) error {
	var name string
	var body strings.Builder
	flush := func() error {
		defer body.Reset()
		if name == "" {
			return nil
		}
		q := strings.TrimSpace(body.String())
		if q == "" {
			return errors.AssertionFailedf("query %s is empty", name)
		}
		out[name] = q
		return nil
	}
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(trimmed, "-- name:"); ok {
			if err := flush(); err != nil {
				return err
			}
			name = strings.TrimSpace(rest)
			if _, dup := out[name]; dup {
				return errors.AssertionFailedf("query %s defined twice", name)
			}
			continue
		}
		if strings.HasPrefix(trimmed, "--") {
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	return flush()
}

// Load parses the files of fsys that match patterns (fs.Glob patterns,
// plain names included), in name order, into one map.
func Load(fsys fs.FS, patterns ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, pattern := range patterns {
		names, err := fs.Glob(fsys, pattern)
		if err != nil {
			return nil, errors.Wrapf(err, "list query files %s", pattern)
		}
		if len(names) == 0 {
			return nil, errors.AssertionFailedf("no query file matches %s", pattern)
		}
		for _, name := range names {
			src, err := fs.ReadFile(fsys, name)
			if err != nil {
				return nil, errors.Wrapf(err, "read query file %s", name)
			}
			if err := Parse(string(src), out); err != nil {
				return nil, errors.Wrapf(err, "query file %s", name)
			}
		}
	}
	return out, nil
}
