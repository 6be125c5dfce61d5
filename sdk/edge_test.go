package sdk_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// payloadWrites are the methods of store.Store and store.Tx (pgstore's
// WithTx(tx) included, and the engine's SignalTask over a store) that write a payload: a
// start's input and its blobs, a signal's payload, a schedule's input, an
// append's outputs, a stream's chunks, an inquiry's arguments and answer. Children's inputs are starts' (TaskStartMany, in the
// engine's child start, which the SDK reaches through the edge's attempt
// only).
var payloadWrites = []string{"TaskStart", "TaskStartMany", "SignalTask",
	"EventAppend", "EventAppendMany", "BlobPut", "ScheduleCreate", "StreamAppend", "InquiryCreate", "InquiryAnswer"}

// Every payload the SDK writes passes through its payload stage by
// construction: the store's payload-writing methods are called by
// sdk/internal/edge only, whose writes take a payload.Encoded (only the
// stage makes one); the client reads the store through edge.Reads, which
// has none of them, and the executor holds the edge's attempt, whose
// appends take encoded events, never the engine's. This checks the two
// halves the compiler does not: edge.Reads grows none of those methods,
// and no other file of the SDK, its executor, the server, its console or
// the example calls one by name (on a store of their own, say).
func TestOnlyTheEdgeWritesPayloads(t *testing.T) {
	t.Parallel()
	reads := reflect.TypeOf((*edge.Reads)(nil)).Elem()
	for _, name := range payloadWrites {
		_, has := reads.MethodByName(name)
		require.False(t, has, "edge.Reads has %s, which writes a payload: write it through the edge's encoding methods", name)
	}
	for _, dir := range []string{".", "internal/executor", "../server", "../server/console", "../server/internal/web", "../examples/intake"} {
		sources, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, sources, dir)
		for _, path := range sources {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			require.NoError(t, err)
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					for _, name := range payloadWrites {
						require.NotEqual(t, name, sel.Sel.Name, "%s calls %s: payloads are written by sdk/internal/edge only", path, name)
					}
				}
				return true
			})
		}
	}
}
