package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
)

// The document pipeline demo: OCR → extract → validate over generated
// documents, with simulated latency and simulated flaky services.

// Document is the demo workflow's input.
type Document struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Pages int    `json:"pages"`
	// Corrupt documents fail validation permanently: no retry fixes them.
	Corrupt bool `json:"corrupt,omitempty"`
}

// Extraction is the demo workflow's output.
type Extraction struct {
	DocumentID string            `json:"document_id"`
	Fields     map[string]string `json:"fields"`
	Valid      bool              `json:"valid"`
}

// pipelineConfig tunes the simulation.
type pipelineConfig struct {
	failureRate float64       // chance a call to a flaky service fails transiently
	latency     time.Duration // typical step latency
}

// demoRetry retries what an HTTP service says is worth retrying: 429 and
// 5xx. Corrupt documents are marked permanent in Go and never retried.
var demoRetry = activities.RetryPolicy{
	MaxAttempts:     6,
	InitialInterval: 50 * time.Millisecond,
	Multiplier:      2,
	MaxInterval:     time.Second,
	Classifier:      activities.MustPolicy("demo-http", "error.status == 429 || error.status >= 500"),
}

const demoTypeName = "document.process"

func newDocumentPipeline(cfg pipelineConfig) *sdk.Workflow[Document, Extraction] {
	return sdk.NewWorkflow(demoTypeName, 1, func(ctx workflow.Context, doc Document) (Extraction, error) {
		text, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
			if err := cfg.simulate(ctx, doc.Pages, &serviceError{kind: "unavailable", status: 503}); err != nil {
				return "", errors.Wrap(err, "ocr service")
			}
			return fmt.Sprintf("%s document %s, %d pages", doc.Kind, doc.ID, doc.Pages), nil
		})
		if err != nil {
			return Extraction{}, err
		}
		fields, err := workflow.Step(ctx, "extract", func(ctx context.Context) (map[string]string, error) {
			if err := cfg.simulate(ctx, 2, &serviceError{kind: "rate_limited", status: 429}); err != nil {
				return nil, errors.Wrap(err, "llm extraction")
			}
			return map[string]string{"kind": doc.Kind, "summary": text, "total": fmt.Sprint(doc.Pages * 42)}, nil
		})
		if err != nil {
			return Extraction{}, err
		}
		return workflow.Step(ctx, "validate", func(ctx context.Context) (Extraction, error) {
			if doc.Corrupt {
				return Extraction{}, activities.Permanent(&validationError{docID: doc.ID})
			}
			return Extraction{DocumentID: doc.ID, Fields: fields, Valid: true}, nil
		})
	}, sdk.WorkflowOpts{Retry: &demoRetry})
}

// serviceError is a simulated failure of a remote service, with the kind
// and status the history records.
type serviceError struct {
	kind   string
	status int
}

func (e *serviceError) Error() string {
	return fmt.Sprintf("simulated %s (status %d)", e.kind, e.status)
}
func (e *serviceError) ErrorKind() string { return e.kind }
func (e *serviceError) ErrorStatus() int  { return e.status }

// simulate sleeps like a remote call of size units would, and fails now
// and then. Randomness comes from the step's idempotency key and attempt,
// so each attempt of each step draws its own luck.
func (cfg pipelineConfig) simulate(ctx context.Context, units int, failure *serviceError) error {
	info, _ := activities.GetInfo(ctx)
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s#%d", info.IdempotencyKey, info.Attempt)
	r := rand.New(rand.NewPCG(h.Sum64(), 7))
	d := time.Duration(float64(cfg.latency) * (0.5 + r.Float64()) * (1 + 0.1*float64(units)))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	if r.Float64() < cfg.failureRate {
		return failure
	}
	return nil
}

var documentKinds = []string{"invoice", "receipt", "contract", "id-card", "bank-statement"}

// generateDocuments makes n sample documents; about one in fifty is
// corrupt. The same seed gives the same documents.
func generateDocuments(n int, seed uint64, batch string) []Document {
	r := rand.New(rand.NewPCG(seed, 11))
	docs := make([]Document, n)
	for i := range docs {
		docs[i] = Document{
			ID:      fmt.Sprintf("%s-%04d", batch, i+1),
			Kind:    documentKinds[r.IntN(len(documentKinds))],
			Pages:   1 + r.IntN(12),
			Corrupt: r.Float64() < 0.02,
		}
	}
	return docs
}

func newBatchID() string {
	return strings.ToLower(time.Now().UTC().Format("20060102T150405.000"))
}

// validationError is a document that can never pass validation.
type validationError struct{ docID string }

func (e *validationError) Error() string {
	return fmt.Sprintf("document %s: total does not match its line items", e.docID)
}
func (e *validationError) ErrorKind() string { return "invalid_document" }
