// Package sdk is cairn's public face for Go services: a [Client] that
// starts tasks and asks about them, a [Worker] that runs them, and typed
// workflow registration with generics.
//
//	process := sdk.NewWorkflow("document.process", 1,
//		func(ctx workflow.Context, doc Document) (Result, error) {
//			text, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
//				return ocr(ctx, doc)
//			}, nil) // nil: the default StepOpts
//			...
//		}, &sdk.WorkflowOpts{Queue: "documents"})
//
//	worker, _ := sdk.NewWorker(sdk.WorkerConfig{Pool: pool})
//	sdk.Register(worker, process)
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err := worker.Run(ctx) // until SIGTERM; then a graceful stop
//
//	client, _ := sdk.NewClient(sdk.ClientConfig{Pool: pool})
//	run, _ := sdk.Start(ctx, client, process, Document{...}, nil) // a Document, or it does not compile
//	out, err := run.Result(ctx)                                    // a Result, or a *TaskError
//
// [Start], [StartTx] and [StartEntry] (for [Client.StartMany]) are typed by
// the workflow; the [Run] they return waits for the output with
// [Run.Result], and [RunOf] makes one for an id kept from earlier. A task
// that ended other than completed is a [*TaskError] matching [ErrFailed],
// [ErrDeadLettered], [ErrCancelled] or [ErrExpired]. Every sentinel of the
// package matches with the standard library's errors.Is as with
// cockroachdb's. [Client.StartDynamic] is the untyped start, for callers
// holding a workflow's name and its input as data (the HTTP API, the CLI).
//
// Options ([StartOpts], [WorkflowOpts], [ListOpts], [DeadLetterOpts],
// [SignalOpts], workflow.StepOpts) are the last parameter, a pointer: nil
// takes every default. The callee never writes through it.
//
// [Worker.Run] stops gracefully when its context ends, as [Worker.Stop]
// does: running steps finish within [WorkerConfig.StopTimeout] and their
// tasks are released (task_released) for another worker at once; a step
// that outlives it is cancelled, and its task released all the same.
// Cancelling [Worker.Start]'s context does the same. Only a process that
// dies (SIGKILL, a crash) leaves its tasks to their leases' expiry.
//
// Metrics ([NewMetrics]; [WorkerConfig.Metrics], [ClientConfig.Metrics])
// count whatever the store: a PostgreSQL pool, or a Store such as
// engine/sqlitestore's (attached to it, store.Store.ObserverAttach; a
// store made with its own Config.Metrics counts into those);
// [NewQueueCollector] reads queue depths at scrape time.
//
// Every payload passes through the payload stage (package payload) at the
// SDK's edge, sdk/internal/edge, the only writer of payloads: inputs kept
// by reference over [ClientConfig.BlobThreshold] (outputs over
// [WorkerConfig.BlobThreshold]) and sealed when [ClientConfig.Keys] and
// [WorkerConfig.Keys] encrypt the namespace (payload/seal); what the
// client and the worker read is decoded there. The store holds only what
// the stage encoded.
//
// Every worker runs cairn's maintenance (the rescue of expired leases and,
// under a leader lease, start deadlines, cron schedules, retention and
// archival); a [Maintainer] runs it where no worker does, as `cairn
// server` does.
//
// Namespaces may live on several databases (cells): open them with
// pgstore.OpenCells, place them with [NewCells], and give the result
// as [ClientConfig.Cells] or [WorkerConfig.Cells]. A client works in its
// namespace's cell; a worker serves [WorkerConfig.Namespaces] across cells,
// with a notifier and a leader per cell, so a cell that is down stops only
// its namespaces.
//
// The worker classifies each failed attempt (rules, marks, CEL policy,
// default), decides on a retry from the retry budget, and dead-letters what
// it gives up on; [Client.Retry] and [Client.RetryDeadLetters] bring dead
// letters back. [Client.Cancel] stops a task (its worker stops at the next
// checkpoint and compensates what it completed); [Client.Compensate] undoes
// a completed task's steps.
//
// One size limit holds payloads: [ClientConfig.MaxPayloadBytes] (1 MiB of
// JSON by default) refuses a larger start input with [ErrPayloadTooLarge];
// [WorkerConfig.MaxPayloadBytes] fails an attempt whose step or workflow
// output is larger, permanently (error kind payload_too_large), without
// recording the output. Filters ([CompileTaskFilter], [CompileEventFilter])
// read a label or error attribute a task lacks as "" ([FilterMap]), so
// task.labels["src"] == "curl" is false on it rather than an error.
//
// The package is thin: it wires engine (storage, leases), workflow (the
// programming model) and activities (step runtime, retries). What happens
// to an attempt (running the workflow, classifying a failure, deciding on
// a retry, compensating) is the attempt executor's, in sdk/internal/executor,
// which the Worker hands to the engine behind the edge; the interpreter that runs a
// workflow against its history is internal/interpreter. The package may
// import all of them.
//
// The values a client hands back about queues, schedules, namespaces,
// registered types and a diagnosis are package cairntype's, as are the
// errors it re-exports (ErrNotFound is cairntype.ErrNotFound). The store
// seam, engine/store, appears only as the type of [ClientConfig.Store] and
// [WorkerConfig.Store]: the driver the client or worker is configured
// with. A client hands no store out.
package sdk
