package engine

import (
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// Clock tells the time: the stores read it for the events they write (see
// their Config.Clock), and tests pass one they move by hand. The default
// is [store.WallClock].
type Clock = store.Clock

// Now returns the wall clock at the precision the stores keep (UTC,
// microseconds), so a time read back equals the one written.
func Now() time.Time { return plan.Now(nil) }
