// Package migrations holds cairn's database schema as embedded, versioned SQL
// files named NNNN_snake_name.up.sql, and parses them into an ordered list:
// PostgreSQL's in this directory ([All]), the embedded SQLite store's in
// sqlite/ ([SQLite]), kept in step version for version.
//
// The files refer to tables through the marker "/* TEMPLATE: schema */",
// which the migration runner in package engine replaces with the quoted name
// of the configured schema. Released migrations are never edited; a change
// is a new file. The package imports nothing of cairn.
package migrations

import (
	"embed"
	"io/fs"
	"regexp"
	"sort"
	"strconv"

	"github.com/cockroachdb/errors"
)

//go:embed *.sql
var files embed.FS

//go:embed sqlite/*.sql
var sqliteFiles embed.FS

// SchemaMarker is the placeholder for the schema in every migration file.
const SchemaMarker = "/* TEMPLATE: schema */"

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var nameRE = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.up\.sql$`)

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	return FromFS(files)
}

// Latest is the version of the newest embedded migration (0 if they do not
// parse, which their tests rule out).
func Latest() int {
	all, err := All()
	if err != nil || len(all) == 0 {
		return 0
	}
	return all[len(all)-1].Version
}

// SQLite returns the embedded store's migrations (directory sqlite/) in
// version order. Each has a PostgreSQL twin of the same version and name,
// written for SQLite's types; they use no schema marker (a SQLite file
// holds one cairn).
func SQLite() ([]Migration, error) {
	sub, err := fs.Sub(sqliteFiles, "sqlite")
	if err != nil {
		return nil, errors.Wrap(err, "read SQLite migrations")
	}
	return FromFS(sub)
}

// FromFS parses the migrations in the root of fsys. It rejects a file whose
// name is not NNNN_snake_name.up.sql, duplicate versions, and gaps: versions
// must run 1, 2, 3, …
func FromFS(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, errors.Wrap(err, "read migrations")
	}
	var out []Migration
	for _, entry := range entries {
		if entry.IsDir() {
			continue
		}
		version, name, err := ParseName(entry.Name())
		if err != nil {
			return nil, err
		}
		sql, err := fs.ReadFile(fsys, entry.Name())
		if err != nil {
			return nil, errors.Wrapf(err, "read migration %s", entry.Name())
		}
		out = append(out, Migration{Version: version, Name: name, SQL: string(sql)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			if i > 0 && out[i-1].Version == m.Version {
				return nil, errors.Newf("migration version %04d appears twice", m.Version)
			}
			return nil, errors.Newf("migration versions have a gap: expected %04d, found %04d", i+1, m.Version)
		}
	}
	return out, nil
}

// ParseName splits a migration file name into its version and name.
func ParseName(file string) (version int, name string, err error) {
	m := nameRE.FindStringSubmatch(file)
	if m == nil {
		return 0, "", errors.Newf("migration file %q: name must look like 0001_snake_name.up.sql", file)
	}
	version, err = strconv.Atoi(m[1])
	if err != nil || version == 0 {
		return 0, "", errors.Newf("migration file %q: version must be a positive number", file)
	}
	return version, m[2], nil
}
