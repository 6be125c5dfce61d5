package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cairnflow/cairn/engine/store"
)

// DefaultMoveDrainTimeout is MoveParams.DrainTimeout's default.
const DefaultMoveDrainTimeout = 5 * time.Minute

// MoveParams says which namespace [MoveNamespace] moves, and where.
type MoveParams struct {
	// Namespace to move.
	Namespace string
	// ToCell is the destination cell's name, as the placement map calls
	// it: the source's refusals name it to a process still on the old map.
	ToCell string
	// DrainTimeout bounds the wait for the namespace's running attempts
	// to end; past it the move is undone. Default
	// [DefaultMoveDrainTimeout].
	DrainTimeout time.Duration
	// Logf, when set, is told of each phase as it begins.
	Logf func(format string, args ...any)
}

// MoveReport says what [MoveNamespace] did.
type MoveReport struct {
	// Rows are the rows moved, by table.
	Rows map[string]int64
	// Drained is how long the namespace's running attempts took to end.
	Drained time.Duration
	// Paused is how long the namespace's starts and claims were refused
	// before its rows were in the destination: from the fence to the
	// copy's commit there.
	Paused time.Duration
	// Resumed: an earlier move had copied the rows; this one removed the
	// source's.
	Resumed bool
}

// moveTable is a table whose rows of a namespace move with it: where
// selects them (%[1]s the schema, %[2]s the namespace as a literal).
// merge: the destination may hold rows of the namespace already, which
// are kept (a worker on the new map records its task types there when it
// starts, before the move); the source's are added beside them.
type moveTable struct {
	name, where string
	merge       bool
}

// movedTables are the tables whose rows belong to a namespace, in the
// order they are removed from the source (events before the tasks their
// selection reads). Every other table of the schema is the cell's own
// (cellTables); a table in neither makes a move refuse, so a migration
// that adds one must say which it is.
var movedTables = []moveTable{
	{name: "events", where: "task_id IN (SELECT id FROM %[1]s.tasks WHERE namespace = %[2]s)"},
	{name: "namespaces", where: "name = %[2]s"},
	{name: "blobs", where: "namespace = %[2]s"},
	{name: "budget_reservations", where: "namespace = %[2]s"},
	{name: "budget_waits", where: "namespace = %[2]s"},
	{name: "budget_windows", where: "namespace = %[2]s"},
	{name: "budgets", where: "namespace = %[2]s"},
	{name: "inquiries", where: "namespace = %[2]s"},
	{name: "model_admissions", where: "namespace = %[2]s"},
	{name: "model_limits", where: "namespace = %[2]s"},
	{name: "model_tickets", where: "namespace = %[2]s"},
	{name: "queues", where: "namespace = %[2]s"},
	{name: "rate_limits", where: "namespace = %[2]s"},
	{name: "remote_steps", where: "namespace = %[2]s"},
	{name: "retired_keys", where: "namespace = %[2]s"},
	{name: "schedules", where: "namespace = %[2]s"},
	{name: "stranded_tasks", where: "namespace = %[2]s"},
	{name: "stream_entries", where: "namespace = %[2]s"},
	{name: "task_types", where: "namespace = %[2]s", merge: true},
	{name: "tasks", where: "namespace = %[2]s"},
}

// cellTables are the cell's own: its leader lease and its migrations.
var cellTables = []string{"leaders", "schema_migrations"}

// MoveNamespace moves a namespace's rows (tasks and their histories,
// schedules, settings, keys, blob rows, budgets, limits) from the cell of
// src to the cell of dst, both at the same migration, in three steps:
//
//  1. Fence: triggers on src's tasks refuse the namespace's new tasks and
//     its claims (SQLSTATE CRN02, naming p.ToCell); its active schedules
//     are paused there.
//  2. Drain: it waits, up to p.DrainTimeout, until none of the
//     namespace's tasks is running (their attempts end as they would;
//     the waiting and pending stay); past it the fence is undone.
//  3. Copy: in a transaction of src that locks the namespace's tasks, it
//     copies every row of the namespace into dst in one transaction
//     (the schedules paused by the fence active again there), commits it,
//     then removes the rows from src and commits.
//
// The fence stays in src: a process on the old placement map is told
// where the namespace went. A move interrupted after the copy's commit
// is finished by running it again (Resumed). dst must hold nothing of the
// namespace. Blobs kept in a blob store keep their bytes where they are
// (the rows name them); the archive is untouched.
func MoveNamespace(ctx context.Context, src, dst *Store, p MoveParams) (*MoveReport, error) {
	if err := validateMove(src, dst, p); err != nil {
		return nil, err
	}
	if p.DrainTimeout <= 0 {
		p.DrainTimeout = DefaultMoveDrainTimeout
	}
	if p.Logf == nil {
		p.Logf = func(string, ...any) {}
	}
	m := &mover{src: src, dst: dst, p: p, report: &MoveReport{Rows: map[string]int64{}}}
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	fenced, err := m.fenced(ctx)
	if err != nil {
		return nil, err
	}
	copied, err := m.dstHolds(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case copied && fenced:
		// An earlier move's copy committed (or so it seems): the source's
		// rows go only if the destination holds every task of them, each
		// at least as far along.
		if err := m.requireCopied(ctx); err != nil {
			return nil, err
		}
		p.Logf("the rows of %s are already in the destination: removing the source's", p.Namespace)
		m.report.Resumed = true
		return m.report, m.removeResumed(ctx)
	case copied:
		return nil, errors.Newf("move namespace %s: the destination already holds rows of it (a leftover of an earlier move?): remove them first", p.Namespace)
	}
	fencedAt := time.Now()
	var paused []string
	if fenced {
		// An earlier move fenced it and stopped before its copy (its
		// undo failed too): the fence holds; the schedules it paused
		// are not known any more, and stay paused.
		p.Logf("%s is fenced in the source already (an earlier move's)", p.Namespace)
	} else {
		p.Logf("fencing %s in the source: its new tasks and claims are refused", p.Namespace)
		if paused, err = m.fence(ctx); err != nil {
			return nil, err
		}
	}
	p.Logf("waiting for the running attempts of %s to end (at most %s)", p.Namespace, p.DrainTimeout)
	if err := m.drain(ctx); err != nil {
		return nil, errors.CombineErrors(err, m.unfence(context.WithoutCancel(ctx), paused))
	}
	m.report.Drained = time.Since(fencedAt)
	p.Logf("copying %s", p.Namespace)
	if err := m.copyAndRemove(ctx, paused, fencedAt); err != nil {
		if m.report.Paused == 0 {
			// A commit whose answer was lost may have committed: the
			// fence stays while the destination holds the namespace.
			if copied, checkErr := m.dstHolds(context.WithoutCancel(ctx)); checkErr != nil || copied {
				return nil, errors.CombineErrors(errors.Wrapf(err,
					"move namespace %s: the destination may hold its rows (the fence stays): run the move again", p.Namespace), checkErr)
			}
			// Nothing committed in dst: the namespace goes on in src.
			return nil, errors.CombineErrors(err, m.unfence(context.WithoutCancel(ctx), paused))
		}
		return m.report, errors.Wrapf(err, "move namespace %s: the rows are in the destination, the source still has them: run the move again to remove them", p.Namespace)
	}
	return m.report, nil
}

// badMoveName says whether name cannot be a namespace or a cell in a
// move: empty, over 128 bytes, or holding a control character or a
// backslash (the names go into the fence's SQL as literals).
func badMoveName(name string) bool {
	return name == "" || len(name) > 128 || strings.ContainsFunc(name, func(r rune) bool { return unicode.IsControl(r) || r == '\\' })
}

// validateMove refuses what no move can do.
func validateMove(src, dst *Store, p MoveParams) error {
	switch {
	case src == nil || dst == nil:
		return errors.New("move namespace: both stores are required")
	case src == dst:
		return errors.Newf("move namespace %s: the source and the destination are the same store", p.Namespace)
	case badMoveName(p.Namespace):
		return errors.Newf("move namespace: %q is not a namespace name", p.Namespace)
	case badMoveName(p.ToCell):
		return errors.Newf("move namespace %s: the destination cell's name is required", p.Namespace)
	case p.DrainTimeout < 0:
		return errors.Newf("move namespace %s: drain timeout %s is negative", p.Namespace, p.DrainTimeout)
	}
	return nil
}

type mover struct {
	src, dst *Store
	p        MoveParams
	report   *MoveReport
	columns  map[string][]string // by moved table: its columns, as src has them
}

// literal is the namespace as a SQL string literal (DDL and COPY take no
// parameters).
func (m *mover) literal() string { return quoteLiteral(m.p.Namespace) }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// triggerNames are the fence's two triggers for the namespace: a hash of
// it, as a namespace may be longer than an identifier.
func (m *mover) triggerNames() (starts, claims string) {
	sum := sha256.Sum256([]byte(m.p.Namespace))
	h := hex.EncodeToString(sum[:8])
	return "cairn_moved_starts_" + h, "cairn_moved_claims_" + h
}

func (m *mover) table(s *Store, name string) string {
	return pgx.Identifier{s.schema, name}.Sanitize()
}

func (m *mover) where(s *Store, t moveTable) string {
	return fmt.Sprintf(t.where, pgx.Identifier{s.schema}.Sanitize(), m.literal())
}

// check holds both cells to the same migrations and src's tables to those
// a move knows, and reads their columns.
func (m *mover) check(ctx context.Context) error {
	srcStates, err := MigrationStatus(ctx, m.src.pool, m.src.schema)
	if err != nil {
		return errors.Wrap(err, "move namespace: read the source's migrations")
	}
	dstStates, err := MigrationStatus(ctx, m.dst.pool, m.dst.schema)
	if err != nil {
		return errors.Wrap(err, "move namespace: read the destination's migrations")
	}
	applied := func(states []store.MigrationState) []int {
		var out []int
		for _, s := range states {
			if s.AppliedAt != nil {
				out = append(out, s.Version)
			}
		}
		return out
	}
	if a, b := applied(srcStates), applied(dstStates); !slices.Equal(a, b) {
		return errors.Newf("move namespace %s: the cells are at different migrations (source %d, destination %d applied): run cairn migrate up --placement first",
			m.p.Namespace, len(a), len(b))
	}
	rows, err := m.src.pool.Query(ctx, `SELECT table_name::text, column_name::text FROM information_schema.columns
		WHERE table_schema = $1 AND is_generated = 'NEVER' ORDER BY table_name, ordinal_position`, m.src.schema)
	if err != nil {
		return errors.Wrap(interpretError(err), "move namespace: read the source's tables")
	}
	columns := map[string][]string{}
	var table, column string
	if _, err := pgx.ForEachRow(rows, []any{&table, &column}, func() error {
		columns[table] = append(columns[table], column)
		return nil
	}); err != nil {
		return errors.Wrap(interpretError(err), "move namespace: read the source's tables")
	}
	known := map[string]bool{}
	for _, t := range movedTables {
		known[t.name] = true
	}
	for _, t := range cellTables {
		known[t] = true
	}
	for _, t := range slices.Sorted(maps.Keys(columns)) {
		if !known[t] {
			return errors.AssertionFailedf("move namespace: table %s is unknown to the move (neither moved nor the cell's own)", t)
		}
	}
	m.columns = columns
	return nil
}

// fenced says whether src has the namespace's fence (an earlier move's).
func (m *mover) fenced(ctx context.Context) (bool, error) {
	has, err := m.hasFence(ctx, m.src)
	return has, errors.Wrap(interpretError(err), "move namespace: read the source's fence")
}

// hasFence says whether s has a trigger of the namespace's fence.
func (m *mover) hasFence(ctx context.Context, s *Store) (bool, error) {
	starts, claims := m.triggerNames()
	var has bool
	err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname IN ($2, $3))",
		m.table(s, "tasks"), starts, claims).Scan(&has)
	return has, err
}

// dstHolds says whether dst holds any row of the namespace.
func (m *mover) dstHolds(ctx context.Context) (bool, error) {
	for _, t := range movedTables {
		if t.merge {
			continue
		}
		var found bool
		err := m.dst.pool.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE %s)", m.table(m.dst, t.name), m.where(m.dst, t))).Scan(&found)
		if err != nil {
			return false, errors.Wrapf(interpretError(err), "move namespace: read the destination's %s", t.name)
		}
		if found {
			return true, nil
		}
	}
	return false, nil
}

// fence creates the triggers that refuse the namespace's new tasks and
// claims in src and pauses its active schedules there (returning their
// names), in one transaction.
func (m *mover) fence(ctx context.Context) ([]string, error) {
	starts, claims := m.triggerNames()
	tasks, fn := m.table(m.src, "tasks"), pgx.Identifier{m.src.schema, "refuse_moved_namespace"}.Sanitize()
	cell := quoteLiteral(m.p.ToCell)
	var paused []string
	err := pgx.BeginFunc(ctx, m.src.pool, func(tx pgx.Tx) error {
		for _, stmt := range []string{
			// CREATE TRIGGER waits for the writers of tasks, and the
			// writers queue behind it: bounded, as the copy's lock is.
			fmt.Sprintf("SET LOCAL lock_timeout = %d", moveLockTimeout.Milliseconds()),
			fmt.Sprintf("CREATE TRIGGER %s BEFORE INSERT ON %s FOR EACH ROW WHEN (NEW.namespace = %s) EXECUTE FUNCTION %s(%s)",
				pgx.Identifier{starts}.Sanitize(), tasks, m.literal(), fn, cell),
			fmt.Sprintf("CREATE TRIGGER %s BEFORE UPDATE ON %s FOR EACH ROW WHEN (NEW.namespace = %s AND NEW.status = 'running' AND OLD.status <> 'running') EXECUTE FUNCTION %s(%s)",
				pgx.Identifier{claims}.Sanitize(), tasks, m.literal(), fn, cell),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, "UPDATE "+m.table(m.src, "schedules")+" SET paused = true WHERE namespace = $1 AND NOT paused RETURNING name", m.p.Namespace)
		if err != nil {
			return err
		}
		paused, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return paused, errors.Wrapf(interpretError(err), "move namespace %s: fence it in the source", m.p.Namespace)
}

// unfence undoes fence: a move that stopped before its copy committed
// leaves the namespace as it was in src.
func (m *mover) unfence(ctx context.Context, paused []string) error {
	err := pgx.BeginFunc(ctx, m.src.pool, func(tx pgx.Tx) error {
		if err := m.dropFence(ctx, tx, m.src); err != nil {
			return err
		}
		return m.resumeSchedules(ctx, tx, m.src, paused)
	})
	return errors.Wrapf(interpretError(err), "move namespace %s: undo the fence (the namespace's new tasks are refused in the source until it is dropped)", m.p.Namespace)
}

// dropDstFence drops the namespace's fence from dst, if dst has one. Its
// DROP TRIGGER waits for dst's writers of tasks while the copy holds the
// source's tables: bounded, as the copy's lock is.
func (m *mover) dropDstFence(ctx context.Context) error {
	if has, err := m.hasFence(ctx, m.dst); err != nil || !has {
		return err
	}
	return pgx.BeginFunc(ctx, m.dst.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", moveLockTimeout.Milliseconds())); err != nil {
			return err
		}
		return m.dropFence(ctx, tx, m.dst)
	})
}

// resumeSchedules unpauses the namespace's schedules named in s.
func (m *mover) resumeSchedules(ctx context.Context, tx pgx.Tx, s *Store, names []string) error {
	_, err := tx.Exec(ctx, "UPDATE "+m.table(s, "schedules")+" SET paused = false WHERE namespace = $1 AND name = ANY($2)", m.p.Namespace, names)
	return err
}

// dropFence drops the namespace's fence triggers from s, if it has them.
func (m *mover) dropFence(ctx context.Context, tx pgx.Tx, s *Store) error {
	starts, claims := m.triggerNames()
	for _, name := range []string{starts, claims} {
		if _, err := tx.Exec(ctx, fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", pgx.Identifier{name}.Sanitize(), m.table(s, "tasks"))); err != nil {
			return err
		}
	}
	return nil
}

// drainPoll is how often drain looks at the namespace's running tasks.
const drainPoll = 100 * time.Millisecond

// drain waits until none of the namespace's tasks is running in src.
func (m *mover) drain(ctx context.Context) error {
	deadline := time.Now().Add(m.p.DrainTimeout)
	for {
		var running int
		err := m.src.pool.QueryRow(ctx, "SELECT count(*) FROM "+m.table(m.src, "tasks")+" WHERE namespace = $1 AND status = 'running'",
			m.p.Namespace).Scan(&running)
		if err != nil {
			return errors.Wrapf(interpretError(err), "move namespace %s: count its running tasks", m.p.Namespace)
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Newf("move namespace %s: %d of its tasks still running after %s: the move is undone, nothing copied; run it again, or cancel them",
				m.p.Namespace, running, m.p.DrainTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// moveLockTimeout bounds the wait for the source's table locks: behind a
// long transaction the copy gives up (the move is undone) rather than
// holding every writer of the cell in the queue behind it.
const moveLockTimeout = 10 * time.Second

// copyAndRemove copies the namespace's rows into dst and removes them from
// src. A transaction of src takes every moved table in SHARE mode first:
// no write of any namespace runs in the source cell until it commits
// (the copy's pause, a fraction of a second for a thousand tasks), so
// what it copies is what it removes, and nothing can change between.
// Writes that waited then find the namespace's rows gone (an append's
// task row) or are refused by the fence (a start, a claim).
func (m *mover) copyAndRemove(ctx context.Context, paused []string, fencedAt time.Time) error {
	var err error
	for try := 1; ; try++ {
		err = m.copyOnce(ctx, paused, fencedAt)
		if err == nil || m.report.Paused != 0 || try == copyTries || !isLockFailure(err) {
			return err
		}
		m.p.Logf("the copy's locks met a writer (%v): trying again", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		}
	}
}

// copyTries bounds the copies a deadlock or a lock timeout starts again
// (nothing is written before the locks are held).
const copyTries = 5

// isLockFailure says whether err is a deadlock or a lock_timeout.
func isLockFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "55P03")
}

// copyOnce is one try of copyAndRemove.
func (m *mover) copyOnce(ctx context.Context, paused []string, fencedAt time.Time) error {
	srcTx, err := m.src.pool.Begin(ctx)
	if err != nil {
		return errors.Wrap(interpretError(err), "move namespace: begin in the source")
	}
	defer func() { _ = srcTx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := srcTx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", moveLockTimeout.Milliseconds())); err != nil {
		return errors.Wrap(interpretError(err), "move namespace: set the lock timeout")
	}
	// tasks, then events, as the appends take them (an append updates a
	// task's row, then inserts its events), then the rest: a writer of
	// another order may still deadlock with it, which copyAndRemove retries.
	tables := []string{m.table(m.src, "tasks"), m.table(m.src, "events")}
	for _, t := range movedTables {
		if t.name != "tasks" && t.name != "events" {
			tables = append(tables, m.table(m.src, t.name))
		}
	}
	if _, err := srcTx.Exec(ctx, "LOCK TABLE "+strings.Join(tables, ", ")+" IN SHARE MODE"); err != nil {
		return errors.Wrap(interpretError(err), "move namespace: lock the source's tables")
	}
	// The destination may have fenced the namespace when it moved out
	// earlier: the fence goes (in a short transaction of its own, as a
	// DROP TRIGGER locks the table) before the rows come in.
	if err := m.dropDstFence(ctx); err != nil {
		return errors.Wrap(interpretError(err), "move namespace: drop an earlier fence in the destination")
	}
	dstTx, err := m.dst.pool.Begin(ctx)
	if err != nil {
		return errors.Wrap(interpretError(err), "move namespace: begin in the destination")
	}
	defer func() { _ = dstTx.Rollback(context.WithoutCancel(ctx)) }()
	for _, t := range movedTables {
		n, err := m.copyTable(ctx, srcTx, dstTx, t)
		if err != nil {
			return errors.Wrapf(err, "move namespace %s: copy %s", m.p.Namespace, t.name)
		}
		m.report.Rows[t.name] = n
	}
	// The schedules the fence paused run again.
	if err := m.resumeSchedules(ctx, dstTx, m.dst, paused); err != nil {
		return errors.Wrap(interpretError(err), "move namespace: resume its schedules in the destination")
	}
	if err := dstTx.Commit(ctx); err != nil {
		return errors.Wrap(interpretError(err), "move namespace: commit in the destination")
	}
	m.report.Paused = time.Since(fencedAt)
	if err := m.remove(ctx, srcTx); err != nil {
		return err
	}
	return errors.Wrap(interpretError(srcTx.Commit(ctx)), "move namespace: commit the removal in the source")
}

// copyTable streams one table's rows of the namespace from src's
// transaction into dst's (COPY, binary: both at the same migration).
func (m *mover) copyTable(ctx context.Context, srcTx, dstTx pgx.Tx, t moveTable) (int64, error) {
	cols := make([]string, len(m.columns[t.name]))
	for i, c := range m.columns[t.name] {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	list := strings.Join(cols, ", ")
	out := fmt.Sprintf("COPY (SELECT %s FROM %s WHERE %s) TO STDOUT (FORMAT binary)", list, m.table(m.src, t.name), m.where(m.src, t))
	target := m.table(m.dst, t.name)
	if t.merge {
		// Into a table of the transaction's own, then beside the rows
		// the destination has.
		target = pgx.Identifier{"cairn_move_" + t.name}.Sanitize()
		if _, err := dstTx.Exec(ctx, fmt.Sprintf("CREATE TEMP TABLE %s (LIKE %s) ON COMMIT DROP", target, m.table(m.dst, t.name))); err != nil {
			return 0, interpretError(err)
		}
	}
	in := fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", target, list)
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := srcTx.Conn().PgConn().CopyTo(ctx, w, out)
		_ = w.CloseWithError(err)
		done <- err
	}()
	tag, err := dstTx.Conn().PgConn().CopyFrom(ctx, r, in)
	_ = r.CloseWithError(io.ErrClosedPipe) // unblocks the reader's writer if CopyFrom stopped early
	if outErr := <-done; outErr != nil && !errors.Is(outErr, io.ErrClosedPipe) {
		return 0, interpretError(outErr)
	}
	if err != nil {
		return 0, interpretError(err)
	}
	if t.merge {
		tag, err = dstTx.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s ON CONFLICT DO NOTHING", m.table(m.dst, t.name), list, list, target))
		if err != nil {
			return 0, interpretError(err)
		}
	}
	return tag.RowsAffected(), nil
}

// remove deletes the namespace's rows from src in tx (events through
// retention's door: they are append-only otherwise).
func (m *mover) remove(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT set_config('cairn.retention', 'on', true)"); err != nil {
		return errors.Wrap(interpretError(err), "move namespace: open the events' door")
	}
	for _, t := range movedTables {
		if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s", m.table(m.src, t.name), m.where(m.src, t))); err != nil {
			return errors.Wrapf(interpretError(err), "move namespace %s: remove %s from the source", m.p.Namespace, t.name)
		}
	}
	return nil
}

// requireCopied refuses to finish a move unless dst holds every task of
// the namespace that src does, each at least as far along (last_seq):
// rows of the namespace in dst that are not the copy's (a setting written
// on the new map) prove nothing.
func (m *mover) requireCopied(ctx context.Context) error {
	rows, err := m.src.pool.Query(ctx, "SELECT id, last_seq FROM "+m.table(m.src, "tasks")+" WHERE namespace = $1", m.p.Namespace)
	if err != nil {
		return errors.Wrap(interpretError(err), "move namespace: read the source's tasks")
	}
	type task struct {
		id  [16]byte
		seq int64
	}
	scanTask := func(r pgx.CollectableRow) (task, error) {
		var t task
		return t, r.Scan(&t.id, &t.seq)
	}
	srcTasks, err := pgx.CollectRows(rows, scanTask)
	if err != nil {
		return errors.Wrap(interpretError(err), "move namespace: read the source's tasks")
	}
	ids := make([][16]byte, len(srcTasks))
	for i, t := range srcTasks {
		ids[i] = t.id
	}
	rows, err = m.dst.pool.Query(ctx, "SELECT id, last_seq FROM "+m.table(m.dst, "tasks")+" WHERE namespace = $1 AND id = ANY($2)", m.p.Namespace, ids)
	if err != nil {
		return errors.Wrap(interpretError(err), "move namespace: read the destination's tasks")
	}
	dstTasks, err := pgx.CollectRows(rows, scanTask)
	if err != nil {
		return errors.Wrap(interpretError(err), "move namespace: read the destination's tasks")
	}
	seqs := make(map[[16]byte]int64, len(dstTasks))
	for _, t := range dstTasks {
		seqs[t.id] = t.seq
	}
	behind := 0
	for _, t := range srcTasks {
		if seq, ok := seqs[t.id]; !ok || seq < t.seq {
			behind++
		}
	}
	if behind > 0 {
		return errors.Newf("move namespace %s: the source is fenced and the destination holds rows of it, but %d of the source's %d tasks are missing there or behind: not a copy to finish; compare the cells before removing anything",
			m.p.Namespace, behind, len(srcTasks))
	}
	return nil
}

// removeResumed finishes a move whose copy committed: src's rows go.
func (m *mover) removeResumed(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, m.src.pool, func(tx pgx.Tx) error { return m.remove(ctx, tx) })
	return errors.Wrapf(interpretError(err), "move namespace %s: remove it from the source", m.p.Namespace)
}
