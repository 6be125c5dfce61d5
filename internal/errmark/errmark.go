// Package errmark marks an error as an instance of a sentinel in a way both
// the standard library's errors.Is and cockroachdb/errors.Is recognise.
//
// cockroachdb/errors.Mark records the mark where only its own Is looks, so a
// caller writing errors.Is(err, sdk.ErrNotFound) with package errors got
// false. A marked error here answers Is(sentinel) itself, which both
// libraries ask, and unwraps to the original error, so errors.As and the
// message are unchanged.
package errmark

import "fmt"

// Mark returns err marked as sentinel: errors.Is(Mark(err, s), s) holds with
// the standard library and with cockroachdb/errors, as does errors.Is for
// anything err already was. Mark(nil, s) is nil.
func Mark(err, sentinel error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, sentinel: sentinel}
}

type marked struct {
	err      error
	sentinel error
}

func (m *marked) Error() string { return m.err.Error() }

// Unwrap keeps the original error (and its own chain) reachable.
func (m *marked) Unwrap() error { return m.err }

// Is reports the mark; the chain below is searched by the caller's errors.Is.
func (m *marked) Is(target error) bool { return target == m.sentinel }

// Format prints the original error, with its details under %+v.
func (m *marked) Format(s fmt.State, verb rune) {
	if verb == 'v' && s.Flag('+') {
		fmt.Fprintf(s, "%+v", m.err)
		return
	}
	fmt.Fprint(s, m.err.Error())
}
