package enginetest

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand (a store.Clock): it starts at the
// wall clock's now and moves only when Advance is called, so a test can
// pass a lease's expiry or a start deadline at once instead of sleeping.
// Only the embedded store keeps leases by the Go clock; PostgreSQL's are by
// the database clock, which no Clock moves.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at the wall clock's now.
func NewClock() *Clock { return &Clock{now: time.Now()} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
