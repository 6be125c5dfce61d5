package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statements are written with named arguments (pgx.NamedArgs), which pgx
// turns into PostgreSQL's positional form ($1, $2, ...) by lexing the
// statement's text at every call: 160 µs for the claim's 10 KB, a quarter
// of an idle worker's CPU (its claims poll; issue 39's scale-out runs).
// The store works the rewriting out once, when it loads its statements,
// and hands pgx the result.

// positional is a statement in positional form and the names of its
// arguments, in order.
type positional struct {
	sql   string
	names []string
}

// positionals are the store's statements in positional form, by their
// named text.
type positionals map[string]*positional

// newPositionals rewrites each of queries once; a statement whose
// arguments cannot be ordered (see namedArgs) is left to pgx's rewriting
// at each call.
func newPositionals(queries map[string]string) positionals {
	out := make(positionals, len(queries))
	for _, sql := range queries {
		names := namedArgs(sql)
		if names == nil {
			continue
		}
		marked := make(pgx.NamedArgs, len(names))
		for _, name := range names {
			marked[name] = nil
		}
		rewritten, _, err := marked.RewriteQuery(context.Background(), nil, sql, nil)
		if err != nil {
			continue
		}
		out[sql] = &positional{sql: rewritten, names: names}
	}
	return out
}

// args returns a call's arguments with pgx.NamedArgs of a known statement
// replaced by its positional form; other arguments unchanged.
func (p positionals) args(sql string, args []any) []any {
	if len(args) != 1 {
		return args
	}
	named, ok := args[0].(pgx.NamedArgs)
	if !ok {
		return args
	}
	pos, ok := p[sql]
	if !ok {
		return args
	}
	return []any{positionalArgs{named: named, pos: pos}}
}

// batch makes the arguments of b's statements positional.
func (p positionals) batch(b *pgx.Batch) {
	for _, q := range b.QueuedQueries {
		q.Arguments = p.args(q.SQL, q.Arguments)
	}
}

// positionalArgs are named arguments bound to their statement's
// positional form: a pgx.QueryRewriter that rewrites nothing.
type positionalArgs struct {
	named pgx.NamedArgs
	pos   *positional
}

// RewriteQuery implements pgx.QueryRewriter: the positional text, and the
// values in its order (nil for a name not given, as pgx.NamedArgs does).
func (a positionalArgs) RewriteQuery(context.Context, *pgx.Conn, string, []any) (string, []any, error) {
	values := make([]any, len(a.pos.names))
	for i, name := range a.pos.names {
		values[i] = a.named[name]
	}
	return a.pos.sql, values, nil
}

// positionalDB runs statements on db with their arguments made positional
// (see positionals.args), and so does the transaction Begin opens.
type positionalDB struct {
	db  txQuerier
	pos positionals
}

func (d positionalDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.db.Exec(ctx, sql, d.pos.args(sql, args)...)
}

func (d positionalDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return d.db.Query(ctx, sql, d.pos.args(sql, args)...)
}

func (d positionalDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.db.QueryRow(ctx, sql, d.pos.args(sql, args)...)
}

func (d positionalDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return positionalTx{Tx: tx, pos: d.pos}, nil
}

func (d positionalDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	d.pos.batch(b)
	return d.db.SendBatch(ctx, b)
}

// positionalTx is a transaction whose statements' arguments are made
// positional, as positionalDB's are; a savepoint it opens is one too.
type positionalTx struct {
	pgx.Tx
	pos positionals
}

func (t positionalTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.Tx.Exec(ctx, sql, t.pos.args(sql, args)...)
}

func (t positionalTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.Tx.Query(ctx, sql, t.pos.args(sql, args)...)
}

func (t positionalTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.Tx.QueryRow(ctx, sql, t.pos.args(sql, args)...)
}

func (t positionalTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.pos.batch(b)
	return t.Tx.SendBatch(ctx, b)
}

func (t positionalTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return positionalTx{Tx: tx, pos: t.pos}, nil
}
