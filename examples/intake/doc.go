// Package intake is the document intake demo, the application `cairn demo`
// and `cairn dev` run: a Go service's workflows written with cairn's public
// API only, as a user writes theirs.
//
// The workflow document.process ([DocumentWorkflow]) takes one scanned
// [Document]: it OCRs the pages in parallel (a step a page), extracts
// fields with a simulated LLM (reporting its token usage), and validates
// them with a confidence score. A document read with low confidence waits
// for a person's approval, the signal [ApprovalSignal]; with no answer in
// [Config.ApprovalTimeout] a supervisor is notified and it waits
// [EscalationFactor] times as long again, then the default decides.
// Latency, transient failures (retried) and corrupt documents (failing
// permanently) are simulated. The batch parent demo.batch starts a
// document.process child per document and reports the batch.
//
// A worker runs them after [Register]; [Submit] starts a task a document,
// [SubmitBatches] a parent a batch, and [Await] waits for the parents and
// reads back a [Summary]. Who answers the approvals is a [Notifier]: a
// [SimulatedReviewer], or a [PersonNotifier] that prints how to answer.
//
// Files: document.go (document.process and the sample documents),
// batch.go (demo.batch), review.go (the notifiers), run.go (registration,
// submission and the summary).
//
// It imports the public packages sdk, workflow, activities and history,
// never the engine or the CLI (integration/imports_test.go).
package intake
