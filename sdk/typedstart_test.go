package sdk_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTypedStartChecksTheInputWhenItCompiles builds two programs that
// start a Workflow[Document, Result]: welltyped, with Documents, must
// build; mistyped, the same with a string and an int, must not, and the
// compiler must name the mismatch of each (so that a failure for another
// reason does not pass for the type check).
func TestTypedStartChecksTheInputWhenItCompiles(t *testing.T) {
	t.Parallel()
	// go test puts the go tool of its own GOROOT first in PATH.
	goTool, err := exec.LookPath("go")
	require.NoError(t, err)
	// The two builds run one after the other: the first compiles
	// whatever the cache lacks, the second finds it there. With the test
	// binary's -race, that is nothing but the program itself.
	build := func(t *testing.T, pkg string) (string, error) {
		t.Helper()
		args := []string{"build", "-o", os.DevNull}
		if raceBuild {
			args = append(args, "-race")
		}
		cmd := exec.Command(goTool, append(args, "./testdata/typedstart/"+pkg)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Run("WellTyped", func(t *testing.T) {
		out, err := build(t, "welltyped")
		require.NoError(t, err, "a well-typed start must build:\n%s", out)
	})
	t.Run("Mistyped", func(t *testing.T) {
		out, err := build(t, "mistyped")
		require.Error(t, err, "a mistyped start built")
		for _, want := range []string{
			`cannot use "not a Document" (untyped string constant) as Document value in argument to sdk.Start`,
			`cannot use 42 (untyped int constant) as Document value in argument to sdk.StartEntry`,
		} {
			require.True(t, strings.Contains(out, want), "the compiler did not say %q:\n%s", want, out)
		}
	})
}
