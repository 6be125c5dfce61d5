package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// These examples run on the embedded store (a fresh SQLite file each; see
// internal/examplekit), so "go test" runs them and checks their output.

// greet is the workflow most of these examples run: one step.
var greet = sdk.NewWorkflow("example.greet", 1, func(ctx workflow.Context, name string) (string, error) {
	return workflow.Step(ctx, "greet", func(ctx context.Context) (string, error) {
		return "hello, " + name, nil
	}, nil)
}, nil)

// Start a workflow with a typed input and wait for its typed output.
func ExampleStart() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, greet) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, greet, "ada", nil) // the input must be a string
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx) // waits; out is a string
	fmt.Println(out, err)
	// Output: hello, ada <nil>
}

// A start with an idempotency key already used in the namespace, for the
// same workflow and input, returns the task that used it.
func ExampleStartOpts() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, greet) })
	defer stop()
	ctx := context.Background()

	opts := &sdk.StartOpts{IdempotencyKey: "upload-123", Queue: "default", Priority: 5}
	first, err := sdk.Start(ctx, client, greet, "grace", opts)
	if err != nil {
		panic(err)
	}
	again, err := sdk.Start(ctx, client, greet, "grace", opts) // a client retrying
	if err != nil {
		panic(err)
	}
	fmt.Println(again.ID == first.ID, again.Existing)
	// Output: true true
}

// RunOf makes a handle on a task from its id alone: in another request,
// another process, after a restart.
func ExampleRunOf() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, greet) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, greet, "alan", nil)
	if err != nil {
		panic(err)
	}
	id := run.ID // stored, sent to a browser, ...

	out, err := sdk.RunOf(client, greet, id).Result(ctx)
	fmt.Println(out, err)
	// Output: hello, alan <nil>
}

// StartMany starts a batch in one transaction.
func ExampleClient_StartMany() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, greet) })
	defer stop()
	ctx := context.Background()

	names := []string{"ada", "grace", "alan"}
	starts := make([]sdk.StartParams, len(names))
	for i, name := range names {
		starts[i] = sdk.StartEntry(greet, name, nil)
	}
	results, err := client.StartMany(ctx, starts)
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		out, err := sdk.RunOf(client, greet, r.ID).Result(ctx)
		fmt.Println(out, err)
	}
	// Output:
	// hello, ada <nil>
	// hello, grace <nil>
	// hello, alan <nil>
}

// A task that did not complete ends its Run's Result with a *TaskError:
// its status and its last error's evidence. activities.Permanent says
// retrying cannot help, so the task is dead-lettered at once.
func ExampleTaskError() {
	parse := sdk.NewWorkflow("example.parse", 1, func(ctx workflow.Context, doc string) (int, error) {
		return workflow.Step(ctx, "parse", func(ctx context.Context) (int, error) {
			return 0, activities.Permanent(fmt.Errorf("document %q is not a PDF", doc))
		}, nil)
	}, nil)
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, parse) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, parse, "notes.txt", nil)
	if err != nil {
		panic(err)
	}
	_, err = run.Result(ctx)
	var failed *sdk.TaskError
	if errors.As(err, &failed) {
		fmt.Println(failed.Status, failed.Class, failed.Step)
		fmt.Println(failed.Message)
	}
	fmt.Println(errors.Is(err, sdk.ErrDeadLettered))
	// Output:
	// dead_lettered permanent parse
	// document "notes.txt" is not a PDF
	// true
}

// Signal a workflow that waits for it with workflow.Receive. A signal may
// arrive before the workflow waits: the receive takes it then.
func ExampleClient_Signal() {
	review := sdk.NewWorkflow("example.review", 1, func(ctx workflow.Context, doc string) (string, error) {
		verdict, ok, err := workflow.Receive[string](ctx, "verdict", time.Hour)
		if err != nil || !ok {
			return "no verdict", err
		}
		return doc + ": " + verdict, nil
	}, nil)
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, review) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, review, "contract.pdf", nil)
	if err != nil {
		panic(err)
	}
	// A DedupID makes a retried send write the signal once.
	opts := &sdk.SignalOpts{DedupID: "click-81", Sender: "alice"}
	for range 2 {
		if _, err := client.Signal(ctx, run.ID, "verdict", "approved", opts); err != nil {
			panic(err)
		}
	}
	fmt.Println(run.Result(ctx))
	// Output: contract.pdf: approved <nil>
}

// Cancel a running task: it stops at its next checkpoint (before its next
// step), and the completed steps with a compensator are undone in reverse
// order before it ends cancelled.
func ExampleClient_Cancel() {
	undone := make(chan string, 1)
	book := sdk.NewWorkflow("example.book", 1, func(ctx workflow.Context, trip string) (string, error) {
		seat, err := workflow.Step(ctx, "reserve_seat", func(ctx context.Context) (string, error) {
			return "seat 12A on " + trip, nil
		}, &workflow.StepOpts{Compensate: workflow.Compensate(func(ctx context.Context, seat string) error {
			undone <- "released " + seat
			return nil
		})})
		if err != nil {
			return "", err
		}
		// Wait for a payment that never comes: the cancel arrives first.
		_, _, err = workflow.Receive[string](ctx, "paid", time.Hour)
		return seat, err
	}, nil)
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, book) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, book, "LH 400", nil)
	if err != nil {
		panic(err)
	}
	for info, _ := run.Info(ctx); info.Waiting == nil; info, _ = run.Info(ctx) {
		time.Sleep(10 * time.Millisecond) // until it waits for the payment
	}
	if err := client.Cancel(ctx, run.ID, "customer left"); err != nil {
		panic(err)
	}
	_, err = run.Result(ctx)
	fmt.Println(errors.Is(err, sdk.ErrCancelled))
	fmt.Println(<-undone)
	// Output:
	// true
	// released seat 12A on LH 400
}

// Audit reads every event that matches a CEL filter over the event and its
// task, across tasks: here, each failed attempt and what classified it.
func ExampleClient_Audit() {
	flaky := sdk.NewWorkflow("example.flaky", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
		return workflow.Step(ctx, "call_llm", func(ctx context.Context) (string, error) {
			if info, _ := activities.GetInfo(ctx); info.Attempt < 3 {
				return "", activities.WithStatus(errors.New("rate limited"), 429)
			}
			return "ok", nil
		}, &workflow.StepOpts{Retry: &activities.RetryPolicy{InitialInterval: time.Millisecond}})
	}, nil)
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, flaky) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, flaky, struct{}{}, nil)
	if err != nil {
		panic(err)
	}
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}
	filter, err := sdk.CompileEventFilter(`event.type == "attempt_failed" && event.data.error.status == 429`)
	if err != nil {
		panic(err)
	}
	err = client.Audit(ctx, sdk.AuditParams{Filter: filter}, func(r sdk.AuditRecord) error {
		fmt.Println(r.Task.Type, r.Event.Type, "attempt", r.Event.Attempt, strings.Contains(string(r.Event.Data), "rate limited"))
		return nil
	})
	fmt.Println(err)
	// Output:
	// example.flaky attempt_failed attempt 1 true
	// example.flaky attempt_failed attempt 2 true
	// <nil>
}
