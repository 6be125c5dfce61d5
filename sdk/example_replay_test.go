package sdk_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// review extracts a document, then waits for its approval; reviewV2 adds
// a step before the approval, without patching: tasks already waiting
// could not go on with it.
var (
	review = sdk.NewWorkflow("example.review", 1, func(ctx workflow.Context, doc string) (string, error) {
		if _, err := workflow.Step(ctx, "extract", func(context.Context) (string, error) { return "fields of " + doc, nil }, nil); err != nil {
			return "", err
		}
		d, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		return fmt.Sprint(d.Approved), err
	}, nil)
	reviewV2 = sdk.NewWorkflow("example.review", 1, func(ctx workflow.Context, doc string) (string, error) {
		if _, err := workflow.Step(ctx, "extract", func(context.Context) (string, error) { return "fields of " + doc, nil }, nil); err != nil {
			return "", err
		}
		if _, err := workflow.Step(ctx, "classify", func(context.Context) (string, error) { return "invoice", nil }, nil); err != nil {
			return "", err
		}
		d, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		return fmt.Sprint(d.Approved), err
	}, nil)
)

// Export a waiting task's history as `cairn task history ID -o json`
// does, then replay the folder against the changed definition, as a CI
// job would before the deploy.
func ExampleReplayer_ReplayDir() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, review) })
	defer stop()
	ctx := context.Background()
	run, err := sdk.Start(ctx, client, review, "invoice.pdf", nil)
	if err != nil {
		panic(err)
	}
	for waiting := false; !waiting; time.Sleep(10 * time.Millisecond) { // until it waits for its approval
		events, err := client.History(ctx, run.ID)
		if err != nil {
			panic(err)
		}
		for _, e := range events {
			waiting = waiting || e.Type() == history.WaitStarted
		}
	}
	dir, err := os.MkdirTemp("", "histories")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	var exported bytes.Buffer
	if err := client.ExportHistory(ctx, run.ID, &exported); err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(dir, run.ID.String()+".json"), exported.Bytes(), 0o600); err != nil {
		panic(err)
	}

	for _, wf := range []*sdk.Workflow[string, string]{review, reviewV2} {
		r := sdk.NewReplayer()
		if err := sdk.RegisterReplay(r, wf); err != nil {
			panic(err)
		}
		res, err := r.ReplayDir(ctx, dir)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Replayed, "replayed, ok:", res.OK())
		for _, d := range res.Divergences {
			fmt.Printf("%s %d: recorded %s, called %s\n", d.Kind, d.Position, d.Recorded, d.Called)
		}
	}
	// Output:
	// 1 replayed, ok: true
	// 1 replayed, ok: false
	// receive 0: recorded approve, called (step 1 "classify")
}
