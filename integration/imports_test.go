package integration_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// allowedImports is the package table of docs/architecture.md: which cairn
// packages each non-test package may import. A change that needs another
// arrow should move code instead.
var allowedImports = map[string][]string{
	"history":             {},
	"migrations":          {},
	"workflow":            {"history", "activities"},
	"activities":          {"history", "internal/celenv"},
	"engine":              {"history", "migrations"},
	"engine/enginetest":   {"engine", "history"},
	"engine/storetest":    {"engine", "history"},
	"engine/sqlitestore":  {"engine", "history", "migrations"},
	"history/historytest": {"history"},
	"sdk":                 {"history", "workflow", "activities", "engine", "internal/celenv"},
	"internal/celenv":     {},
	"server":              {"sdk", "engine", "history"},
	"cmd/cairn":           {"sdk", "engine", "engine/sqlitestore", "history", "activities", "workflow", "server"},
	"integration":         {},
}

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
			require.Contains(t, allowed, dep, "%s must not import %s (docs/architecture.md)", pkg, dep)
		}
	}
	require.Equal(t, len(allowedImports), seen, "every package in the table exists")
}
