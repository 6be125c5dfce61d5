package workflow_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// intake is the example's document intake: extract, await an approval,
// store. patched is the code after the deploy, which adds "classify"
// behind a patch.
func intake(patched bool) *sdk.Workflow[struct{}, string] {
	return sdk.NewWorkflow("example.intake", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
		var steps []string
		step := func(name string) error {
			_, err := workflow.Step(ctx, name, func(context.Context) (string, error) { return name + " done", nil }, nil)
			steps = append(steps, name)
			return err
		}
		if err := step("extract"); err != nil {
			return "", err
		}
		if patched && workflow.Patched(ctx, "add-classify") {
			if err := step("classify"); err != nil {
				return "", err
			}
		}
		if _, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour); err != nil {
			return "", err
		}
		if err := step("store"); err != nil {
			return "", err
		}
		return strings.Join(steps, ", "), nil
	}, nil)
}

// Patched changes a deployed workflow while its tasks are in flight: a
// task that waited for its approval under the old code finishes on the
// old path after the deploy, and a task started after it takes the new
// one (its history records the patch).
func ExamplePatched() {
	// The store, with a worker of an unrelated type: the example runs
	// the intake's workers itself, one before the deploy, one after.
	env, stop := examplekit.Start(func(w *sdk.Worker) {
		sdk.Register(w, sdk.NewWorkflow("example.other", 1, func(workflow.Context, struct{}) (string, error) { return "", nil }, nil))
	})
	defer stop()
	ctx := context.Background()
	worker := func(wf *sdk.Workflow[struct{}, string]) *sdk.Worker {
		w, err := sdk.NewWorker(sdk.WorkerConfig{Store: env.Store, PollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			panic(err)
		}
		sdk.Register(w, wf)
		if err := w.Start(ctx); err != nil {
			panic(err)
		}
		return w
	}
	startAndWait := func() *sdk.Run[string] {
		r, err := sdk.Start(ctx, env.Client, intake(false), struct{}{}, nil)
		if err != nil {
			panic(err)
		}
		for { // until it waits for its approval
			if info, err := env.Client.Get(ctx, r.ID); err == nil && info.Status == history.StatusPending && info.Attempt > 0 {
				return r
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	v1 := worker(intake(false))
	before := startAndWait()
	if err := v1.Stop(ctx); err != nil {
		panic(err)
	}

	// The deploy: the new code adds "classify" behind a patch.
	v2 := worker(intake(true))
	defer func() { _ = v2.Stop(ctx) }()
	after := startAndWait()

	for _, r := range []*sdk.Run[string]{before, after} {
		if _, err := env.Client.Signal(ctx, r.ID, "approve", workflow.Decision{Approved: true}, nil); err != nil {
			panic(err)
		}
		fmt.Println(r.Result(ctx))
	}
	// Output:
	// extract, store <nil>
	// extract, classify, store <nil>
}
