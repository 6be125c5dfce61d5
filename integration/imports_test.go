package integration_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// allowedImports is the package table of docs/architecture.md: which cairn
// packages each non-test package may import. A change that needs another
// arrow should move code instead.
var allowedImports = map[string][]string{
	"history":              {},
	"migrations":           {},
	"workflow":             {"history", "activities", "internal/interpreter"},
	"activities":           {"history", "internal/celenv", "internal/activity"},
	"internal/activity":    {"history"},
	"cairntype":            {"history"},
	"engine/store":         {"history", "cairntype"},
	"engine/internal/plan": {"engine/store", "history", "internal/jsoncheck", "internal/inputid"},
	"engine/pgstore":       {"engine/store", "engine/internal/plan", "internal/namedsql", "internal/jsoncheck", "history", "migrations"},
	"engine/sqlitestore":   {"engine/store", "engine/internal/plan", "internal/namedsql", "history", "migrations"},
	"engine": {"engine/store", "engine/internal/plan", "engine/internal/archive", "engine/internal/processor", "engine/internal/notifier",
		"engine/internal/maintenance", "engine/internal/requests", "engine/internal/diagnosis", "engine/internal/metrics", "engine/internal/modellimit", "internal/bucket", "history"},
	"engine/internal/service":     {"engine/store"},
	"engine/internal/processor":   {"engine/store", "engine/internal/notifier", "engine/internal/requests", "engine/internal/service", "history"},
	"engine/internal/notifier":    {"engine/store", "engine/internal/metrics", "engine/internal/service"},
	"engine/internal/modellimit":  {"engine/store", "engine/internal/metrics", "engine/internal/notifier"},
	"engine/internal/maintenance": {"engine/store", "engine/internal/archive", "engine/internal/leadership", "engine/internal/plan", "engine/internal/requests", "engine/internal/service", "internal/bucket", "history"},
	"engine/internal/leadership":  {"engine/store", "engine/internal/service"},
	"engine/internal/requests":    {"engine/store", "engine/internal/plan", "history", "internal/jsoncheck"},
	"engine/internal/diagnosis":   {"engine/store"},
	"engine/internal/metrics":     {"engine/store", "history"},
	"engine/internal/archive":     {"history", "internal/bucket"},
	"internal/bucket":             {},
	"internal/s3test":             {},
	"engine/enginetest":           {"engine/store", "engine/pgstore", "engine/sqlitestore", "engine/internal/maintenance", "engine/internal/plan", "engine/internal/requests", "history"},
	"engine/storetest": {"engine/store", "cairntype", "engine/enginetest", "engine/internal/processor", "engine/internal/notifier", "engine/internal/maintenance",
		"engine/internal/requests", "engine/internal/diagnosis", "engine/internal/plan", "history", "payload", "payload/seal", "payload/offload"},
	"history/historytest":            {"history"},
	"payload":                        {"history"},
	"payload/seal":                   {"history", "payload", "internal/inputid"},
	"payload/offload":                {"history", "payload", "internal/bucket", "internal/jsoncheck"},
	"sdk":                            {"history", "cairntype", "workflow", "activities", "engine", "engine/store", "engine/pgstore", "internal/celenv", "internal/interpreter", "internal/jsoncheck", "payload", "payload/seal", "sdk/internal/edge", "sdk/internal/executor"},
	"sdk/replaytest":                 {"sdk"},
	"sdk/internal/edge":              {"engine", "engine/store", "engine/pgstore", "history", "payload", "payload/seal", "payload/offload"},
	"sdk/internal/executor":          {"engine", "engine/store", "history", "activities", "internal/activity", "internal/interpreter", "internal/jsoncheck", "payload", "sdk/internal/edge"},
	"internal/celenv":                {},
	"internal/namedsql":              {},
	"internal/jsoncheck":             {},
	"internal/inputid":               {"history", "internal/jsoncheck"},
	"internal/errmark":               {},
	"internal/interpreter":           {"history", "activities", "internal/activity"},
	"cmd/cairn":                      {"sdk", "cairntype", "engine/store", "engine/pgstore", "engine/sqlitestore", "history", "server", "server/console", "cmd/cairn/internal/bench", "examples/intake", "payload/seal"},
	"server":                         {"sdk", "cairntype", "engine/store", "history", "internal/jsoncheck", "server/console", "server/internal/web", "payload/seal"},
	"server/console":                 {"sdk", "cairntype", "history", "server/internal/web"},
	"server/internal/web":            {"sdk", "cairntype", "payload"},
	"cmd/cairn/internal/bench":       {"internal/namedsql", "sdk", "engine/store", "engine/pgstore", "engine/sqlitestore", "history", "activities", "workflow", "payload/seal"},
	"examples/intake":                {"sdk", "workflow", "activities", "history"},
	"examples/readme":                {"sdk", "workflow", "engine/sqlitestore"},
	"examples/invoices":              {"sdk", "workflow", "activities"},
	"examples/invoices/cmd/invoices": {"sdk", "engine/pgstore", "engine/sqlitestore", "examples/invoices"},
	"internal/doccheck":              {},
	"internal/examplekit":            {"sdk", "engine/sqlitestore"},
	"integration":                    {},
	"server/internal/servertest": {"engine/enginetest", "engine/sqlitestore", "engine/store", "history",
		"server/internal/web"},
}

// everywhere are leaf packages any package may import, but history, which
// imports nothing (DESIGN.md): they import no cairn package themselves.
var everywhere = []string{"internal/errmark"}

// testOnly are the packages of test helpers: imported from _test.go files
// only, never by code that ships (but by each other, as the table allows).
var testOnly = []string{"engine/storetest", "engine/enginetest", "history/historytest", "internal/s3test", "server/internal/servertest", "internal/doccheck", "internal/examplekit", "sdk/replaytest"}

func TestPackageImportsFollowTheArchitecture(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	const module = "github.com/cairnflow/cairn/"
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		allowed, ok := allowedImports[pkg]
		require.True(t, ok, "package %s is not in the architecture table; add it to docs/architecture.md and here", pkg)
		seen++
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if !slices.Contains(testOnly, pkg) { // the test helpers may build on each other, as the table says
				require.NotContains(t, testOnly, dep, "%s must not import the test helpers of %s outside its _test.go files", pkg, dep)
			}
			if slices.Contains(everywhere, dep) && pkg != "history" {
				continue
			}
			require.Contains(t, allowed, dep, "%s must not import %s (docs/architecture.md)", pkg, dep)
		}
	}
	require.Equal(t, len(allowedImports), seen, "every package in the table exists")
}
