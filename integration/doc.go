// Package integration holds cairn's tests across processes against a real
// PostgreSQL: crash and resume (a worker's context killed, a worker process
// killed with SIGKILL), workers racing over the same tasks, and the CLI end
// to end. It has no non-test code and is imported by nothing.
package integration
