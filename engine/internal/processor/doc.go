// Package processor claims tasks under leases and runs their attempts
// through a [Handler] (the SDK's attempt executor): a claim loop woken by
// the notifier and by polling (claimloop.go), a goroutine per attempt with
// bounded concurrency (processor.go), lease renewal in one statement per
// tick (heartbeat.go), and the group-commit appender that writes what the
// attempts append, fenced by their lease epoch (appender.go). [Attempt]
// is what a handler holds (attempt.go), with the children of a running
// parent (children.go). Beside the claim loop, an [Inquirer] takes the
// inquiries about tasks of the worker's types (queries, updates'
// validators) and answers them through an [InquiryHandler]
// (inquirer.go), without a task slot or a lease.
//
// It imports engine/store, history, engine/internal/notifier,
// engine/internal/requests (a parent's close of its children) and
// engine/internal/service.
package processor
