package workflow

import (
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// MaxPatchIDBytes bounds a patch id: 1..MaxPatchIDBytes bytes of
// printable UTF-8 (spaces allowed, no control characters).
const MaxPatchIDBytes = history.MaxPatchIDBytes

// Patched changes a deployed workflow without breaking the tasks already
// in flight: it reports whether this task takes the new branch of the
// patch patchID, and gives the same answer on every run of the task.
//
//	extract(...)
//	if workflow.Patched(ctx, "add-classify") {
//		classify(...) // the new code
//	}
//	awaitApproval(...)
//
// A task that reaches the call for the first time with nothing recorded
// past it (a new task, or one whose recorded history ends before this
// point) takes the new branch, and its history records the marker
// (patch_recorded) before anything after it runs; every later run of the
// task reads the marker and takes it again. A task whose history already
// holds progress past this point without the marker (a step or sleep
// recorded at or after it, a receive that waited, a child started) was run
// by the code without the patch: Patched returns false, records nothing,
// and the task goes on along the old branch. The marker takes no step
// position: the steps after it are numbered as the patched code calls
// them.
//
// Call it from the workflow body, each patch id at one place (asked again
// in a run, the answer is the first's). An id that is empty, over
// [MaxPatchIDBytes] or not printable fails the task permanently, as
// invalid step options do. Once no task that ran without the patch is left,
// replace the call with [DeprecatePatch] and drop the old branch; later,
// remove the call. docs/versioning.md walks through the three phases, and
// when to register a new version of the workflow type instead.
//
// A run that only collects the recorded steps (compensation) records no
// marker; at the frontier it answers true.
func Patched(ctx Context, patchID string) bool { return interpreter.Patched(ctx, patchID) }

// DeprecatePatch marks where the patch patchID was, once its old branch is
// gone: every task still running took the new one. It records the marker
// as [Patched] does for a task reaching it at the frontier, so every
// task's history shows the patch whichever code ran it, and on replay it
// accepts a history with or without the marker: unlike Patched it never
// chooses a branch. Keep it while tasks that started before it are in
// flight; then it can go too. Its id must be valid as Patched's.
//
// Removing the old branch while a task that ran without the patch is
// still in flight makes that task replay the new code over a history it
// did not write: the deploy check and the replayer catch that before the
// code ships.
func DeprecatePatch(ctx Context, patchID string) { interpreter.DeprecatePatch(ctx, patchID) }
