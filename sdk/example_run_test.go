package sdk_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// examples are the functions of example_test.go that TestExamples runs.
var examples = map[string]func(){
	"Example":                         Example,
	"Example_permanentError":          Example_permanentError,
	"ExampleStartTx":                  ExampleStartTx,
	"ExampleStartOpts_idempotencyKey": ExampleStartOpts_idempotencyKey,
	"ExampleTypeRef":                  ExampleTypeRef,
}

// examplePrints returns, for each Example function of example_test.go, the
// lines of its closing "// Prints:" comment: what it must print.
func examplePrints(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", nil, parser.ParseComments)
	require.NoError(t, err)
	out := map[string]string{}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") {
			continue
		}
		var want *ast.CommentGroup
		for _, cg := range f.Comments {
			if cg.Pos() > fn.Body.Lbrace && cg.End() < fn.Body.Rbrace && strings.HasPrefix(cg.Text(), "Prints:") {
				want = cg
			}
		}
		require.NotNil(t, want, "%s has no closing // Prints: comment", fn.Name.Name)
		out[fn.Name.Name] = strings.TrimPrefix(want.Text(), "Prints:\n")
	}
	return out
}

// TestExamples runs the examples of example_test.go against the test
// database and checks what each prints against its "// Prints:" comment.
// The examples are compile-only for "go test" (they need a database), so
// this is what keeps them true.
//
// It is not parallel: it swaps os.Stdout while an example runs, and while a
// sequential top-level test runs no parallel test does.
func TestExamples(t *testing.T) {
	t.Setenv("CAIRN_TEST_DATABASE_URL", enginetest.DatabaseURL(t))
	prints := examplePrints(t)
	names := make([]string, 0, len(prints))
	for name := range prints {
		names = append(names, name)
	}
	require.ElementsMatch(t, names, keys(examples), "every example in example_test.go is run here")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			checked := false
			exampleBeforeDrop = func(pool *pgxpool.Pool, schema string) {
				store, err := pgstore.New(pgstore.Config{Pool: pool, Schema: schema})
				require.NoError(t, err)
				require.Positive(t, enginetest.RequireProjectionsMatch(t, store))
				checked = true
			}
			defer func() { exampleBeforeDrop = nil }()
			require.Equal(t, prints[name], captureStdout(t, examples[name]))
			require.True(t, checked, "the example's tasks were checked")
		})
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// captureStdout runs fn and returns what it wrote to os.Stdout.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer func() { _ = r.Close() }()
	read := make(chan string, 1) // the reader never blocks, even if fn panics
	go func() {
		var buf bytes.Buffer
		_, _ = io.Copy(&buf, r)
		read <- buf.String()
	}()
	orig := os.Stdout
	func() {
		os.Stdout = w
		defer func() {
			os.Stdout = orig
			_ = w.Close()
		}()
		fn()
	}()
	return <-read
}
