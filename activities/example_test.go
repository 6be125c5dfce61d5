package activities_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// A policy classifies the errors no mark in Go code classified: here, an
// LLM API's rate limits and server errors are worth retrying, its 400s
// are not. It is compiled, and its cost bounded, when it is made.
func ExampleNewPolicy() {
	llm, err := activities.NewPolicy("llm", `error.status == 429 || error.status >= 500`)
	if err != nil {
		panic(err) // a syntax or type error names the policy and the line:column
	}
	for _, status := range []int{429, 503, 400} {
		class, err := llm.Classify(activities.PolicyInput{Error: activities.PolicyError{Status: status}})
		fmt.Println(status, class, err)
	}
	_, err = activities.NewPolicy("typo", `error.stauts == 429`)
	fmt.Println(err != nil)
	// Output:
	// 429 transient <nil>
	// 503 transient <nil>
	// 400 permanent <nil>
	// true
}

// The backoff's ceilings grow by Multiplier from InitialInterval up to
// MaxInterval; each delay is drawn below its ceiling (full jitter).
func ExampleRetryPolicy_Ceiling() {
	p := activities.RetryPolicy{MaxAttempts: 6, InitialInterval: time.Second, Multiplier: 2, MaxInterval: 10 * time.Second}
	for attempt := 1; attempt < p.MaxAttempts; attempt++ {
		fmt.Print(p.Ceiling(attempt), " ")
	}
	fmt.Println()
	// Output: 1s 2s 4s 8s 10s
}

// Decide is what follows a failed attempt: a permanent error is never
// retried, a retry-after hint replaces the backoff, and no attempt is
// scheduled past the budget.
func ExampleRetryPolicy_Decide() {
	p := activities.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second}.WithDefaults() // the zero fields take DefaultRetryPolicy's
	half := func() float64 { return 0.5 }
	fmt.Println(p.Decide(history.ErrorInfo{Class: history.Transient}, 1, 0, half))
	fmt.Println(p.Decide(history.ErrorInfo{Class: history.Transient, RetryAfterMillis: 30_000}, 1, 0, half))
	fmt.Println(p.Decide(history.ErrorInfo{Class: history.Permanent}, 1, 0, half).Retry)
	fmt.Println(p.Decide(history.ErrorInfo{Class: history.Transient}, 3, 0, half).Retry)
	// Output:
	// {true 500ms }
	// {true 30s }
	// false
	// false
}

// A step reports what it spent on AI models; the history records it with
// the step, and the worker's metrics count it.
func ExampleRecordUsage() {
	summarize := sdk.NewWorkflow("example.summarize", 1, func(ctx workflow.Context, doc string) (string, error) {
		return workflow.Step(ctx, "summarize", func(ctx context.Context) (string, error) {
			// ... call the model, then report what it said it used:
			activities.RecordUsage(ctx, activities.Usage{Model: "gpt-5-mini", InputTokens: 1200, OutputTokens: 80, CostUSD: 0.0004})
			return "a short summary of " + doc, nil
		}, nil)
	}, nil)
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, summarize) })
	defer stop()
	ctx := context.Background()
	run, err := sdk.Start(ctx, client, summarize, "report.pdf", nil)
	if err != nil {
		panic(err)
	}
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}
	events, err := client.History(ctx, run.ID)
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		if step, ok := e.Data.(history.StepCompletedData); ok {
			fmt.Printf("%s: %+v\n", step.Name, step.Usage)
		}
	}
	// Output: summarize: [{Model:gpt-5-mini InputTokens:1200 OutputTokens:80 CostUSD:0.0004}]
}

// GetInfo tells a step where it runs: its task, attempt, position, and the
// idempotency key to hand to external APIs, the same on every attempt.
func ExampleGetInfo() {
	wf := sdk.NewWorkflow("example.charge", 1, func(ctx workflow.Context, amount int) (string, error) {
		return workflow.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			info, _ := activities.GetInfo(ctx)
			// payments.Charge(ctx, amount, info.IdempotencyKey)
			return fmt.Sprintf("%s at position %d, attempt %d, key ends %q",
				info.Step, info.Position, info.Attempt, info.IdempotencyKey[len(info.IdempotencyKey)-9:]), nil
		}, nil)
	}, nil)
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, wf) })
	defer stop()
	ctx := context.Background()
	run, err := sdk.Start(ctx, client, wf, 1200, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))
	// Output: charge at position 0, attempt 1, key ends "/0/charge" <nil>
}
