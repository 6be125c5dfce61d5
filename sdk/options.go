package sdk

// Options structs ([StartOpts], [WorkflowOpts], [ListOpts],
// [DeadLetterOpts], [SignalOpts], and workflow's StepOpts, MapOpts and
// ChildOpts) are a function's last parameter, as a pointer: nil takes every
// default, as River's InsertOpts does. A call says which options it has, or
// that it has none, and two cannot be passed: that is for the compiler to
// refuse, not a check at run time. The callee reads a copy ([orZero]) and
// never writes through the pointer, so one options value may serve many
// calls.

// orZero returns a copy of *opts, or the zero value (every default) when
// opts is nil.
func orZero[O any](opts *O) O {
	if opts == nil {
		var zero O
		return zero
	}
	return *opts
}
