// Package requests decides what others ask of a task: cancel and
// compensate (cancel.go), requeue from the dead letters (requeue.go), a
// signal (signal.go), and the cancel of a parent's unfinished children
// when it ends (children.go). Each reads the task's history, replays it
// (a signal reads only its row and two indexed facts of it), decides, and
// appends unfenced (a request is no attempt's), trying again when a
// worker appended first.
//
// It also writes a running parent's start of children (StartChildren, in
// children.go), once for every driver: the children's starts and the
// parent's fenced child_started, in one transaction of the seam.
//
// It imports engine/store, engine/internal/plan, history and
// internal/jsoncheck.
package requests
