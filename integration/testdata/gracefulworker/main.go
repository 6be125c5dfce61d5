// Command gracefulworker is the worker snippet of docs/workflows.md as a program, for
// integration/shutdown_test.go: a worker process stopped by SIGTERM through
// signal.NotifyContext and Worker.Run.
//
// Its workflow's first step ("ocr") marks that it began (the file
// <CAIRN_STEP_DIR>/<task id>.started), waits until the test lets it go
// (<task id>.release), and records its effect (<task id>.ocr) before it
// returns; the second ("extract") returns at once.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

type Doc struct{ ID string }

var stepDir = os.Getenv("CAIRN_STEP_DIR")

var process = sdk.NewWorkflow("document.process", 1,
	func(ctx workflow.Context, doc Doc) (string, error) {
		text, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
			info, _ := activities.GetInfo(ctx)
			return ocr(ctx, info.TaskID, doc)
		}, nil)
		if err != nil {
			return "", err
		}
		return workflow.Step(ctx, "extract", func(context.Context) (string, error) {
			return "fields of " + text, nil
		}, nil)
	}, nil)

// ocr is a step the test holds mid-way: it returns once the release file
// exists, or fails when its context ends (the stop's timeout, a crash).
func ocr(ctx context.Context, task string, doc Doc) (string, error) {
	base := filepath.Join(stepDir, task)
	if err := os.WriteFile(base+".started", nil, 0o600); err != nil {
		return "", err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(base + ".release"); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
	}
	return "text of " + doc.ID, os.WriteFile(base+".ocr", []byte(doc.ID), 0o600)
}

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("CAIRN_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// In the worker process (docs/workflows.md, "Using the SDK"):
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: os.Getenv("CAIRN_SCHEMA"), Concurrency: 20})
	if err != nil {
		log.Fatal(err)
	}
	sdk.Register(worker, process)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := worker.Run(ctx); err != nil { // graceful on SIGTERM: finish running steps, release the rest
		log.Fatal(err)
	}
}
