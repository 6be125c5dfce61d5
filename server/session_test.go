package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A session expires after its TTL, ends when ended, and the store of them
// stays bounded.
func TestSessions(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ss := newSessions(time.Hour)
	ss.now = func() time.Time { return now }
	who := &principal{name: "ops"}
	id, expires := ss.create(who)
	require.Equal(t, now.Add(time.Hour), expires)
	require.Len(t, id, 43, "32 random bytes")
	require.Same(t, who, ss.lookup(id))
	require.Nil(t, ss.lookup(id+"x"))
	now = now.Add(59 * time.Minute)
	require.Same(t, who, ss.lookup(id))
	now = now.Add(time.Minute)
	require.Nil(t, ss.lookup(id), "expired")

	id, _ = ss.create(who)
	ss.end(id)
	require.Nil(t, ss.lookup(id), "ended")

	for range maxSessions + 10 {
		ss.create(who)
	}
	require.Len(t, ss.byID, maxSessions)
}
