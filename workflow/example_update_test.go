package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// review awaits an approval from its approver; the update "reassign"
// changes who that is, while the task waits, and returns who it was.
var review = sdk.NewWorkflow("example.review", 1, func(ctx workflow.Context, doc string) (string, error) {
	approver := "alice"
	err := workflow.SetUpdate(ctx, "reassign", func(ctx workflow.Context, to string) (string, error) {
		prev := approver
		approver = to
		return prev, nil
	}, &workflow.UpdateOpts[string]{Validator: func(to string) error {
		if to == "" || to == approver {
			return errors.New("reassign to someone else")
		}
		return nil
	}})
	if err != nil {
		return "", err
	}
	if _, _, err := workflow.AwaitApproval(ctx, "approve", 24*time.Hour); err != nil {
		return "", err
	}
	return workflow.Step(ctx, "publish", func(context.Context) (string, error) {
		return doc + " approved by " + approver, nil
	}, nil)
}, nil)

// SetUpdate lets a caller change a running workflow's course and get an
// answer: here a review waiting for its approval is reassigned.
func ExampleSetUpdate() {
	env, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, review) })
	defer stop()
	ctx := context.Background()
	run, err := sdk.Start(ctx, env, review, "q3-report", nil)
	if err != nil {
		panic(err)
	}

	// Rejected by the validator: nothing is written.
	_, err = env.Update(ctx, run.ID, "reassign", "", nil)
	fmt.Println(errors.Is(err, sdk.ErrUpdateRejected))

	// Accepted: the handler's result comes back; retried with its id,
	// the update is applied once.
	res, err := env.Update(ctx, run.ID, "reassign", "bob", &sdk.UpdateOpts{UpdateID: "reassign-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(res.Output))

	if _, err := env.Signal(ctx, run.ID, "approve", workflow.Decision{Approved: true}, nil); err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))
	// Output:
	// true
	// "alice"
	// q3-report approved by bob <nil>
}
