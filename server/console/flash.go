package console

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"

	"github.com/google/uuid"
)

// flashes are the messages a console form's redirect shows on the page it
// lands on ("Cancel requested.", or what went wrong). They stay on the
// server; the redirect's URL carries only a random id (?flash=), so a
// link cannot put its own words in the console's system notice (probe
// finding: ?notice= and ?error= were shown as given). A flash is shown
// once, to whom the form was posted for, within flashTTL; with several
// servers behind a load balancer, without sticky sessions, it may be
// shown nowhere (the action happened all the same).
type flashes struct {
	mu    sync.Mutex
	byID  map[string]flash
	order []string // ids, oldest first, for the bound
}

type flash struct {
	who, notice, err string
	tasks            []uuid.UUID // the tasks the notice is about (a raise's woken), linked under it
	expires          time.Time
}

const (
	flashTTL   = 5 * time.Minute
	maxFlashes = 10_000
	// maxFlashTasks bounds the tasks a notice links: a raise may wake
	// many more, which its count says.
	maxFlashTasks = 100
)

func newFlashes() *flashes { return &flashes{byID: map[string]flash{}} }

// put keeps a flash for who and returns its id.
func (f *flashes) put(who, notice, errMsg string) string {
	return f.keep(flash{who: who, notice: notice, err: errMsg})
}

// putTasks keeps a notice for who with the tasks it is about (at most
// maxFlashTasks are linked) and returns its id.
func (f *flashes) putTasks(who, notice string, tasks []uuid.UUID) string {
	return f.keep(flash{who: who, notice: notice, tasks: tasks[:min(len(tasks), maxFlashTasks)]})
}

func (f *flashes) keep(fl flash) string {
	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	id := base64.RawURLEncoding.EncodeToString(raw)
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.order) >= maxFlashes {
		delete(f.byID, f.order[0])
		f.order = f.order[1:]
	}
	fl.expires = time.Now().Add(flashTTL)
	f.byID[id] = fl
	f.order = append(f.order, id)
	return id
}

// take returns and forgets the flash id of who; nothing for an unknown,
// expired or someone else's id.
func (f *flashes) take(id, who string) (notice, errMsg string, tasks []uuid.UUID) {
	if id == "" {
		return "", "", nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.byID[id]
	if !ok || fl.who != who || time.Now().After(fl.expires) {
		return "", "", nil
	}
	delete(f.byID, id) // its id stays in order until pushed out: harmless
	return fl.notice, fl.err, fl.tasks
}
