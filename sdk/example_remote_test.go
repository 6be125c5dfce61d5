package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// readPages hands each page to the remote workers of the queue "ocr", in
// whatever language they are written, and joins what they read.
var readPages = sdk.NewWorkflow("example.read_pages", 1, func(ctx workflow.Context, pages []string) (string, error) {
	texts, err := workflow.MapRemote[string, string](ctx, "ocr.page", pages, &workflow.RemoteOpts{Queue: "ocr"})
	if err != nil {
		return "", err
	}
	return strings.Join(texts, " "), nil
}, nil)

// A remote step is claimed and answered over the remote step protocol;
// here a Go loop plays the worker (the HTTP API serves the same calls to
// the Python and TypeScript workers).
func ExampleClient_ClaimRemote() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, readPages) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, readPages, []string{"scan-1.png", "scan-2.png"}, nil)
	if err != nil {
		panic(err)
	}
	for done := 0; done < 2; {
		claims, err := client.ClaimRemote(ctx, sdk.RemoteClaimOpts{Queue: "ocr", Worker: "ocr-1", Max: 2, Wait: 5 * time.Second})
		if err != nil {
			panic(err)
		}
		for _, c := range claims {
			var file string
			if err := json.Unmarshal(c.Input, &file); err != nil {
				panic(err)
			}
			out, _ := json.Marshal("text of " + file)
			if err := client.CompleteRemote(ctx, c.Claim, out, nil); err != nil {
				panic(err)
			}
			done++
		}
	}
	text, err := run.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(text)
	// Output:
	// text of scan-1.png text of scan-2.png
}

// docs/remote-steps.md shows lines of the example, in order.
func TestRemoteStepsPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/remote-steps.md", ".."); err != nil {
		t.Fatal(err)
	}
}
