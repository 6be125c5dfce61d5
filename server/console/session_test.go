package console

import (
	"testing"
	"time"

	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/stretchr/testify/require"
)

// A session expires after its TTL, ends when ended, and the store of them
// stays bounded.
func TestSessions(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ss := newSessions(time.Hour)
	ss.now = func() time.Time { return now }
	who := web.NewPrincipal(web.Token{Name: "ops"})
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

	for range maxSessionsPerToken + 10 {
		ss.create(who)
	}
	require.Len(t, ss.byID, maxSessionsPerToken)
}

// Probe finding: with a global cap, any token signed every console user
// out by signing in 10,050 times (1.7 s). The cap is per token now: one
// token's sign-ins end only its own oldest sessions.
func TestSignInsOfOneTokenEndNoOtherTokensSession(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ss := newSessions(time.Hour)
	ss.now = func() time.Time { return now }
	ops, reader := web.NewPrincipal(web.Token{Name: "ops"}), web.NewPrincipal(web.Token{Name: "reader"})
	opsID, _ := ss.create(ops)
	first, _ := ss.create(reader)
	for range 10_050 {
		now = now.Add(time.Millisecond) // each later sign-in expires later
		ss.create(reader)
	}
	require.Same(t, ops, ss.lookup(opsID), "another token's session is kept")
	require.Nil(t, ss.lookup(first), "the token's own oldest session ended")
	require.Len(t, ss.byWho["reader"], maxSessionsPerToken)
	require.Len(t, ss.byID, maxSessionsPerToken+1)
}
