package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"

	"github.com/cairnflow/cairn/server/internal/web"
)

// DefaultSessionTTL is how long a console sign-in lasts.
const DefaultSessionTTL = 12 * time.Hour

// maxSessionsPerToken bounds the console sessions a server keeps for one
// token: signing in with it beyond that ends its own session closest to
// its expiry, never another token's (probe finding: any token signed every
// console user out by 10,050 sign-ins in 1.7 s when the cap was global).
// The tokens are the configuration's, so the sessions are bounded by
// their number times this.
const maxSessionsPerToken = 100

// sessions are the console's sign-ins: the cookie holds a random id, the
// server the principal it stands for, so the browser never holds the API
// token, a stolen cookie stops working at sign-out or expiry, and the
// token is not sent with every page. They live in the process: a restart
// signs everyone out, and servers behind one load balancer need sticky
// sessions (docs/guarantees.md ("Security")).
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex                       // guards byID and byWho; held by every method
	byID  map[[32]byte]*session            // by the SHA-256 of the id, so a lookup's timing says nothing of the id
	byWho map[string]map[[32]byte]struct{} // the keys of byID, by token name
}

type session struct {
	who     *web.Principal
	expires time.Time
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, now: time.Now, byID: map[[32]byte]*session{}, byWho: map[string]map[[32]byte]struct{}{}}
}

// create starts a session for who and returns its id and expiry.
func (ss *sessions) create(who *web.Principal) (string, time.Time) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // crypto/rand.Read does not fail (it crashes the program instead)
	id := base64.RawURLEncoding.EncodeToString(raw)
	now := ss.now()
	expires := now.Add(ss.ttl)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	mine := ss.byWho[who.Name()]
	if len(mine) >= maxSessionsPerToken {
		var soonest [32]byte
		var at time.Time
		for k := range mine {
			s := ss.byID[k]
			if !s.expires.After(now) {
				ss.remove(k)
				continue
			}
			if at.IsZero() || s.expires.Before(at) {
				soonest, at = k, s.expires
			}
		}
		if len(ss.byWho[who.Name()]) >= maxSessionsPerToken {
			ss.remove(soonest)
		}
	}
	key := sha256.Sum256([]byte(id))
	ss.byID[key] = &session{who: who, expires: expires}
	if ss.byWho[who.Name()] == nil {
		ss.byWho[who.Name()] = map[[32]byte]struct{}{}
	}
	ss.byWho[who.Name()][key] = struct{}{}
	return id, expires
}

// lookup returns the principal of a session that has not expired, or nil.
func (ss *sessions) lookup(id string) *web.Principal {
	key := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.byID[key]
	if !ok {
		return nil
	}
	if !s.expires.After(ss.now()) {
		ss.remove(key)
		return nil
	}
	return s.who
}

// end removes a session; an unknown id is fine.
func (ss *sessions) end(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.remove(sha256.Sum256([]byte(id)))
}

// remove forgets the session under key; ss.mu is held.
func (ss *sessions) remove(key [32]byte) {
	s, ok := ss.byID[key]
	if !ok {
		return
	}
	delete(ss.byID, key)
	delete(ss.byWho[s.who.Name()], key)
	if len(ss.byWho[s.who.Name()]) == 0 {
		delete(ss.byWho, s.who.Name())
	}
}
