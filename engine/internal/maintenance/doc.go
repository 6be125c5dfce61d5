// Package maintenance keeps the tasks of a store moving when nobody else
// would: it rescues the tasks whose lease expired (rescue.go), in every
// process, and, in the one that holds the leader lease, ends the tasks not
// started by their start deadline, fires cron schedules, and removes
// finished tasks past their retention (retention.go) after writing their
// histories to their archive (archiver.go). [Rescuer] runs it all
// (rescuer.go).
//
// It imports engine/store, history, engine/internal/archive,
// engine/internal/plan, engine/internal/requests (a dead-lettered
// parent's children) and engine/internal/service.
package maintenance
