package workflow_test

import (
	"testing"

	"github.com/cairnflow/cairn/internal/doccheck"
)

// TestVersioningPageShowsTheExample holds docs/versioning.md to the code
// of ExamplePatched.
func TestVersioningPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/versioning.md", ".."); err != nil {
		t.Fatal(err)
	}
}

// TestUpdatesPageShowsTheExample holds docs/updates.md to the code of
// ExampleSetUpdate.
func TestUpdatesPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/updates.md", ".."); err != nil {
		t.Fatal(err)
	}
}
