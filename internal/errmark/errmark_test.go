package errmark_test

import (
	stderrors "errors"
	"fmt"
	"io"
	"os"
	"testing"

	crdb "github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
)

var errSentinel = stderrors.New("sentinel")

func TestMarkIsSeenByBothLibraries(t *testing.T) {
	t.Parallel()
	base := &os.PathError{Op: "open", Path: "x", Err: io.EOF}
	marked := errmark.Mark(base, errSentinel)
	wrapped := crdb.Wrap(fmt.Errorf("outer: %w", marked), "more")
	for name, err := range map[string]error{"marked": marked, "wrapped": wrapped} {
		if !stderrors.Is(err, errSentinel) {
			t.Errorf("%s: the standard errors.Is does not see the mark", name)
		}
		if !crdb.Is(err, errSentinel) {
			t.Errorf("%s: cockroachdb errors.Is does not see the mark", name)
		}
		if !stderrors.Is(err, io.EOF) {
			t.Errorf("%s: the original chain is lost", name)
		}
		var pe *os.PathError
		if !stderrors.As(err, &pe) {
			t.Errorf("%s: errors.As does not reach the original error", name)
		}
	}
	if marked.Error() != base.Error() {
		t.Errorf("message changed: %q", marked.Error())
	}
	if stderrors.Is(marked, io.ErrUnexpectedEOF) {
		t.Error("a mark matches an unrelated sentinel")
	}
	if errmark.Mark(nil, errSentinel) != nil {
		t.Error("Mark(nil) is not nil")
	}
}
