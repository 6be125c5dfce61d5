package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// These examples run on the embedded store (see internal/examplekit).

// run starts wf with in on a fresh embedded store and prints its result.
func run[In, Out any](wf *sdk.Workflow[In, Out], in In, more ...func(*sdk.Worker)) {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) {
		sdk.Register(w, wf)
		for _, m := range more {
			m(w)
		}
	})
	defer stop()
	ctx := context.Background()
	r, err := sdk.Start(ctx, client, wf, in, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Result(ctx))
}

// A step's output is recorded before the workflow goes on; a failed step
// is retried with backoff, and on every later attempt the steps on record
// return their outputs instead of running again.
func ExampleStep() {
	var calls atomic.Int32
	wf := sdk.NewWorkflow("example.extract", 1, func(ctx workflow.Context, doc string) (string, error) {
		text, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
			calls.Add(1)
			return strings.ToUpper(doc), nil
		}, nil)
		if err != nil {
			return "", err
		}
		return workflow.Step(ctx, "extract", func(ctx context.Context) (string, error) {
			if info, _ := activities.GetInfo(ctx); info.Attempt < 3 {
				return "", errors.New("LLM timed out") // transient: retried
			}
			return "total: " + strings.Fields(text)[1], nil
		}, &workflow.StepOpts{Retry: &activities.RetryPolicy{MaxAttempts: 5, InitialInterval: time.Millisecond}})
	}, nil)
	run(wf, "invoice 42EUR")
	fmt.Println("ocr ran", calls.Load(), "time")
	// Output:
	// total: 42EUR <nil>
	// ocr ran 1 time
}

// Map runs a step per item, at most Concurrency at once, and returns the
// outputs in item order. A retry runs only the items not on record.
func ExampleMap() {
	wf := sdk.NewWorkflow("example.pages", 1, func(ctx workflow.Context, pages []string) ([]int, error) {
		return workflow.Map(ctx, "count_words", pages, func(ctx context.Context, page string) (int, error) {
			return len(strings.Fields(page)), nil
		}, &workflow.MapOpts{Concurrency: 4})
	}, nil)
	run(wf, []string{"one", "two words", "and three words"})
	// Output: [1 2 3] <nil>
}

// Sleep is durable: the task holds no worker while it sleeps, and a
// restart does not start the sleep again.
func ExampleSleep() {
	wf := sdk.NewWorkflow("example.remind", 1, func(ctx workflow.Context, who string) (string, error) {
		if err := workflow.Sleep(ctx, 50*time.Millisecond); err != nil {
			return "", err
		}
		return workflow.Step(ctx, "remind", func(ctx context.Context) (string, error) {
			return "reminded " + who, nil
		}, nil)
	}, nil)
	run(wf, "ada")
	// Output: reminded ada <nil>
}

// AwaitApproval waits for a person's decision, up to a timeout: ok is false
// when none came. Here nobody answers, and the workflow decides.
func ExampleAwaitApproval() {
	wf := sdk.NewWorkflow("example.approve", 1, func(ctx workflow.Context, expense int) (string, error) {
		d, ok, err := workflow.AwaitApproval(ctx, "approval", 100*time.Millisecond)
		switch {
		case err != nil:
			return "", err
		case !ok:
			return "escalated: no decision", nil
		case !d.Approved:
			return "rejected by " + d.By, nil
		}
		return "approved", nil
	}, nil)
	run(wf, 1200)
	// Output: escalated: no decision <nil>
}

// MapChildren starts a child workflow per input, each a task of its own,
// and waits for all of them at once, holding no worker meanwhile.
func ExampleMapChildren() {
	page := sdk.NewWorkflow("example.page", 1, func(ctx workflow.Context, text string) (int, error) {
		return workflow.Step(ctx, "count", func(ctx context.Context) (int, error) {
			return len(strings.Fields(text)), nil
		}, nil)
	}, nil)
	doc := sdk.NewWorkflow("example.document", 1, func(ctx workflow.Context, pages []string) (int, error) {
		counts, err := workflow.MapChildren(ctx, page, pages, nil)
		total := 0
		for _, c := range counts {
			total += c
		}
		return total, err
	}, nil)
	run(doc, []string{"a b", "c d e", "f"}, func(w *sdk.Worker) { sdk.Register(w, page) })
	// Output: 6 <nil>
}

// StartChild starts one child and returns its handle at once; Result waits
// for the child's output.
func ExampleStartChild() {
	ocr := sdk.NewWorkflow("example.ocr", 1, func(ctx workflow.Context, scan string) (string, error) {
		return strings.ToUpper(scan), nil
	}, nil)
	parent := sdk.NewWorkflow("example.parent", 1, func(ctx workflow.Context, scan string) (string, error) {
		child := workflow.StartChild(ctx, ocr, scan, &workflow.ChildOpts{Queue: "default"})
		text, err := child.Result(ctx)
		return "read: " + text, err
	}, nil)
	run(parent, "hello", func(w *sdk.Worker) { sdk.Register(w, ocr) })
	// Output: read: HELLO <nil>
}
