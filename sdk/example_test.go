package sdk_test

// These examples show the public API end to end against a real
// PostgreSQL. They have no "// Output:" comments, so "go test" only compiles
// them: without a database they could not run deterministically. When
// CAIRN_TEST_DATABASE_URL is set (or a test database can be started),
// TestExamples runs each of them and checks what it prints.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// exampleBeforeDrop, when set (TestExamples sets it), runs before an
// example's schema is dropped.
var exampleBeforeDrop func(pool *pgxpool.Pool, schema string)

// exampleDatabase connects to the database named by CAIRN_TEST_DATABASE_URL
// and migrates a fresh schema for one example, as "cairn migrate" would for
// a service. The returned func drops the schema and closes the pool.
func exampleDatabase(ctx context.Context) (*pgxpool.Pool, string, func()) {
	pool, err := pgxpool.New(ctx, os.Getenv("CAIRN_TEST_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "cairn_example_" + hex.EncodeToString(b[:])
	if _, err := pgstore.Migrate(ctx, pool, schema); err != nil {
		panic(err)
	}
	return pool, schema, func() {
		if exampleBeforeDrop != nil {
			exampleBeforeDrop(pool, schema)
		}
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}

// Document is the input of the document pipeline in these examples.
type Document struct {
	ID   string `json:"id"`
	Body string `json:"body"`
}

// Extracted is the pipeline's result.
type Extracted struct {
	DocumentID string `json:"document_id"`
	Words      int    `json:"words"`
}

// A workflow is a typed Go function whose side effects live in steps. A
// worker runs it; a client starts it and waits for its result.
func Example() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()

	process := sdk.NewWorkflow("document.process", 1,
		func(ctx workflow.Context, doc Document) (Extracted, error) {
			// Each step runs once: on a retry its recorded output is
			// replayed instead.
			text, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
				return strings.ToUpper(doc.Body), nil // call the OCR service here
			}, nil)
			if err != nil {
				return Extracted{}, err
			}
			return workflow.Step(ctx, "extract", func(ctx context.Context) (Extracted, error) {
				return Extracted{DocumentID: doc.ID, Words: len(strings.Fields(text))}, nil
			}, nil)
		}, nil)

	worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, PollInterval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	sdk.Register(worker, process)
	if err := worker.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = worker.Stop(ctx) }()

	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	// The input must be a Document: sdk.Start is typed by the workflow.
	run, err := sdk.Start(ctx, client, process, Document{ID: "doc-1", Body: "invoice total 42 EUR"}, nil)
	if err != nil {
		panic(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := run.Result(waitCtx) // an Extracted, or a *sdk.TaskError
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %d words\n", out.DocumentID, out.Words)
	// Prints:
	// doc-1: 4 words
}

// Mark an error activities.Permanent when retrying cannot help: the task
// fails at once, and its last error names the step.
func Example_permanentError() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()

	charge := sdk.NewWorkflow("payment.charge", 1,
		func(ctx workflow.Context, cents int) (string, error) {
			return workflow.Step(ctx, "charge", func(ctx context.Context) (string, error) {
				if cents <= 0 {
					return "", activities.Permanent(errors.Newf("amount %d is not positive", cents))
				}
				return "charged", nil
			}, nil)
		}, &sdk.WorkflowOpts{Retry: &activities.RetryPolicy{
			MaxAttempts: 5, InitialInterval: time.Second, Multiplier: 2, MaxInterval: time.Minute,
		}})

	worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, PollInterval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	sdk.Register(worker, charge)
	if err := worker.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = worker.Stop(ctx) }()

	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, err := sdk.Start(ctx, client, charge, -5, nil)
	if err != nil {
		panic(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = run.Result(waitCtx)
	var failed *sdk.TaskError
	if !errors.As(err, &failed) || !errors.Is(err, sdk.ErrDeadLettered) {
		panic(err)
	}
	fmt.Println(failed.Status, "after", failed.Attempt, "attempt")
	fmt.Println(failed.Class, "error in step", failed.Step+":", failed.Message)
	// Prints:
	// dead_lettered after 1 attempt
	// permanent error in step charge: amount -5 is not positive
}

// StartTx starts a task inside the caller's transaction (the outbox
// pattern): the task exists, and workers hear of it, only if the
// transaction commits.
func ExampleStartTx() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()

	notify := sdk.NewWorkflow("order.notify", 1,
		func(ctx workflow.Context, orderID string) (string, error) { return "notified " + orderID, nil }, nil)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	// ... write the service's own rows with tx ...
	res, err := sdk.StartTx(ctx, client, tx, notify, "order-7", nil)
	if err != nil {
		panic(err)
	}
	if err := tx.Rollback(ctx); err != nil { // the order was not placed after all
		panic(err)
	}
	_, err = client.Get(ctx, res.ID)
	fmt.Println("after rollback, not found:", errors.Is(err, sdk.ErrNotFound))

	tx, err = pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	res, err = sdk.StartTx(ctx, client, tx, notify, "order-8", nil)
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	info, err := client.Get(ctx, res.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("after commit:", info.Status)
	// Prints:
	// after rollback, not found: true
	// after commit: pending
}

// An idempotency key makes a start happen once per namespace, so a retried
// webhook does not start a second task.
func ExampleStartOpts_idempotencyKey() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()

	reply := sdk.NewWorkflow("webhook.reply", 1,
		func(ctx workflow.Context, body string) (string, error) { return body, nil }, nil)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	opts := sdk.StartOpts{IdempotencyKey: "webhook-delivery-123"}
	first, err := sdk.Start(ctx, client, reply, "hello", &opts)
	if err != nil {
		panic(err)
	}
	again, err := sdk.Start(ctx, client, reply, "hello", &opts)
	if err != nil {
		panic(err)
	}
	fmt.Println("first created a task:", !first.Existing)
	fmt.Println("second found it:", again.Existing, again.ID == first.ID)
	// Prints:
	// first created a task: true
	// second found it: true true
}

// A service that only knows a workflow's name and version (a CLI, another
// language) starts it with a TypeRef and raw JSON input, and lists tasks by
// type and status.
func ExampleTypeRef() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()

	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ref := sdk.TypeRef{Name: "document.process", Version: 1}
	for _, input := range []string{`{"id": "a"}`, `{"id": "b"}`} {
		if _, err := client.StartDynamic(ctx, ref, json.RawMessage(input), nil); err != nil {
			panic(err)
		}
	}
	tasks, err := client.List(ctx, &sdk.ListOpts{Type: "document.process", Status: history.StatusPending})
	if err != nil {
		panic(err)
	}
	for _, task := range tasks {
		fmt.Println(task.Type, task.TypeVersion, task.Status)
	}
	// Prints:
	// document.process 1 pending
	// document.process 1 pending
}
