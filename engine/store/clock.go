package store

import "time"

// Clock tells the time for event times, timers and the embedded store's
// leases. Drivers and the runtime read it through the clock they are
// configured with ([WallClock] by default); tests pass one they move by
// hand. PostgreSQL's leases and leadership use the database clock, which
// no Clock moves.
type Clock interface {
	Now() time.Time
}

// WallClock is the real clock.
var WallClock Clock = wallClock{}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
