// Package maintenance keeps the tasks of a store moving when nobody else
// would, with one service per job, as River's internal/maintenance has:
//
//   - the lease rescuer (rescuer.go, rescue.go), in every process: it
//     turns expired leases into lease_expired and a reschedule, timed to
//     each lease's expiry;
//   - and, in the one process that holds the leader lease, the
//     start-deadline expirer (deadlines.go), the cron firer (cron.go),
//     retention (retention.go), which removes finished tasks past their
//     retention (and inquiries answered or past their deadline an hour
//     ago), and the archiver (archiver.go), which does so where the
//     tasks go to an archive, writing their histories there first. Both
//     remove through [RemoveFinished] (remove.go): one transaction over
//     the seam's statements, written once for every driver.
//
// [Maintainer] (maintainer.go) runs them: an elector of
// engine/internal/leadership takes and renews the lease at every pass, and
// the leader's services start when this process becomes the leader and
// stop when it no longer is.
//
// It imports engine/store, history, engine/internal/archive,
// engine/internal/leadership, engine/internal/plan,
// engine/internal/requests (a dead-lettered parent's children) and
// engine/internal/service.
package maintenance
