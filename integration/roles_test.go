package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/stretchr/testify/require"
)

// leastPrivilegeGrants is the deployment guide's role setup (docs/
// deployment.md), with the schema and role names filled in: an owner that
// migrates (given the schema by an administrator: no CREATE on the
// database), and an application role that only reads and writes rows.
const leastPrivilegeGrants = `
CREATE ROLE {owner} LOGIN;
CREATE ROLE {app} LOGIN;
CREATE SCHEMA {schema} AUTHORIZATION {owner};
GRANT USAGE ON SCHEMA {schema} TO {app};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {app};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} GRANT EXECUTE ON FUNCTIONS TO {app};
`

// TestLeastPrivilegeRoles: the owner role migrates; the application role,
// with only the guide's grants (EXECUTE on cairn's functions given to it,
// none to PUBLIC, as a hardened database does), runs the demo (claims,
// appends, NOTIFY, leadership, retention's deletes) both with prepared
// statements and through the hot functions, and the CLI's reads.
func TestLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	owner, app, schema := "cairn_owner_"+suffix, "cairn_app_"+suffix, "cairn_roles_"+suffix
	direct, err := url.Parse(enginetest.DatabaseURL(t))
	require.NoError(t, err)
	db := strings.TrimPrefix(direct.Path, "/")
	pool := enginetest.Pool(t)
	ctx := context.Background()
	sql := strings.NewReplacer("{owner}", owner, "{app}", app, "{db}", db, "{schema}", schema).Replace(leastPrivilegeGrants)
	_, err = pool.Exec(ctx, sql)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, q := range []string{"DROP SCHEMA IF EXISTS " + schema + " CASCADE",
			"DROP OWNED BY " + app, "DROP OWNED BY " + owner, "DROP ROLE " + app, "DROP ROLE " + owner} {
			if _, err := pool.Exec(context.Background(), q); err != nil {
				t.Logf("%s: %v", q, err)
			}
		}
	})
	as := func(role string) *cli {
		u := *direct
		u.User = url.User(role)
		return &cli{t: t, bin: cairnBinary(t), url: u.String(), schema: schema}
	}
	require.Contains(t, string(as(owner).run("migrate", "up")), "applied")
	_, err = pool.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s.tasks", schema))
	require.NoError(t, err)
	appCLI := as(app)
	// Both ways of sending the hot statements: prepared, and through the
	// hot functions (--pooler transaction, here without a pooler).
	for _, pooler := range []string{"none", "transaction"} {
		var summary struct{ Documents, Unfinished int }
		out := appCLI.run("demo", "run", "--documents", "20", "--latency", "2ms", "--pooler", pooler, "-o", "json")
		require.NoError(t, json.Unmarshal(out, &summary), "%s", out)
		require.Equal(t, 20, summary.Documents)
		require.Zero(t, summary.Unfinished, "--pooler %s", pooler)
	}
	require.Contains(t, string(appCLI.run("task", "list", "--limit", "5")), "document.process")

	// The application role cannot change the schema.
	appPool, err := pgstore.OpenPool(ctx, appCLI.url, pgstore.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer appPool.Close()
	_, err = appPool.Exec(ctx, "CREATE TABLE "+schema+".intruder (id int)")
	require.ErrorContains(t, err, "permission denied")

	// It summarizes the events' BRIN ranges, as the leader does, through
	// the function that runs as the index's owner.
	appStore, err := pgstore.New(pgstore.Config{Pool: appPool, Schema: schema})
	require.NoError(t, err)
	_, err = appStore.IndexSummarize(ctx)
	require.NoError(t, err)
}
