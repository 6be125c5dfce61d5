package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/cockroachdb/errors"
	"testing"
	"time"

	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// Note is what a reviewer adds to an expense: the text is required, the
// tags are not (omitempty).
type Note struct {
	Text string   `json:"text"`
	Tags []string `json:"tags,omitempty"`
}

// expense declares the two signals it receives: the approval, and notes.
var expense = sdk.NewWorkflow("example.expense", 1, func(ctx workflow.Context, amount int) (string, error) {
	d, _, err := workflow.AwaitApproval(ctx, "approval", 72*time.Hour)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d approved: %t", amount, d.Approved), nil
}, &sdk.WorkflowOpts{Signals: []sdk.SignalDecl{
	sdk.DeclareApproval("approval"), // {"approved": true|false, "comment": …}
	sdk.DeclareSignal[Note]("note"),
}})

// A workflow type that declares its signals has a signal of another name,
// or a payload that does not fit, refused when it is sent, with nothing
// written; the HTTP API answers those 404 signal_not_declared and 422
// invalid_signal_payload.
func ExampleDeclareSignal() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, expense) })
	defer stop()
	ctx := context.Background()
	run, err := sdk.Start(ctx, client, expense, 120, nil)
	if err != nil {
		panic(err)
	}

	_, err = client.Signal(ctx, run.ID, "aproval", workflow.Decision{Approved: true}, nil)
	var notDeclared *sdk.SignalNotDeclaredError
	fmt.Println(errors.As(err, &notDeclared), notDeclared.Declared)

	_, err = client.Signal(ctx, run.ID, "approval", json.RawMessage(`{"ok":"yes"}`), nil)
	var bad *sdk.SignalPayloadError
	fmt.Println(errors.As(err, &bad), bad.Problems[0])

	_, err = client.Signal(ctx, run.ID, "approval", workflow.Decision{Approved: true}, nil)
	fmt.Println(err)
	out, err := run.Result(ctx)
	fmt.Println(out, err)
	// Output:
	// true [approval note]
	// true /approved: missing
	// <nil>
	// 120 approved: true <nil>
}

// docs/signals.md shows lines of ExampleDeclareSignal, in order.
func TestSignalsPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/signals.md", ".."); err != nil {
		t.Fatal(err)
	}
}
