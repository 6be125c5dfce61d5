package celenv_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/internal/celenv"
)

// formatBomb is finding 1's filter at the given depth: F0 = "aaaaaaaaaa",
// Fn+1 = [Fn].map(x, "%s%s%s%s%s%s%s%s%s%s".format([x,x,x,x,x,x,x,x,x,x]))[0],
// then Fn.size() > 0. Each level makes its string ten times longer.
func formatBomb(levels int) string {
	f := `"aaaaaaaaaa"`
	for range levels {
		f = "[" + f + `].map(x, "%s%s%s%s%s%s%s%s%s%s".format([x,x,x,x,x,x,x,x,x,x]))[0]`
	}
	return f + ".size() > 0"
}

func compile(t *testing.T, expr string, costLimit uint64) (*cel.Env, *cel.Ast, cel.Program) {
	t.Helper()
	env, err := celenv.New(celenv.Strings())
	require.NoError(t, err)
	ast, iss := env.Compile(expr)
	require.NoError(t, iss.Err())
	prg, err := env.Program(ast, celenv.ProgramOptions(costLimit)...)
	require.NoError(t, err)
	return env, ast, prg
}

// TestFormatIsChargedByItsOutput: the 551-character bomb of eight levels
// (10^9 characters if it ran to the end) stops, marked as over the cost
// limit, after allocating a few megabytes, and its estimate says so
// before it runs. Its format of 10^7 characters is not made: it stops
// before that call (MaxStringBytes), having spent less than the limit.
func TestFormatIsChargedByItsOutput(t *testing.T) {
	expr := formatBomb(8)
	require.Len(t, expr, 551)
	env, ast, prg := compile(t, expr, 1_000_000)

	est, err := env.EstimateCost(ast, nil)
	require.NoError(t, err)
	require.Greater(t, est.Max, uint64(1_000_000_000), "the estimate counts format's output")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, spent, err := celenv.Eval(context.Background(), prg, map[string]any{})
	runtime.ReadMemStats(&after)
	require.True(t, errors.Is(err, celenv.ErrCostLimit), "not marked ErrCostLimit: %v", err)
	require.Positive(t, spent)
	// TotalAlloc only grows, so its growth bounds the heap's.
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %.1f MB", float64(allocated)/(1<<20))
	require.Less(t, allocated, uint64(50<<20))
}

func TestFormatStillFormats(t *testing.T) {
	_, _, prg := compile(t, `"%s-%d".format(["a", 7]) == "a-7"`, 1_000)
	out, spent, err := celenv.Eval(context.Background(), prg, map[string]any{})
	require.NoError(t, err)
	require.Equal(t, true, out.Value())
	require.Positive(t, spent)
}

// TestEvalStopsWhenItsContextIsDone: an evaluation of a billion
// iterations under a context already cancelled stops at its first
// interrupt check, having spent a sliver of its cost, with the cause.
func TestEvalStopsWhenItsContextIsDone(t *testing.T) {
	l := "[" + strings.TrimSuffix(strings.Repeat("0,", 1000), ",") + "]"
	expr := l + ".all(x, " + l + ".all(y, " + l + ".all(z, x + y + z >= 0)))"
	_, _, prg := compile(t, expr, 1<<62)
	gone := errors.New("the client went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(gone)
	_, spent, err := celenv.Eval(ctx, prg, map[string]any{})
	require.True(t, errors.Is(err, gone), "not the context's cause: %v", err)
	require.False(t, errors.Is(err, celenv.ErrCostLimit))
	require.Less(t, spent, uint64(100*celenv.InterruptCheckFrequency*10), "stopped at an early interrupt check")
}

// joinBomb is finding F7's shape: F0 = "aaaaaaaaaa", Fn+1 =
// [Fn].map(x, [x,x,x,x,x,x,x].join())[0] for five levels (168,070
// characters, within the cost limit), then one join of 400 references to
// it: a 67 MB string, and a few times that allocated, in one call.
func joinBomb() string {
	f := `"aaaaaaaaaa"`
	for range 5 {
		f = "[" + f + `].map(x, [x,x,x,x,x,x,x].join())[0]`
	}
	return "[" + f + `].map(x, [` + strings.TrimSuffix(strings.Repeat("x,", 400), ",") + `].join())[0].size() > 0`
}

// allocatedBy is what fn allocated (TotalAlloc only grows, so its growth
// bounds the heap's).
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestStringBuildersStopBeforeTheyBuild: join, replace and format work
// out their result's size before they make it, so a filter of a
// kilobyte cannot make one call build hundreds of megabytes and only
// then find the cost limit passed (it allocated 360 MB in 1.7 s before).
// Not parallel: the allocation count is the process's.
func TestStringBuildersStopBeforeTheyBuild(t *testing.T) {
	replaceBomb := `[` + strings.Repeat("a", 1000) + `].map(x, x.replace("a", "` + strings.Repeat("b", 2000) + `"))[0].size() > 0`
	replaceBomb = strings.Replace(replaceBomb, "[a", `["a`, 1)
	replaceBomb = strings.Replace(replaceBomb, "a]", `a"]`, 1)
	// 200,000 characters (a join of 200 of 1,000), printed eight times.
	big := `["` + strings.Repeat("c", 1000) + `"].map(x, [` + strings.TrimSuffix(strings.Repeat("x,", 200), ",") + `].join())[0]`
	formatBig := `[` + big + `].map(y, "%s%s%s%s%s%s%s%s".format([y,y,y,y,y,y,y,y]))[0].size() > 0`
	for name, expr := range map[string]string{"join": joinBomb(), "replace": replaceBomb, "format": formatBig} {
		_, _, prg := compile(t, expr, 1_000_000)
		var err error
		allocated := allocatedBy(func() { _, _, err = celenv.Eval(context.Background(), prg, map[string]any{}) })
		t.Logf("%s (%d characters): allocated %.1f MB: %v", name, len(expr), float64(allocated)/(1<<20), err)
		require.True(t, errors.Is(err, celenv.ErrCostLimit), "%s: not marked ErrCostLimit: %v", name, err)
		require.Less(t, allocated, uint64(20<<20), name)
	}
	for expr, want := range map[string]bool{
		`["ab", "c"].join("-") == "ab-c" && ["x", "y"].join() == "xy" && [].join(",") == ""`: true,
		`"a.b.c".replace(".", "/") == "a/b/c" && "aaa".replace("a", "b", 2) == "bba"`:        true,
		`"%s=%d %s".format(["k", 7, ["v"]]) == "k=7 [v]"`:                                    true,
	} {
		_, _, prg := compile(t, expr, 1_000_000)
		out, _, err := celenv.Eval(context.Background(), prg, map[string]any{})
		require.NoError(t, err, expr)
		require.Equal(t, want, out.Value(), expr)
	}
}
