package intake

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// The workflow document.process: OCR of every page in parallel →
// extraction by a (simulated) LLM → validation with a confidence score →
// for a low-confidence document, a person's approval, escalated to a
// supervisor when nobody answers. Latency and flaky services are
// simulated.

// Document is the input of document.process ([DocumentWorkflow]): one
// scanned document.
type Document struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Pages int    `json:"pages"`
	// Quality is how good the scan is, 0 to 1: the OCR's confidence in a
	// page follows it, and a document read with low confidence waits for
	// a person's approval.
	Quality float64 `json:"quality"`
	// Corrupt documents fail validation permanently: no retry fixes them.
	Corrupt bool `json:"corrupt,omitempty"`
	// RemoteOCR hands the pages' OCR to remote workers of the queue
	// [OCRQueue] (workflow.MapRemote; cairn demo run --remote-ocr starts
	// a Python one). In the input, so every run of the task takes the same
	// branch.
	RemoteOCR bool `json:"remote_ocr,omitempty"`
}

// OCRQueue is the queue of the remote OCR workers, and OCRStep the step
// they serve: {"page": n, "delay_ms": ms} → {"page": n, "text": "..."}.
const (
	OCRQueue = "ocr"
	OCRStep  = "ocr.page"
)

// PageText is one page's OCR.
type PageText struct {
	Page       int     `json:"page"`
	Text       string  `json:"text"`
	Confidence float64 `json:"confidence"`
}

// Extraction is the output of document.process ([DocumentWorkflow]).
type Extraction struct {
	DocumentID string            `json:"document_id"`
	Fields     map[string]string `json:"fields"`
	// Valid: the document was accepted, with confidence or by a reviewer.
	Valid      bool    `json:"valid"`
	Confidence float64 `json:"confidence"`
	// Outcome is what became of the document: accepted (confident
	// enough), approved or rejected (by a reviewer), or manual_review (no
	// decision came: the default).
	Outcome string `json:"outcome"`
	// Review is the approval a low-confidence document waited for.
	Review *Review `json:"review,omitempty"`
	Pages  int     `json:"pages"`
	// LLM is what the extraction cost.
	LLM activities.Usage `json:"llm"`
}

// The outcomes of a document, [Extraction.Outcome].
const (
	OutcomeAccepted     = "accepted"      // confident enough: nobody was asked
	OutcomeApproved     = "approved"      // a reviewer approved it
	OutcomeRejected     = "rejected"      // a reviewer rejected it
	OutcomeManualReview = "manual_review" // no decision came: the default rejected it
)

// Review is how a low-confidence document's approval went.
type Review struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
	Comment  string `json:"comment,omitempty"`
	// Escalated: the first wait timed out and a supervisor was notified.
	Escalated bool `json:"escalated,omitempty"`
	// TimedOut: the wait after the escalation timed out too, and the
	// default decided (rejected, "no decision": left for manual review).
	TimedOut bool `json:"timed_out,omitempty"`
}

// Config tunes the simulation and the approvals of the workflows a worker
// runs ([Register]).
type Config struct {
	FailureRate float64       // chance a call to a flaky service fails transiently, 0 up to 1
	Latency     time.Duration // typical step latency
	// ApprovalTimeout is how long a low-confidence document waits for a
	// decision before a supervisor is notified; it then waits
	// [EscalationFactor] times as long again before the default decides.
	ApprovalTimeout time.Duration
	// Reviewers hears of every approval asked for and every escalation;
	// nil: nobody does (the steps say so).
	Reviewers Notifier
}

// documentRetry retries what an HTTP service says is worth retrying: 429 and
// 5xx. Corrupt documents are marked permanent in Go and never retried.
var documentRetry = activities.RetryPolicy{
	MaxAttempts:     6,
	InitialInterval: 50 * time.Millisecond,
	Multiplier:      2,
	MaxInterval:     time.Second,
	Classifier:      activities.MustPolicy("demo-http", "error.status == 429 || error.status >= 500"),
}

const (
	// DocumentType is the workflow type of one document's intake.
	DocumentType = "document.process"
	// DocumentVersion 2 is the intake with parallel OCR and approvals;
	// version 1 (ocr → extract → validate, one step each) is no longer
	// registered, so its tasks wait for a worker that still runs it.
	DocumentVersion = 2
	// ApprovalSignal is the signal a low-confidence document's approval
	// waits for (workflow.AwaitApproval): {"approved": true|false,
	// "comment": "..."}. The console shows Approve and Reject for it.
	ApprovalSignal = "approval"
	// ConfidenceThreshold: a document read with less confidence waits
	// for a person.
	ConfidenceThreshold = 0.8
	// EscalationFactor: the wait after an escalation is this many times
	// the first.
	EscalationFactor = 3
	// ocrConcurrency bounds the pages of one document OCR'd at once.
	ocrConcurrency = 4
	// llmModel is the simulated model extraction reports usage for.
	llmModel = "sim-llm-small"
	// maxMalformed is how many signals that are not a decision a review
	// takes (and waits again after) before it fails the task.
	maxMalformed = 3
)

// DocumentWorkflow is the workflow type document.process, one document's
// intake, running with cfg. It is a registered type of its own, so
// anything that starts workflows may start it ([sdk.Start]; cfg does not
// matter to a start): [Submit], or the batch parent as a child. It
// declares its one signal, the approval [ApprovalSignal]: a signal of
// another name, or one that is not a decision, is refused when sent.
func DocumentWorkflow(cfg Config) *sdk.Workflow[Document, Extraction] {
	return sdk.NewWorkflow(DocumentType, DocumentVersion, cfg.processDocument, &sdk.WorkflowOpts{Retry: &documentRetry,
		Signals: []sdk.SignalDecl{sdk.DeclareApproval(ApprovalSignal)}})
}

// documentRef names the workflow type, for starting it.
var documentRef = sdk.TypeRef{Name: DocumentType, Version: DocumentVersion}

// processDocument is the workflow's body.
func (cfg Config) processDocument(ctx workflow.Context, doc Document) (Extraction, error) {
	pages := make([]int, doc.Pages)
	for i := range pages {
		pages[i] = i + 1
	}
	texts, err := cfg.ocr(ctx, doc, pages)
	if err != nil {
		return Extraction{}, err
	}
	ext, err := workflow.Step(ctx, "extract", func(ctx context.Context) (extracted, error) {
		return cfg.extract(ctx, doc, texts)
	}, nil)
	if err != nil {
		return Extraction{}, err
	}
	v, err := workflow.Step(ctx, "validate", func(context.Context) (validation, error) {
		if doc.Corrupt {
			return validation{}, activities.Permanent(&validationError{docID: doc.ID})
		}
		return validate(texts, ext), nil
	}, nil)
	if err != nil {
		return Extraction{}, err
	}
	out := Extraction{DocumentID: doc.ID, Fields: ext.Fields, Confidence: v.Confidence, Pages: doc.Pages, LLM: ext.Usage}
	if v.Confidence >= ConfidenceThreshold {
		out.Valid, out.Outcome = true, OutcomeAccepted
		return out, nil
	}
	review, err := cfg.review(ctx, doc, v)
	if err != nil {
		return Extraction{}, err
	}
	out.Review = &review
	switch {
	case review.Approved:
		out.Valid, out.Outcome = true, OutcomeApproved
	case review.TimedOut:
		out.Outcome = OutcomeManualReview
	default:
		out.Outcome = OutcomeRejected
	}
	return out, nil
}

// extracted is the extract step's output.
type extracted struct {
	Fields     map[string]string `json:"fields"`
	Confidence float64           `json:"confidence"`
	Usage      activities.Usage  `json:"usage"`
}

// extract is the simulated LLM call: it reads the pages' text and reports
// the tokens it used, which the history records with the step (a failed
// call is paid for too).
func (cfg Config) extract(ctx context.Context, doc Document, texts []PageText) (extracted, error) {
	u := activities.Usage{Model: llmModel, InputTokens: int64(600 + 350*len(texts)), OutputTokens: 180}
	u.CostUSD = float64(u.InputTokens)*0.15e-6 + float64(u.OutputTokens)*0.6e-6
	activities.RecordUsage(ctx, u)
	if err := cfg.simulate(ctx, 2, &serviceError{kind: "rate_limited", status: 429}); err != nil {
		return extracted{}, errors.Wrap(err, "llm extraction")
	}
	chars := 0
	for _, t := range texts {
		chars += len(t.Text)
	}
	return extracted{
		Fields: map[string]string{"kind": doc.Kind, "summary": fmt.Sprintf("%s %s: %d pages, %d characters", doc.Kind, doc.ID, len(texts), chars),
			"total": fmt.Sprint(doc.Pages * 42)},
		Confidence: roundConfidence(0.5 + 0.5*doc.Quality),
		Usage:      u,
	}, nil
}

// validation is the validate step's output.
type validation struct {
	// Confidence is the document's score: the least confident page's OCR,
	// weighed with the extraction's.
	Confidence float64 `json:"confidence"`
	// Reason says why a review is needed, when it is.
	Reason string `json:"reason,omitempty"`
}

func validate(texts []PageText, ext extracted) validation {
	worst := PageText{Confidence: 1}
	for _, t := range texts {
		if t.Confidence < worst.Confidence {
			worst = t
		}
	}
	v := validation{Confidence: roundConfidence(0.7*worst.Confidence + 0.3*ext.Confidence)}
	if v.Confidence < ConfidenceThreshold {
		v.Reason = fmt.Sprintf("confidence %.2f below %.2f (page %d read with %.2f)", v.Confidence, ConfidenceThreshold, worst.Page, worst.Confidence)
	}
	return v
}

// ocr reads the document's pages: one step per page, ocrConcurrency at a
// time, or all at once on remote workers (doc.RemoteOCR). A page that
// fails ends the attempt, and the retry OCRs only the pages not on
// record.
func (cfg Config) ocr(ctx workflow.Context, doc Document, pages []int) ([]PageText, error) {
	if doc.RemoteOCR {
		in := make([]remotePage, len(pages))
		for i, p := range pages {
			in[i] = remotePage{Page: p, DelayMS: cfg.Latency.Milliseconds()}
		}
		read, err := workflow.MapRemote[remotePage, PageText](ctx, OCRStep, in, &workflow.RemoteOpts{Queue: OCRQueue, Retry: &documentRetry})
		for i := range read {
			// The worker reads the text; the scan's quality sets the
			// confidence, as for the pages read in Go.
			read[i].Confidence = pageConfidence(doc, read[i].Page)
		}
		return read, err
	}
	return workflow.Map(ctx, "ocr", pages, func(ctx context.Context, page int) (PageText, error) {
		if err := cfg.simulate(ctx, 1, &serviceError{kind: "unavailable", status: 503}); err != nil {
			return PageText{}, errors.Wrapf(err, "ocr service, page %d", page)
		}
		return PageText{Page: page, Text: fmt.Sprintf("%s %s, page %d of %d", doc.Kind, doc.ID, page, doc.Pages),
			Confidence: pageConfidence(doc, page)}, nil
	}, &workflow.MapOpts{Concurrency: ocrConcurrency})
}

// remotePage is a remote OCR step's input.
type remotePage struct {
	Page    int   `json:"page"`
	DelayMS int64 `json:"delay_ms,omitempty"`
}

// pageConfidence is the OCR's confidence in a page: the scan's quality,
// give or take a little, the same on every attempt.
func pageConfidence(doc Document, page int) float64 {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d", doc.ID, page)
	noise := float64(h.Sum64()%1000)/1000*0.06 - 0.03
	return roundConfidence(min(1, max(0, doc.Quality+noise)))
}

func roundConfidence(c float64) float64 { return math.Round(c*1000) / 1000 }

// review waits for a person's decision on a low-confidence document: the
// reviewers are told (a step), and the workflow waits up to
// approvalTimeout; with no answer by then a supervisor is notified (a
// step) and it waits EscalationFactor times as long again. With no answer
// after that, the default decides: rejected, "no decision", left for
// manual review. A signal that is not a decision is waited past, at most
// maxMalformed times.
func (cfg Config) review(ctx workflow.Context, doc Document, v validation) (Review, error) {
	timeout := cfg.ApprovalTimeout
	receives, malformed := 0, 0
	for stage := range 2 {
		req := ReviewRequest{DocumentID: doc.ID, Kind: doc.Kind, Confidence: v.Confidence, Reason: v.Reason,
			Stage: stage, Wait: receives, Timeout: timeout}
		step := "request_review"
		if stage == 1 {
			step = "escalate"
		}
		if _, err := workflow.Step(ctx, step, func(ctx context.Context) (string, error) {
			return cfg.notify(ctx, req)
		}, nil); err != nil {
			return Review{}, err
		}
		for {
			d, ok, err := workflow.AwaitApproval(ctx, ApprovalSignal, timeout)
			receives++
			if errors.Is(err, workflow.ErrMalformedDecision) {
				if malformed++; malformed <= maxMalformed {
					continue
				}
				return Review{}, activities.Permanent(err)
			}
			if err != nil {
				return Review{}, err // the attempt ends here: the task waits
			}
			if ok {
				return Review{Approved: d.Approved, By: d.By, Comment: d.Comment, Escalated: stage == 1}, nil
			}
			break
		}
		timeout *= EscalationFactor
	}
	return Review{Approved: false, By: "default", Comment: "no decision", Escalated: true, TimedOut: true}, nil
}

// notify is the review steps' work: tell the reviewers (stage 0) or a
// supervisor (stage 1), as a chat message or an e-mail would.
func (cfg Config) notify(ctx context.Context, req ReviewRequest) (string, error) {
	info, _ := activities.GetInfo(ctx)
	id, err := uuid.Parse(info.TaskID)
	if err != nil {
		return "", activities.Permanent(errors.Wrap(err, "review request: task id"))
	}
	req.TaskID = id
	if err := cfg.simulate(ctx, 0, nil); err != nil {
		return "", err
	}
	who := "reviewers"
	if req.Stage == 1 {
		who = "supervisor"
	}
	if cfg.Reviewers == nil {
		return "no " + who + " to notify", nil
	}
	if err := cfg.Reviewers.Notify(ctx, req); err != nil {
		return "", errors.Wrapf(err, "notify %s", who)
	}
	return fmt.Sprintf("notified %s: %s", who, req.Reason), nil
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
// and then with failure (never, when failure is nil). Randomness comes
// from the step's idempotency key and attempt, so each attempt of each
// step draws its own luck.
func (cfg Config) simulate(ctx context.Context, units int, failure *serviceError) error {
	info, _ := activities.GetInfo(ctx)
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s#%d", info.IdempotencyKey, info.Attempt)
	r := rand.New(rand.NewPCG(h.Sum64(), 7))
	d := time.Duration(float64(cfg.Latency) * (0.5 + r.Float64()) * (1 + 0.1*float64(units)))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	if failure != nil && r.Float64() < cfg.FailureRate {
		return failure
	}
	return nil
}

var documentKinds = []string{"invoice", "receipt", "contract", "id-card", "bank-statement"}

// GenerateDocuments makes n sample documents of batch ([NewBatchID]):
// about one in fifty is corrupt, and lowConfidence of them (rounded; never
// a corrupt one) are poor scans, read with low confidence. The same seed
// gives the same documents.
func GenerateDocuments(n int, seed uint64, batch string, lowConfidence float64) []Document {
	r := rand.New(rand.NewPCG(seed, 11))
	docs := make([]Document, n)
	for i := range docs {
		docs[i] = Document{
			ID:      fmt.Sprintf("%s-%04d", batch, i+1),
			Kind:    documentKinds[r.IntN(len(documentKinds))],
			Pages:   1 + r.IntN(12),
			Quality: roundConfidence(0.9 + 0.09*r.Float64()),
		}
	}
	poor := int(math.Round(lowConfidence * float64(n)))
	for _, i := range r.Perm(n)[:poor] {
		docs[i].Quality = roundConfidence(0.45 + 0.25*r.Float64())
	}
	for i := range docs {
		if docs[i].Quality >= 0.9 && r.Float64() < 0.02 {
			docs[i].Corrupt = true
		}
	}
	return docs
}

// NewBatchID names a batch of documents by the time it is made: their ids
// are <batch>-0001 and so on.
func NewBatchID() string {
	return strings.ToLower(time.Now().UTC().Format("20060102T150405.000"))
}

// validationError is a document that can never pass validation.
type validationError struct{ docID string }

func (e *validationError) Error() string {
	return fmt.Sprintf("document %s: total does not match its line items", e.docID)
}
func (e *validationError) ErrorKind() string { return "invalid_document" }
