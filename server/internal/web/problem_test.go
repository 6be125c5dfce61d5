package web

import (
	"net/http"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Store errors a request can meet map to their statuses and codes, not to
// a 500.
func TestProblemForStoreErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mark   error
		status int
		code   string
	}{
		{store.ErrDiagnosisTooSlow, http.StatusServiceUnavailable, CodeTooSlow},
		{store.ErrUnsupported, http.StatusNotImplemented, CodeUnsupported},
		{store.ErrConflict, http.StatusConflict, CodeConflict},
	} {
		p := ProblemFor(errors.Wrap(errmark.Mark(errors.New("cause"), c.mark), "context"))
		require.NotNil(t, p, "%v", c.mark)
		require.Equal(t, c.status, p.Status, "%v", c.mark)
		require.Equal(t, c.code, p.Code, "%v", c.mark)
	}
	require.Nil(t, ProblemFor(errors.New("anything else")), "other errors are 500s, decided by the caller")
}
