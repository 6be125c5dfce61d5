package plan

import (
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// AfterCommit holds what a driver does once a transaction's writes have
// committed: its [store.Observer]'s counts, its caches, SQLite's in-process
// announcements. A statement run on the store does these when it returns;
// one run in a [store.Tx] queues them here, and the Tx runs them after its
// commit ([AfterCommit.Run]), hands them to the outer transaction when it
// is nested ([AfterCommit.MoveTo]), or drops them on rollback
// ([AfterCommit.Discard]).
//
// A Tx is used by one goroutine at a time, and so is its AfterCommit: it
// has no lock.
type AfterCommit struct {
	fns []func()
}

// Do queues fn.
func (a *AfterCommit) Do(fn func()) { a.fns = append(a.fns, fn) }

// Run runs what is queued, in order, and empties the queue.
func (a *AfterCommit) Run() {
	fns := a.fns
	a.fns = nil
	for _, fn := range fns {
		fn()
	}
}

// MoveTo queues what is queued in outer, after what outer holds: a nested
// transaction's commit makes its effects the outer transaction's.
func (a *AfterCommit) MoveTo(outer *AfterCommit) {
	outer.fns = append(outer.fns, a.fns...)
	a.fns = nil
}

// Discard drops what is queued: the writes were rolled back.
func (a *AfterCommit) Discard() { a.fns = nil }

// Observer returns an observer that queues each of obs's calls in a, or
// nil when obs is nil (a store without an observer checks for nil).
func (a *AfterCommit) Observer(obs store.Observer) store.Observer {
	if obs == nil {
		return nil
	}
	return deferredObserver{obs: obs, a: a}
}

// deferredObserver is an [store.Observer] whose calls wait for a commit.
type deferredObserver struct {
	obs store.Observer
	a   *AfterCommit
}

func (d deferredObserver) ObserveAppended(p *store.EventAppendParams, next history.State) {
	d.a.Do(func() { d.obs.ObserveAppended(p, next) })
}

func (d deferredObserver) ObserveClaimed(claimed []*store.ClaimedTask) {
	d.a.Do(func() { d.obs.ObserveClaimed(claimed) })
}

func (d deferredObserver) ObserveScheduleSkipped(f store.ScheduleFiring) {
	d.a.Do(func() { d.obs.ObserveScheduleSkipped(f) })
}

func (d deferredObserver) ObserveRemoved(namespace string, res store.RemoveResult) {
	d.a.Do(func() { d.obs.ObserveRemoved(namespace, res) })
}
