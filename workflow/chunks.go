package workflow

import (
	"slices"

	"github.com/cockroachdb/errors"
)

// One parent's history holds about two events per child (child_started,
// child_finished), and a worker stops a task whose history reaches its
// MaxHistoryEvents (50,000 by default): a MapChildren of more than some
// 20,000 children cannot finish. A parent also replays its whole history
// each time it wakes to start more children, so the cost of a flat
// fan-out grows faster than its children. MapChunks is the fan-out for
// large batches: a tree of two levels, whose every history stays short.

// Chunk returns the body of a chunk workflow for [MapChunks]: a
// [MapChildren] of wf over the chunk's inputs. Register it as a workflow
// type of its own, whose MaxRunningChildren caps the running children of
// each chunk:
//
//	chunk := sdk.NewWorkflow("eval.chunk", 1, workflow.Chunk(evalItem, nil), nil)
//
// A chunk whose child did not complete fails with that child's
// [*ChildError] once its other children have finished. opts, the options
// of every child, nil takes every default; the body keeps a copy of
// *opts.
func Chunk[In, Out any](wf Definition[In, Out], opts *ChildOpts) func(Context, []In) ([]Out, error) {
	if opts != nil {
		o := *opts
		opts = &o
	}
	return func(ctx Context, inputs []In) ([]Out, error) {
		return MapChildren(ctx, wf, inputs, opts)
	}
}

// MapChunks is [MapChildren] for batches of any size: it splits inputs
// into chunks of size (the last may be shorter), starts chunk, a workflow
// whose body is [Chunk], as a child per chunk, and returns the outputs in
// input order. 100,000 inputs in chunks of 1,000 are 100 chunk children
// of the workflow, each the parent of 1,000 children: no history holds
// more than about 2,000 events, and the cost per child stays that of a
// fan-out of 1,000. opts (nil: every default) apply to the chunks; the
// chunk type's [Chunk] has its own for the children. At most the workflow type's
// MaxRunningChildren chunks run at once, each with at most the chunk
// type's MaxRunningChildren children.
//
// When a child did not complete, its chunk fails (see [Chunk]): the
// outputs of that chunk are zero values, and the first failed chunk's
// [*ChildError] (whose Info's message names the child's) is returned once
// every chunk has finished, with the outputs of the others. A size below
// 1 is refused.
func MapChunks[In, Out any](ctx Context, chunk Definition[[]In, []Out], inputs []In, size int, opts *ChildOpts) ([]Out, error) {
	outs := make([]Out, len(inputs))
	if size < 1 {
		return outs, errors.Newf("workflow.MapChunks %s: chunk size %d; use 1 or more", chunk.TypeName(), size)
	}
	chunks := slices.Collect(slices.Chunk(inputs, size))
	parts, err := MapChildren(ctx, chunk, chunks, opts)
	var ce *ChildError
	if err != nil && !errors.As(err, &ce) {
		return outs, err // the run must stop, or a start was refused
	}
	for i, part := range parts {
		copy(outs[i*size:min((i+1)*size, len(inputs))], part)
	}
	return outs, err
}
