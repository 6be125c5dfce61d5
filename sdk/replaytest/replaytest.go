// Package replaytest checks, in a user's go test, that workflow
// definitions still replay recorded histories: Temporal's
// worker.WorkflowReplayer as a test helper. Keep a folder of histories
// exported from production (`cairn task history ID -o json > ID.json`)
// beside the workflow's code and replay them in a test:
//
//	func TestInvoiceReplays(t *testing.T) {
//		r := sdk.NewReplayer()
//		require.NoError(t, sdk.RegisterReplay(r, billing.InvoiceWorkflow))
//		replaytest.Dir(t, r, "testdata/histories")
//	}
//
// A change to a workflow that would strand its tasks in flight (a step
// renamed, added or removed before where they are) fails the test, naming
// each history, where it parts from the code and what each has there.
package replaytest

import (
	"context"
	"testing"

	"github.com/cairnflow/cairn/sdk"
)

// Dir replays every history file in dir ([sdk.Replayer.ReplayDir]) and
// fails t, listing them, if any would not replay, or if dir holds none
// (a test that checks nothing would pass forever).
func Dir(t testing.TB, r *sdk.Replayer, dir string) {
	t.Helper()
	res, err := r.ReplayDir(context.Background(), dir)
	Require(t, res, err)
	if res.Replayed == 0 {
		t.Fatalf("replaytest: no history (*.json) in %s", dir)
	}
}

// Tasks replays tasks read through c ([sdk.Replayer.ReplayTasks]) and
// fails t if any would not replay.
func Tasks(t testing.TB, r *sdk.Replayer, c *sdk.Client, opts *sdk.ReplayTasksOpts) {
	t.Helper()
	res, err := r.ReplayTasks(context.Background(), c, opts)
	Require(t, res, err)
}

// Require fails t if err is set or res has divergences, listing them.
func Require(t testing.TB, res sdk.ReplayResult, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("replaytest: %v", err)
	}
	if !res.OK() {
		t.Fatalf("replaytest: %v", res.Err())
	}
}
