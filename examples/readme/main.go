// Command readme is the example in cairn's README, whole: a workflow with a
// step, a wait for a person and a child workflow, started and awaited on
// the embedded store. readme_test.go runs it and checks that the README
// shows this file's code.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

type Doc struct{ ID, Text string }

// ocr is a workflow of one step: a step's output is recorded, so a retry
// replays it instead of calling the service again.
var ocr = sdk.NewWorkflow("doc.ocr", 1, func(ctx workflow.Context, d Doc) (string, error) {
	return workflow.Step(ctx, "read", func(ctx context.Context) (string, error) {
		return strings.ToUpper(d.Text), nil // call your OCR service here
	}, nil)
}, nil)

// review runs ocr as a child task, then waits (without holding a worker)
// for a person's answer, a signal named "approval", for up to a day.
var review = sdk.NewWorkflow("doc.review", 1, func(ctx workflow.Context, d Doc) (string, error) {
	text, err := workflow.StartChild(ctx, ocr, d, nil).Result(ctx)
	if err != nil {
		return "", err
	}
	approved, answered, err := workflow.Receive[bool](ctx, "approval", 24*time.Hour)
	if err != nil || !answered || !approved {
		return "rejected", err
	}
	return "approved: " + text, nil
}, nil)

func main() {
	if err := run(context.Background(), "cairn-readme.db", os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, path string, w io.Writer) error {
	store, err := sqlitestore.Open(ctx, path) // or sdk.ClientConfig{Pool: pgxpool} for PostgreSQL
	if err != nil {
		return err
	}
	defer store.Close()
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Store: store})
	if err != nil {
		return err
	}
	sdk.Register(worker, ocr)
	sdk.Register(worker, review)
	if err := worker.Start(ctx); err != nil {
		return err
	}
	defer worker.Stop(ctx)
	client, err := sdk.NewClient(sdk.ClientConfig{Store: store})
	if err != nil {
		return err
	}
	defer client.Close()

	run, err := sdk.Start(ctx, client, review, Doc{ID: "inv-1", Text: "total 42 EUR"}, nil)
	if err != nil {
		return err
	}
	// Your approval UI sends this; so can `cairn task signal` or the HTTP API.
	if _, err := client.Signal(ctx, run.ID, "approval", true, nil); err != nil {
		return err
	}
	out, err := run.Result(ctx) // waits for the task to finish
	fmt.Fprintln(w, out)
	return err
}
