package pgstore

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
)

// Placement says which PostgreSQL cluster (a cell) holds each namespace:
// a namespace's tasks and events live in its cell only. Its JSON form:
//
//	{"cells": {"eu": "postgres://…", "us": "postgres://…"},
//	 "namespaces": {"acme": "eu", "globex": "us"}}
//
// A namespace it does not name is refused, not sent to some default cell:
// a task started in the wrong cluster would be invisible to the workers of
// its own.
type Placement struct {
	Cells      map[string]string `json:"cells"`      // cell name → connection string
	Namespaces map[string]string `json:"namespaces"` // namespace → cell name
}

// LoadPlacement reads and checks a placement file.
func LoadPlacement(path string) (*Placement, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.Wrap(err, "read the placement map")
	}
	return ParsePlacement(data)
}

// ParsePlacement decodes and checks a placement map: at least one cell,
// every cell's connection string parses, and every namespace names a cell
// it defines. Errors never repeat a connection string (it may hold a
// password).
func ParsePlacement(data []byte) (*Placement, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Placement
	if err := dec.Decode(&p); err != nil {
		return nil, errors.Wrap(err, `placement map: want {"cells": {name: URL}, "namespaces": {namespace: cell}}`)
	}
	if len(p.Cells) == 0 {
		return nil, errors.New("placement map: no cells")
	}
	for name, url := range p.Cells {
		if strings.TrimSpace(name) == "" {
			return nil, errors.New("placement map: a cell has an empty name")
		}
		if _, err := pgx.ParseConfig(url); err != nil {
			return nil, errors.Newf("placement map: cell %q: its URL does not parse (%s)", name, lastClause(err.Error()))
		}
	}
	for ns, cell := range p.Namespaces {
		if strings.TrimSpace(ns) == "" {
			return nil, errors.New("placement map: an empty namespace")
		}
		if _, ok := p.Cells[cell]; !ok {
			return nil, errors.Newf("placement map: namespace %q is placed in cell %q, which it does not define (cells: %s)", ns, cell, p.cellNames())
		}
	}
	return &p, nil
}

// CellOf returns the cell holding namespace and its connection string, or
// an error naming the namespaces the map places.
func (p *Placement) CellOf(namespace string) (cell, connString string, err error) {
	cell, ok := p.Namespaces[namespace]
	if !ok {
		placed := make([]string, 0, len(p.Namespaces))
		for ns := range p.Namespaces {
			placed = append(placed, ns)
		}
		slices.Sort(placed)
		return "", "", errors.Newf("namespace %q is in no cell of the placement map (it places %s): add it under \"namespaces\"",
			namespace, quotedList(placed))
	}
	return cell, p.Cells[cell], nil
}

func (p *Placement) cellNames() string {
	names := make([]string, 0, len(p.Cells))
	for name := range p.Cells {
		names = append(names, name)
	}
	slices.Sort(names)
	return quotedList(names)
}

func quotedList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = `"` + n + `"`
	}
	return strings.Join(quoted, ", ")
}
