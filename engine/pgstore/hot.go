package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/migrations"
)

// Hot functions. Without prepared statements (a pooler in transaction
// mode, [PoolerTransaction]) PostgreSQL parses and plans every statement
// at every execution: the claim alone took 1.9 ms of planning against
// 0.2 ms prepared. The statements on the way from a start to a finished
// task are therefore also kept as PL/pgSQL functions, one per statement,
// whose plans PL/pgSQL caches per server connection, whichever client the
// pooler hands it to: the claim through its function costs 0.26 ms. A store
// whose pool does not prepare statements calls the functions instead of
// sending the statements.
//
// Migrate creates them from the statements' current text; a function's
// name carries a hash of that text, so a new version of cairn creates its
// own next to the old one's (processes of both run during an upgrade).

// hotQueries are the statements kept as functions.
var hotQueries = []string{"TaskInsertOne", "TaskInsertMany", "ClaimLocks", "TaskClaimMany", claimExcluding, "EventAppendMany", "LeaseExtendMany"}

// hotFunction is a hot statement's function in a schema.
type hotFunction struct {
	query string   // the statement's name
	name  string   // the function's name, unqualified
	sql   string   // the statement, with named arguments
	args  []string // its named arguments, in pgx's order ($1, $2, ...); nil if unknown
}

// newHotFunction names the function of statement query (its text sql) at
// migration version: the hash covers both, since the function's parameter
// and result types are the tables' when it was made, and a migration may
// change a column's type without changing the statement.
func newHotFunction(query, sql string, version int) hotFunction {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", sql, version))
	return hotFunction{query: query, name: "hot_" + strings.ToLower(query) + "_" + hex.EncodeToString(sum[:4]), sql: sql, args: namedArgs(sql)}
}

// call is the statement that calls the function, with the statement's own
// named arguments in the function's order: callers bind the same
// pgx.NamedArgs as for the statement.
func (f hotFunction) call(schema string) string {
	args := make([]string, len(f.args))
	for i, a := range f.args {
		args[i] = "@" + a
	}
	return "SELECT * FROM " + pgx.Identifier{schema, f.name}.Sanitize() + "(" + strings.Join(args, ", ") + ")"
}

var (
	namedArgPattern = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)
	// sqlNoise is what pgx skips when it looks for named arguments: line
	// comments and string literals.
	sqlNoise = regexp.MustCompile(`--[^\n]*|'(?:[^']|'')*'`)
)

// namedArgs lists a statement's named arguments in the order pgx.NamedArgs
// numbers them: the names a pattern finds, ordered by pgx's own rewriting
// (its lexer knows comments and quotes as a pattern cannot), or nil if the
// two disagree on the names.
func namedArgs(sql string) []string {
	var found []string
	for _, m := range namedArgPattern.FindAllStringSubmatch(sqlNoise.ReplaceAllString(sql, ""), -1) {
		if !slices.Contains(found, m[1]) {
			found = append(found, m[1])
		}
	}
	marked := pgx.NamedArgs{}
	for i, name := range found {
		marked[name] = i
	}
	_, values, err := marked.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil || len(values) != len(found) {
		return nil
	}
	ordered := make([]string, len(values))
	for i, v := range values {
		at, ok := v.(int)
		if !ok {
			return nil // a name pgx found and the pattern did not
		}
		ordered[i] = found[at]
	}
	return ordered
}

// hotFunctions are the hot statements' functions for queries (loadQueries')
// at this version's latest migration; those whose arguments could not be
// ordered are left out (their statements are sent as they are).
func hotFunctions(queries map[string]string) []hotFunction {
	version := migrations.Latest()
	var fns []hotFunction
	for _, q := range hotQueries {
		if f := newHotFunction(q, queries[q], version); f.args != nil {
			fns = append(fns, f)
		}
	}
	return fns
}

// missingHotFunctions returns the hot functions schema does not have.
func missingHotFunctions(ctx context.Context, q querier, schema string, fns []hotFunction) ([]hotFunction, error) {
	names := make([]string, len(fns))
	for i, f := range fns {
		names[i] = f.name
	}
	rows, err := q.Query(ctx, `SELECT p.proname FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = ANY($2)`, schema, names)
	if err != nil {
		return nil, errors.Wrap(err, "look up the hot functions")
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, errors.Wrap(err, "look up the hot functions")
	}
	var missing []hotFunction
	for _, f := range fns {
		if !slices.Contains(have, f.name) {
			missing = append(missing, f)
		}
	}
	return missing, nil
}

// createHotFunction creates f in schema: the statement described by the
// server gives the function's parameter and result types.
func createHotFunction(ctx context.Context, tx pgx.Tx, schema string, f hotFunction) error {
	positional, _, err := pgx.NamedArgs{}.RewriteQuery(ctx, tx.Conn(), f.sql, nil)
	if err != nil {
		return errors.Wrapf(err, "hot function of %s", f.query)
	}
	desc, err := tx.Prepare(ctx, "", positional)
	if err != nil {
		return errors.Wrapf(err, "describe %s", f.query)
	}
	typeName := func(oid uint32) (string, error) {
		var name string
		err := tx.QueryRow(ctx, "SELECT format_type($1, NULL)", oid).Scan(&name)
		return name, errors.Wrapf(err, "hot function of %s: type %d", f.query, oid)
	}
	params := make([]string, len(desc.ParamOIDs))
	for i, oid := range desc.ParamOIDs {
		if params[i], err = typeName(oid); err != nil {
			return err
		}
	}
	cols := make([]string, len(desc.Fields))
	for i, fd := range desc.Fields {
		t, err := typeName(fd.DataTypeOID)
		if err != nil {
			return err
		}
		cols[i] = fmt.Sprintf("c%d %s", i+1, t)
	}
	body := strings.TrimSuffix(strings.TrimSpace(positional), ";")
	if strings.Contains(body, "$cairn$") {
		return errors.AssertionFailedf("hot function of %s: its text holds the quote $cairn$", f.query)
	}
	// The result columns c1, c2, ... are variables in the body too: a
	// column of the same name wins. A domain-typed column would be
	// described as its base type and refused at the first call: the
	// tables have none.
	ddl := fmt.Sprintf("CREATE FUNCTION %s(%s) RETURNS TABLE (%s) LANGUAGE plpgsql AS $cairn$\n#variable_conflict use_column\nBEGIN\nRETURN QUERY %s;\nEND\n$cairn$",
		pgx.Identifier{schema, f.name}.Sanitize(), strings.Join(params, ", "), strings.Join(cols, ", "), body)
	_, err = tx.Exec(ctx, ddl)
	return errors.Wrapf(err, "create the hot function of %s", f.query)
}

// ensureHotFunctions creates the hot functions schema lacks, under the
// migration lock.
func ensureHotFunctions(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	queries, err := loadQueries(schema)
	if err != nil {
		return err
	}
	fns := hotFunctions(queries)
	return withMigrationLock(ctx, pool, schema, func(tx pgx.Tx) error {
		missing, err := missingHotFunctions(ctx, tx, schema, fns)
		if err != nil {
			return err
		}
		for _, f := range missing {
			if err := createHotFunction(ctx, tx, schema, f); err != nil {
				return err
			}
		}
		return nil
	})
}

// preparesStatements reports whether pool's connections prepare their
// statements (pgx's default mode), so the store sends the hot statements
// themselves; otherwise it calls their functions.
func preparesStatements(pool *pgxpool.Pool) bool {
	return pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
}
