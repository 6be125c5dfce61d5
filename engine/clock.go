package engine

import (
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
)

// Now returns the wall clock at the precision the stores keep (UTC,
// microseconds), so a time read back equals the one written.
func Now() time.Time { return plan.Now(nil) }
