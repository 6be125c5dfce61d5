package workflow_test

import (
	"testing"

	"github.com/cairnflow/cairn/internal/doccheck"
)

// TestSelectPageShowsTheExample holds docs/select.md to the code of
// ExampleSelect.
func TestSelectPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/select.md", ".."); err != nil {
		t.Fatal(err)
	}
}
