package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// DefaultSessionTTL is how long a console sign-in lasts.
const DefaultSessionTTL = 12 * time.Hour

// maxSessions bounds the console sessions a server keeps; signing in
// beyond it ends the session closest to its expiry.
const maxSessions = 10_000

// sessions are the console's sign-ins: the cookie holds a random id, the
// server the principal it stands for, so the browser never holds the API
// token, a stolen cookie stops working at sign-out or expiry, and the
// token is not sent with every page. They live in the process: a restart
// signs everyone out, and servers behind one load balancer need sticky
// sessions (docs/guarantees.md ("Security")).
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex            // guards byID; held by every method
	byID map[[32]byte]*session // by the SHA-256 of the id, so a lookup's timing says nothing of the id
}

type session struct {
	who     *principal
	expires time.Time
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, now: time.Now, byID: map[[32]byte]*session{}}
}

// create starts a session for who and returns its id and expiry.
func (ss *sessions) create(who *principal) (string, time.Time) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // crypto/rand.Read does not fail (it crashes the program instead)
	id := base64.RawURLEncoding.EncodeToString(raw)
	now := ss.now()
	expires := now.Add(ss.ttl)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.byID) >= maxSessions {
		var soonest [32]byte
		var at time.Time
		for k, s := range ss.byID {
			if !s.expires.After(now) {
				delete(ss.byID, k)
				continue
			}
			if at.IsZero() || s.expires.Before(at) {
				soonest, at = k, s.expires
			}
		}
		if len(ss.byID) >= maxSessions {
			delete(ss.byID, soonest)
		}
	}
	ss.byID[sha256.Sum256([]byte(id))] = &session{who: who, expires: expires}
	return id, expires
}

// lookup returns the principal of a session that has not expired, or nil.
func (ss *sessions) lookup(id string) *principal {
	key := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.byID[key]
	if !ok {
		return nil
	}
	if !s.expires.After(ss.now()) {
		delete(ss.byID, key)
		return nil
	}
	return s.who
}

// end removes a session; an unknown id is fine.
func (ss *sessions) end(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byID, sha256.Sum256([]byte(id)))
}
