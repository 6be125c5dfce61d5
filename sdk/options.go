package sdk

import (
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
)

// Options structs (StartOpts, WorkflowOpts, ListOpts, DeadLetterOpts, and
// workflow.StepOpts) are passed by value as a trailing variadic argument:
// leaving them out takes every default, so a call carries no trailing nil.
// Go has no optional arguments; variadic is how one is left out, and the
// price is that two could be passed. Two is refused, never merged: which
// one would win is a guess the caller should not have to make.

// oneOpts returns the one options struct passed, the zero value (every
// default) when none was, or an [ErrInvalid] error naming what when more
// than one was.
func oneOpts[O any](what string, opts []O) (O, error) {
	var zero O
	switch len(opts) {
	case 0:
		return zero, nil
	case 1:
		return opts[0], nil
	}
	return zero, errmark.Mark(errors.Newf("%d %s given, at most one is allowed", len(opts), what), ErrInvalid)
}
