// Package sdk is cairn's public face for Go services: a [Client] that
// starts tasks and asks about them, a [Worker] that runs them, and typed
// workflow registration with generics.
//
//	process := sdk.NewWorkflow("document.process", 1,
//		func(ctx workflow.Context, doc Document) (Result, error) {
//			text, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
//				return ocr(ctx, doc)
//			}, nil)
//			...
//		}, nil)
//
//	worker, _ := sdk.NewWorker(sdk.WorkerConfig{Pool: pool})
//	sdk.Register(worker, process)
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err := worker.Run(ctx) // until SIGTERM; then a graceful stop
//
//	client, _ := sdk.NewClient(sdk.ClientConfig{Pool: pool})
//	res, _ := client.Start(ctx, process, Document{...}, nil)
//	info, _ := client.Wait(ctx, res.ID)
//
// [Worker.Run] stops gracefully when its context ends, as [Worker.Stop]
// does: running steps finish within [WorkerConfig.StopTimeout] and their
// tasks are released (task_released) for another worker at once; a step
// that outlives it is cancelled, and its task released all the same.
// Cancelling [Worker.Start]'s context does the same. Only a process that
// dies (SIGKILL, a crash) leaves its tasks to their leases' expiry.
//
// Metrics ([WorkerConfig.Metrics], [ClientConfig.Metrics]) count whatever
// the store: a PostgreSQL pool, or a Store such as engine/sqlitestore's.
//
// The worker classifies each failed attempt (rules, marks, CEL policy,
// default), decides on a retry from the retry budget, and dead-letters what
// it gives up on; [Client.Retry] and [Client.RetryDeadLetters] bring dead
// letters back. [Client.Cancel] stops a task (its worker stops at the next
// checkpoint and compensates what it completed); [Client.Compensate] undoes
// a completed task's steps.
//
// The package is thin: it wires engine (storage, leases), workflow (the
// programming model) and activities (step runtime, retries). What happens
// to an attempt (running the workflow, classifying a failure, deciding on
// a retry, compensating) is the attempt executor's, in sdk/internal/executor,
// which the Worker hands to the engine; the interpreter that runs a
// workflow against its history is internal/interpreter. The package may
// import all of them.
package sdk
