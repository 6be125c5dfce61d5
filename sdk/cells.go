package sdk

import (
	"maps"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ErrNotPlaced marks the error of a namespace that no cell of a [Cells]
// holds.
var ErrNotPlaced = errors.New("namespace not placed")

// Cells places namespaces on several stores (cells), each its own database
// with its own schema, migrations and leader: a namespace's tasks and events
// live in its cell only, and a cell that is down stops only its namespaces.
// It is a fixed map, safe for concurrent use; the stores are the caller's
// to close.
type Cells struct {
	stores      map[string]store.Store // cell name → store
	namespaces  map[string]string      // namespace → cell name
	names       []string               // cell names, sorted
	placedNames []string               // namespaces, sorted
}

// NewCells places each namespace of namespaces (namespace → cell name) in
// the store of that name (pgstore.OpenCells opens them from a placement
// map). Every cell must have a store; a store no namespace names is kept:
// a server running every cell's leader work (cairn server --placement)
// still runs its rescuer there.
func NewCells(stores map[string]store.Store, namespaces map[string]string) (*Cells, error) {
	if len(stores) == 0 {
		return nil, errors.New("cells: no cells")
	}
	c := &Cells{stores: map[string]store.Store{}, namespaces: map[string]string{}}
	for name, st := range stores {
		if strings.TrimSpace(name) == "" || st == nil {
			return nil, errors.Newf("cells: cell %q has no name or no store", name)
		}
		c.stores[name] = st
		c.names = append(c.names, name)
	}
	for ns, cell := range namespaces {
		if _, ok := c.stores[cell]; !ok {
			return nil, errors.Newf("cells: namespace %q is placed in cell %q, which has no store (cells: %s)", ns, cell, quotedList(c.names))
		}
		c.namespaces[ns] = cell
		c.placedNames = append(c.placedNames, ns)
	}
	slices.Sort(c.names)
	slices.Sort(c.placedNames)
	return c, nil
}

// Of returns the cell holding namespace and its store. A namespace the map
// does not place is refused ([ErrNotPlaced]), not sent to some default
// cell: a task started in the wrong database would be invisible to the
// workers of its own.
func (c *Cells) Of(namespace string) (cell string, st store.Store, err error) {
	cell, ok := c.namespaces[namespace]
	if !ok {
		return "", nil, errmark.Mark(errors.Newf("namespace %q is in no cell of the placement map (it places %s): add it under \"namespaces\"",
			namespace, quotedList(c.placedNames)), ErrNotPlaced)
	}
	return cell, c.stores[cell], nil
}

// Names returns the cells' names, sorted.
func (c *Cells) Names() []string { return slices.Clone(c.names) }

// Store returns the store of the cell named cell, nil if there is none.
func (c *Cells) Store(cell string) store.Store { return c.stores[cell] }

// Stores returns every cell's store by cell name (a copy).
func (c *Cells) Stores() map[string]store.Store { return maps.Clone(c.stores) }

// Namespaces returns the namespaces placed in cell, sorted.
func (c *Cells) Namespaces(cell string) []string {
	var in []string
	for _, ns := range c.placedNames {
		if c.namespaces[ns] == cell {
			in = append(in, ns)
		}
	}
	return in
}

// quotedList writes names as `"a", "b"`, or "none".
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
