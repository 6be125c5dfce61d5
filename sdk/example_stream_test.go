package sdk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// answer writes its reply a token at a time, as a model would.
var answer = sdk.NewWorkflow("example.answer", 1, func(ctx workflow.Context, question string) (int, error) {
	_ = workflow.Progress(ctx, 0, 1, "asking the model")
	return workflow.Step(ctx, "generate", func(ctx context.Context) (int, error) {
		tokens := []string{"Stream", "s are ", "kept beside ", "the log."}
		for _, tok := range tokens {
			if err := activities.Stream(ctx, "tokens", tok); err != nil {
				return 0, err
			}
		}
		return len(tokens), nil
	}, nil)
}, nil)

// Stream reads what a task's steps write while they run, in order, until
// the task finishes; a rewind voids a failed attempt's chunks.
func ExampleClient_Stream() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, answer) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, answer, "where do streams live?", nil)
	if err != nil {
		panic(err)
	}
	var text strings.Builder
	for item, err := range client.Stream(ctx, run.ID, 0, nil) {
		if err != nil {
			panic(err)
		}
		switch {
		case item.Kind == sdk.StreamChunk && item.Stream == "tokens":
			text.WriteString(item.Text())
		case item.Kind == sdk.StreamChunk: // the workflow's progress
			fmt.Println("progress:", string(item.Data))
		case item.Kind == sdk.StreamRewind: // the attempt failed: drop its chunks
			text.Reset()
		case item.Kind == sdk.StreamStatus && item.Status.Terminal():
			fmt.Println(text.String(), "-", item.Status)
		}
	}
	// Output:
	// progress: {"done":0,"total":1,"message":"asking the model"}
	// Streams are kept beside the log. - completed
}

// docs/streams.md shows lines of ExampleClient_Stream, in order.
func TestStreamsPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/streams.md", ".."); err != nil {
		t.Fatal(err)
	}
}
