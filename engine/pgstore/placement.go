package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/jsoncheck"
)

// Placement says which PostgreSQL cluster (a cell) holds each namespace:
// a namespace's tasks and events live in its cell only. Its JSON form:
//
//	{"cells": {"eu": "postgres://…",
//	           "us": {"url": "postgres://…@pgbouncer-us:6432/cairn",
//	                  "listen_url": "postgres://…@pg-us:5432/cairn"}},
//	 "namespaces": {"acme": "eu", "globex": "us"}}
//
// A cell is its connection string, or an object with its listener's own
// connection string besides ([Config.ListenURL]: needed when url goes
// through a pooler in transaction mode). A namespace it does not name is
// refused, not sent to some default cell: a task started in the wrong
// cluster would be invisible to the workers of its own.
type Placement struct {
	Cells      map[string]Cell   `json:"cells"`      // cell name → its connection strings
	Namespaces map[string]string `json:"namespaces"` // namespace → cell name
}

// Cell is where a cell of a [Placement] is reached.
type Cell struct {
	URL       string `json:"url"`                  // the connection string of its pool
	ListenURL string `json:"listen_url,omitempty"` // the listener's, if not URL
}

// UnmarshalJSON reads a cell written as its URL alone or as an object.
func (c *Cell) UnmarshalJSON(data []byte) error {
	if len(bytes.TrimSpace(data)) > 0 && bytes.TrimSpace(data)[0] == '"' {
		*c = Cell{}
		return json.Unmarshal(data, &c.URL)
	}
	type plain Cell // without this method
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var v plain
	if err := dec.Decode(&v); err != nil {
		return errors.Wrap(err, `a cell is "postgres://…" or {"url": "postgres://…", "listen_url": "postgres://…"}`)
	}
	*c = Cell(v)
	return nil
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
	// encoding/json lets the last of two members of one name win: a
	// namespace named twice would go to one cell silently.
	if err := jsoncheck.Check(data, ""); err != nil {
		return nil, errors.Newf("placement map: %s", err)
	}
	if len(p.Cells) == 0 {
		return nil, errors.New("placement map: no cells")
	}
	databases := map[string]string{} // hosts and database → the cell naming them
	for _, name := range slices.Sorted(maps.Keys(p.Cells)) {
		cell := p.Cells[name]
		if strings.TrimSpace(name) == "" {
			return nil, errors.New("placement map: a cell has an empty name")
		}
		if cell.URL == "" {
			return nil, errors.Newf("placement map: cell %q has no url", name)
		}
		cfg, err := ParsePoolConfig(cell.URL, PoolOptions{})
		if err != nil {
			return nil, errors.Newf("placement map: cell %q: its URL does not parse (%s)", name, ConnectFailure(err))
		}
		// Two cells on one database would be one cell with two leaders,
		// each cell's collector seeing the other's rows.
		database := Hosts(cfg.ConnConfig) + "/" + cfg.ConnConfig.Database
		if other, ok := databases[database]; ok {
			return nil, errors.Newf("placement map: cells %q and %q are the same database (%s): give each cell a database of its own", other, name, database)
		}
		databases[database] = name
		if cell.ListenURL == "" {
			continue
		}
		if _, err := pgx.ParseConfig(cell.ListenURL); err != nil {
			return nil, errors.Newf("placement map: cell %q: its listen_url does not parse (%s)", name, lastClause(err.Error()))
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

// CellOf returns the cell holding namespace and where it is reached, or
// an error naming the namespaces the map places.
func (p *Placement) CellOf(namespace string) (name string, cell Cell, err error) {
	name, ok := p.Namespaces[namespace]
	if !ok {
		placed := make([]string, 0, len(p.Namespaces))
		for ns := range p.Namespaces {
			placed = append(placed, ns)
		}
		slices.Sort(placed)
		return "", Cell{}, errors.Newf("namespace %q is in no cell of the placement map (it places %s): add it under \"namespaces\"",
			namespace, quotedList(placed))
	}
	return name, p.Cells[name], nil
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

// CellOptions says how [OpenCells] opens each cell.
type CellOptions struct {
	// Schema holding cairn's tables in every cell. Default [DefaultSchema].
	Schema string
	// Pool is each cell's pool ([ParsePoolConfig]; a cell's URL may set
	// its own pool_max_conns).
	Pool PoolOptions
	// ControlConns, when positive, gives each cell a control pool of that
	// many connections ([Config.ControlPool]). Zero: none.
	ControlConns int32
	// Migrate applies cairn's migrations to each cell before its store is
	// made ([Migrate]).
	Migrate bool
	// Metrics counts the events every cell's store writes ([Config.Metrics]).
	Metrics store.Observer
	// ConnectTimeout bounds the wait for each cell to answer (migrations
	// are bounded by the context only). Default 5s.
	ConnectTimeout time.Duration
	// AllowUnreachable opens a cell that does not answer anyway: its pool
	// connects once the cell is back, and until then its namespaces fail
	// with store.ErrUnavailable while the other cells' work. Such cells
	// are listed in [CellStores.Unreachable]; with Migrate, they are not
	// migrated (migrate each when it is back, before new cairn versions
	// use it).
	AllowUnreachable bool
}

// CellStores are the stores of a placement map's cells, made by
// [OpenCells], with the pools under them.
type CellStores struct {
	// Stores holds each cell's store by cell name: with the map's
	// Namespaces they make an sdk.Cells (sdk.NewCells).
	Stores map[string]store.Store
	// Unreachable holds, with [CellOptions.AllowUnreachable], why each
	// cell that did not answer when opened did not (its store is in
	// Stores all the same).
	Unreachable map[string]error
	pools       []*pgxpool.Pool
}

// Close closes every cell's pools.
func (c *CellStores) Close() {
	for _, p := range c.pools {
		p.Close()
	}
}

// OpenCells opens a pool on each cell of p, checks that it answers (cells
// are opened in parallel; the error names every cell that did not answer,
// and why), migrates it if o says so, and makes its store. Once open, a
// cell that goes down stops only its own namespaces.
func OpenCells(ctx context.Context, p *Placement, o CellOptions) (*CellStores, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	names := slices.Sorted(maps.Keys(p.Cells))
	opened := make([]cellOpened, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			opened[i] = openCell(ctx, p.Cells[name], o)
		})
	}
	wg.Wait()
	cs := &CellStores{Stores: map[string]store.Store{}, Unreachable: map[string]error{}}
	var failed []string
	for i, c := range opened {
		cs.pools = append(cs.pools, c.pools...)
		if c.err != nil {
			failed = append(failed, fmt.Sprintf("cell %q: %s", names[i], c.err))
			continue
		}
		cs.Stores[names[i]] = c.store
		if c.down != nil {
			cs.Unreachable[names[i]] = c.down
		}
	}
	if len(failed) > 0 {
		cs.Close()
		return nil, errors.Newf("open the cells: %s", strings.Join(failed, "; "))
	}
	return cs, nil
}

// cellOpened is what opening one cell made: its pools (to close whatever
// happened) and its store, or why it failed; down is why a cell opened
// with AllowUnreachable did not answer.
type cellOpened struct {
	pools []*pgxpool.Pool
	store *Store
	down  error
	err   error
}

func openCell(ctx context.Context, cell Cell, o CellOptions) (c cellOpened) {
	cfg, err := ParsePoolConfig(cell.URL, o.Pool)
	if err != nil {
		return cellOpened{err: errors.Newf("its URL does not parse (%s)", ConnectFailure(err))}
	}
	pool, down, err := openCellPool(ctx, cfg, o)
	if err != nil {
		return cellOpened{err: err}
	}
	c.pools, c.down = append(c.pools, pool), down
	var control *pgxpool.Pool
	if o.ControlConns > 0 {
		cfg := pool.Config()
		cfg.MaxConns = o.ControlConns
		if down != nil {
			// The cell did not answer once: no second wait for it.
			control, err = pgxpool.NewWithConfig(ctx, cfg)
		} else {
			control, _, err = openCellPool(ctx, cfg, o)
		}
		if err != nil {
			c.err = err
			return c
		}
		c.pools = append(c.pools, control)
	}
	if o.Migrate && down == nil {
		if _, err := Migrate(ctx, pool, o.Schema); err != nil {
			c.err = err
			return c
		}
	}
	c.store, c.err = New(Config{Pool: pool, ControlPool: control, Schema: o.Schema, Metrics: o.Metrics, ListenURL: cell.ListenURL})
	return c
}

// openCellPool opens a pool of cfg and waits up to o.ConnectTimeout for it
// to answer; with o.AllowUnreachable, a cell that does not is given a pool
// that connects when it is back, and down says why it did not answer.
func openCellPool(ctx context.Context, cfg *pgxpool.Config, o CellOptions) (pool *pgxpool.Pool, down, err error) {
	connectCtx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	pool, err = NewPool(connectCtx, cfg.Copy())
	if err == nil || !o.AllowUnreachable {
		return pool, nil, err
	}
	lazy, lazyErr := pgxpool.NewWithConfig(ctx, cfg) // connects on first use
	if lazyErr != nil {
		return nil, nil, errors.Wrap(lazyErr, "open the pool")
	}
	return lazy, err, nil
}
