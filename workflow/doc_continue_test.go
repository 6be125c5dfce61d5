package workflow_test

import (
	"testing"

	"github.com/cairnflow/cairn/internal/doccheck"
)

// TestContinueAsNewPageShowsThisCode holds docs/continue-as-new.md's
// example to ExampleContinueAsNew.
func TestContinueAsNewPageShowsThisCode(t *testing.T) {
	if err := doccheck.Check("../docs/continue-as-new.md", ".."); err != nil {
		t.Fatal(err)
	}
}
