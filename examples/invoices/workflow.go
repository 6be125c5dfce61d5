package invoices

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// Invoice is what a client uploads: an id and the pages' scans (text here,
// to keep the example self-contained).
type Invoice struct {
	ID    string   `json:"id"`
	Pages []string `json:"pages"`
}

// Result is what processing an invoice returns.
type Result struct {
	ID       string `json:"id"`
	Total    string `json:"total"`
	Approved bool   `json:"approved"`
	Comment  string `json:"comment,omitempty"`
}

// ReadPage is a child workflow: one page's OCR, a task of its own with its
// own retries, so one bad page never redoes the others.
var ReadPage = sdk.NewWorkflow("invoice.read_page", 1,
	func(ctx workflow.Context, page string) (string, error) {
		return workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
			return ocr(ctx, page)
		}, nil)
	}, nil)

// Process reads every page (a child each, in parallel), extracts the total
// (a step, retried at most three times), then waits up to three days for a
// person to approve it.
var Process = sdk.NewWorkflow("invoice.process", 1,
	func(ctx workflow.Context, inv Invoice) (Result, error) {
		texts, err := workflow.MapChildren(ctx, ReadPage, inv.Pages, nil)
		if err != nil {
			return Result{}, err
		}
		total, err := workflow.Step(ctx, "extract_total", func(ctx context.Context) (string, error) {
			return extractTotal(ctx, texts)
		}, &workflow.StepOpts{Retry: &activities.RetryPolicy{MaxAttempts: 3}})
		if err != nil {
			return Result{}, err
		}
		decision, answered, err := workflow.AwaitApproval(ctx, "approval", 72*time.Hour)
		if err != nil {
			return Result{}, err
		}
		if !answered {
			decision = workflow.Decision{Approved: false, Comment: "no decision in 3 days"}
		}
		return Result{ID: inv.ID, Total: total, Approved: decision.Approved, Comment: decision.Comment}, nil
	}, nil)

// ocr stands for an OCR service: it upper-cases the page.
func ocr(_ context.Context, page string) (string, error) {
	return strings.ToUpper(page), nil
}

// extractTotal stands for an LLM call: it finds the line "TOTAL ...".
func extractTotal(_ context.Context, texts []string) (string, error) {
	for _, t := range texts {
		if rest, ok := strings.CutPrefix(t, "TOTAL "); ok {
			return rest, nil
		}
	}
	return "", activities.Permanent(fmt.Errorf("no total on %d pages", len(texts)))
}
