package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/google/uuid"
)

// taskData is the task page.
type taskData struct {
	Task                               *sdk.TaskInfo
	Finished                           bool
	CanCancel, CanRetry, CanCompensate bool
	Input, Output                      string
	// InputBlob and OutputBlob, for an input or output kept as a blob,
	// are its size, type and the console's download link.
	InputBlob, OutputBlob *blobLink
	Timeline              []*timelineBlock
	Axis                  *timeAxis       // the same history on a time axis
	Events                []history.Event // the first consoleEventRows of them
	MoreEvents            int             // those past consoleEventRows, not listed
	Cost                  string
	// BatchCost is the task's usage with its children's, recursively
	// (sdk.Client.TaskUsage with Children), when it started any; its
	// children's rows show their own roll-ups.
	BatchCost string
	// Wait is the signal the task's workflow waits for, if it does: the
	// page offers a form to send it.
	Wait *waitingTask
	// BudgetWait is the budget the task waits on, if a step of it was
	// refused by a budget that waits: the page offers the Raise form.
	BudgetWait *sdk.BudgetWaiter
	// Callback holds the signed one-time URLs that answer Wait, for an
	// operator to pass on (a chat message, a ticket): only for a user
	// with role operate, on a console with a Config.CallbackURL.
	Callback *callbackLinks
	// Children is the panel of the task's child workflows, if it started
	// any; Parent the way up, for a task that is a child.
	Children *childrenPanel
	Parent   *parentLink
	// ForkedFrom, on a fork, is the task it was forked from, and
	// ForkDiff its steps' outputs beside that task's; Forks are the
	// tasks forked from this one.
	ForkedFrom *forkLink
	ForkDiff   *forkDiff
	Forks      []forkLink
}

// LiveQuery is the query the page refreshes itself with: the namespace
// and the children panel's filter and page.
func (d *taskData) LiveQuery(namespace string) string {
	q := "namespace=" + url.QueryEscape(namespace)
	if d.Children != nil && d.Children.Query != "" {
		q += "&" + d.Children.Query
	}
	return q
}

// HasActions says whether the task allows any action: a cancelled or
// failed task gets no actions card at all rather than an empty one.
func (d *taskData) HasActions() bool { return d.CanCancel || d.CanRetry || d.CanCompensate }

// consoleEventRows bounds the page's table of events: a parent of a big
// fan-out has two events per child. The API's history has them all.
const consoleEventRows = 1000

// listedEvents are the events the page's table lists, and how many more
// there are.
func listedEvents(events []history.Event) ([]history.Event, int) {
	if len(events) > consoleEventRows {
		return events[:consoleEventRows], len(events) - consoleEventRows
	}
	return events, 0
}

// The task page shows at most this much of an input or output.
const consoleJSONLimit = 4 << 10

func (s *Console) consoleTask(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	page.Title, page.Page = "Task", "tasks"
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.consoleFail(w, r, page, http.StatusBadRequest, "not a task id")
		return
	}
	info, err := c.client.Get(r.Context(), id)
	if err != nil {
		status := http.StatusInternalServerError
		if p := web.ProblemFor(err); p != nil {
			status = p.Status
		}
		s.consoleFail(w, r, page, status, s.consoleError(r, err))
		return
	}
	events, err := c.client.RawHistory(r.Context(), id)
	if err != nil {
		s.consoleFail(w, r, page, http.StatusInternalServerError, s.consoleError(r, err))
		return
	}
	finished := info.Status.Terminal()
	data := &taskData{
		Task: info, Finished: finished, Events: events,
		CanCancel: !finished, CanRetry: info.Status == history.StatusDeadLettered, CanCompensate: info.Status == history.StatusCompleted,
		Input: prettyJSON(info.Input, consoleJSONLimit), Output: prettyJSON(info.Output, consoleJSONLimit),
		Timeline: buildTimeline(events), Axis: buildTimeAxis(events, finished, time.Now()), Cost: usageSummary(events), Wait: currentWait(info, events),
	}
	if bw, ok := sdk.BudgetWaitOf(events); ok && !finished {
		bw.Task = info
		data.BudgetWait = &bw
	}
	data.InputBlob, data.OutputBlob = s.blobLinkOf(c, info.Input), s.blobLinkOf(c, info.Output)
	data.Events, data.MoreEvents = listedEvents(events)
	if err := s.consoleChildren(r.Context(), c, info, events, r.URL.Query(), data); err != nil {
		s.consoleFail(w, r, page, http.StatusInternalServerError, s.consoleError(r, err))
		return
	}
	s.consoleFork(r.Context(), c, events, data)
	s.consoleBatchCost(r, c, info.ID, data)
	if page.CanOperate && data.Wait != nil {
		data.Callback = s.callbackLinks(r, c.namespace, data.Wait, time.Now())
	}
	page.Data = data
	s.render(w, http.StatusOK, "task", page)
}

// callbackLinks are the callback URLs of a wait: URL takes the signal's
// payload as its JSON body (for an approval, a decision {"approved",
// "comment"}); Approve and Reject are URL with ?decision=approve|reject,
// which the server's POST /v1/callbacks/{token} takes with no body. They share one token, so
// the first of them used decides and the others are refused.
type callbackLinks struct {
	URL, Approve, Reject string
	Expires              time.Time
}

// callbackLinks signs the callback URLs of wait, valid until its
// deadline (a signal sent after it would be kept for a later receive of
// the name, not this one). Nil without a Config.CallbackURL, or for a wait
// whose deadline has passed (it is about to time out). The token depends
// only on the wait, so the page shows the same links on every load.
func (s *Console) callbackLinks(r *http.Request, namespace string, wait *waitingTask, now time.Time) *callbackLinks {
	if s.cfg.CallbackURL == nil || !wait.Deadline.After(now.Add(time.Second)) {
		return nil
	}
	cb := sdk.Callback{Namespace: namespace, TaskID: wait.Task.ID, Name: wait.Name, Wait: wait.Position, Expires: wait.Deadline}
	u, err := s.cfg.CallbackURL(consoleOrigin(r, s.cfg.SecureCookies), cb)
	if err != nil {
		s.log.Error("console: sign a callback URL", "task", wait.Task.ID.String(), "error", err.Error())
		return nil
	}
	links := &callbackLinks{URL: u, Expires: time.Unix(wait.Deadline.Unix(), 0)} // the token keeps whole seconds
	if wait.Approval() {
		links.Approve, links.Reject = u+"?decision=approve", u+"?decision=reject"
	}
	return links
}

// consoleOrigin is the origin the console's user reached the server at,
// as the request says: its Host, over https when it came over TLS or the
// server sets Secure cookies (Config.SecureCookies: behind a
// TLS-terminating proxy).
func consoleOrigin(r *http.Request, secure bool) string {
	scheme := "http"
	if r.TLS != nil || secure {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// timelineBlock is one attempt, or one thing that happened between
// attempts, on the task page.
type timelineBlock struct {
	Title, Class, Worker string
	Start                time.Time
	Duration             time.Duration
	Steps                []timelineStep
	Notes                []string
	Error                *history.ErrorInfo
	// Retry is when the next attempt is due after this one failed: shown
	// after the failed step and its evidence, with milliseconds, so it
	// reads as later than the failure and earlier than the next attempt.
	Retry *time.Time
	last  time.Time // the block's latest event, for step durations without their own
}

type timelineStep struct {
	Name     string
	Duration time.Duration
	Width    float64 // share of the attempt, in percent
	Failed   bool    // the step the attempt failed in: drawn red, and it has no step_completed
}

// The classes of an attempt's block: how it ended.
const (
	blockOpen      = "open"
	blockOK        = "ok"
	blockFailed    = "failed"
	blockCancelled = "cancelled"
)

// failedStep is the bar of the step an attempt failed in: from the
// attempt's previous event to the failure, since a failing step records
// no step_completed (and so no duration of its own).
func failedStep(open *timelineBlock, at time.Time, info history.ErrorInfo, labels stepLabels) {
	if open == nil || info.Step == "" {
		return
	}
	open.Steps = append(open.Steps, timelineStep{Name: labels.of(info.Position, info.Step), Duration: at.Sub(open.last), Failed: true})
}

// consoleTime is a time on the task page: UTC with milliseconds, so a
// retry due a few hundred milliseconds after a failure does not read as
// earlier than the attempt that scheduled it.
func consoleTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

// buildTimeline reads a history into blocks: each attempt with its steps
// (how long each ran), what ended it and its error evidence; and the
// events between attempts (scheduled, cancel requests, requeues).
func buildTimeline(events []history.Event) []*timelineBlock {
	var blocks []*timelineBlock
	var open *timelineBlock // the attempt running, if any
	labels := newStepLabels(events)
	note := func(at time.Time, title, text string) {
		if open != nil {
			open.Notes = append(open.Notes, text)
			return
		}
		blocks = append(blocks, &timelineBlock{Title: title, Start: at, Notes: []string{text}, last: at})
	}
	end := func(at time.Time, class string) {
		if open == nil {
			return
		}
		open.Duration, open.Class = at.Sub(open.Start), class
		open = nil
	}
	for _, e := range events {
		switch p := e.Data.(type) {
		case history.TaskScheduledData:
			blocks = append(blocks, &timelineBlock{Title: "Scheduled", Start: e.At, last: e.At,
				Notes: []string{fmt.Sprintf("queue %s, due %s", p.Queue, consoleTime(p.RunAt))}})
		case history.AttemptStartedData:
			open = &timelineBlock{Title: fmt.Sprintf("Attempt %d", e.Attempt), Class: blockOpen, Worker: p.WorkerID, Start: e.At, last: e.At}
			blocks = append(blocks, open)
		case history.StepCompletedData:
			if open == nil {
				continue
			}
			d := time.Duration(p.DurationMillis) * time.Millisecond
			if d == 0 {
				d = e.At.Sub(open.last)
			}
			open.Steps = append(open.Steps, timelineStep{Name: labels.of(p.Position, p.Name), Duration: d})
		case history.TimerStartedData:
			note(e.At, "Sleep", "sleeping until "+consoleTime(p.FireAt))
			end(e.At, blockOK)
		case history.TimerFiredData:
			note(e.At, "Woke", "woke from its sleep")
		case history.WaitStartedData:
			if p.Select != nil {
				note(e.At, "Select", "waiting for "+selectWaitText(p))
			} else {
				note(e.At, "Wait", "waiting for signal "+p.Name+" until "+consoleTime(p.Deadline))
			}
			end(e.At, blockOK)
		case history.SelectMatchedData:
			note(e.At, "Selected", selectMatchedText(p))
		case history.ChildWaitStartedData:
			note(e.At, "Children", "waiting for "+childWaitText(p))
			end(e.At, blockOK)
		case history.WaitTimedOutData:
			note(e.At, "Timed out", "no signal "+p.Name+" came before its deadline")
		case history.PatchRecordedData:
			note(e.At, "Patch", fmt.Sprintf("took the new branch of patch %s at step %d", p.PatchID, p.Position))
		case history.StreamClosedData:
			where := fmt.Sprintf("step %d", p.Position)
			if p.Position < 0 {
				where = "the workflow"
			}
			note(e.At, "Stream", fmt.Sprintf("stream %s of %s %s (attempt %d): %d chunks, %d bytes", p.Name, where, p.Outcome, e.Attempt, p.Chunks, p.Bytes))
		case history.BudgetReservedData, history.BudgetSettledData, history.BudgetRaisedData:
			title, text := budgetNote(p)
			note(e.At, title, text)
		case history.BudgetRefusedData:
			title, text := budgetNote(p)
			note(e.At, title, text)
			if p.Action == history.BudgetWait {
				end(e.At, blockOK) // the attempt ends: the task waits for a raise, on no worker
			}
		case history.ModelLimitWaitedData:
			note(e.At, "Rate limit", fmt.Sprintf("step %d (%s) waited %s for its turn under the rate limit of %s (%d tokens asked, %d ahead)",
				p.Position, p.Step, time.Duration(p.WaitedMS)*time.Millisecond, p.Model, p.Tokens, p.Ahead))
		case history.UpdateAcceptedData:
			text := "update " + p.Name + " (" + p.UpdateID + ") accepted"
			if p.RequestedBy != "" {
				text += " from " + p.RequestedBy
			}
			note(e.At, "Update", text)
		case history.UpdateCompletedData:
			text := fmt.Sprintf("update %s applied at step %d", p.UpdateID, p.At.Step)
			if p.Error != nil {
				text += ", failed: " + p.Error.Message
			}
			note(e.At, "Updated", text)
		case history.SignalReceivedData:
			text := "signal " + p.Name + " received"
			if p.Sender != "" {
				text += " from " + p.Sender
			}
			note(e.At, "Signal", text)
		case history.AttemptFailedData:
			failedStep(open, e.At, p.Error, labels)
			if open != nil {
				open.Error, open.Retry = &p.Error, p.NextRunAt
			} else if p.NextRunAt != nil {
				note(e.At, "Failed", "retry at "+consoleTime(*p.NextRunAt))
			}
			end(e.At, blockFailed)
		case history.LeaseExpiredData:
			note(e.At, "Lease expired", "lease expired: worker "+p.WorkerID+" stopped renewing it; retry at "+consoleTime(p.NextRunAt))
			end(e.At, blockFailed)
		case history.TaskReleasedData:
			note(e.At, "Released", "released by its worker: "+p.Reason)
			end(e.At, blockOK)
		case history.CancelRequestedData:
			note(e.At, "Cancel requested", "cancel requested by "+p.By+": "+p.Reason)
		case history.CompensationRequestedData:
			note(e.At, "Compensation requested", "compensation requested by "+p.By+": "+p.Reason)
		case history.CompensationStartedData:
			note(e.At, "Compensation", "compensating: "+p.Reason)
		case history.StepCompensatedData:
			note(e.At, "Compensated", fmt.Sprintf("undone: step %d (%s)", p.Position, p.Name))
		case history.CompensationFailedData:
			if open != nil {
				open.Error = &p.Error
			}
			note(e.At, "Compensation failed", fmt.Sprintf("compensation of step %d (%s) failed", p.Position, p.Name))
		case history.TaskRequeuedData:
			note(e.At, "Requeued", "requeued by "+p.By+": "+p.Reason)
		case history.TaskCompletedData:
			note(e.At, "Completed", "completed")
			end(e.At, blockOK)
		case history.TaskFailedData:
			if open != nil {
				if open.Error == nil {
					failedStep(open, e.At, p.Error, labels)
				}
				open.Error = &p.Error
			} else {
				blocks = append(blocks, &timelineBlock{Title: "Failed", Start: e.At, Class: blockFailed, Error: &p.Error})
			}
			note(e.At, "Failed", "failed")
			end(e.At, blockFailed)
		case history.TaskDeadLetteredData:
			if open != nil && open.Error == nil {
				failedStep(open, e.At, p.Error, labels)
				open.Error = &p.Error
			}
			note(e.At, "Dead-lettered", "dead-lettered: "+p.Reason)
			end(e.At, blockFailed)
		case history.TaskCancelledData:
			note(e.At, "Cancelled", "cancelled")
			end(e.At, blockCancelled)
		case history.TaskExpiredData:
			note(e.At, "Expired", "expired: "+p.Reason)
		}
		if open != nil {
			open.last = e.At
		}
	}
	for _, b := range blocks {
		for i := range b.Steps {
			if b.Duration > 0 {
				b.Steps[i].Width = min(100, max(1, 100*float64(b.Steps[i].Duration)/float64(b.Duration)))
			}
		}
	}
	return blocks
}

// consoleBatchCost rolls a parent's usage up with its children's: the
// batch's total, and each child row's own. A tree over the roll-up's
// bound (or a failed read) says so instead: the page still shows.
func (s *Console) consoleBatchCost(r *http.Request, c *call, id uuid.UUID, data *taskData) {
	if data.Children == nil || data.Children.Total == 0 {
		return
	}
	u, err := c.client.TaskUsage(r.Context(), id, &sdk.TaskUsageOpts{Children: true})
	if err != nil {
		data.BatchCost = "not rolled up: " + s.consoleError(r, err)
		return
	}
	data.BatchCost = fmt.Sprintf("%d tokens · $%.4f over %d tasks", u.Total.Tokens(), u.Total.CostUSD, u.Tasks)
	if u.Missing > 0 {
		data.BatchCost += fmt.Sprintf(" (%d removed, not counted)", u.Missing)
	}
	for _, row := range data.Children.Rows {
		if row.Position >= 0 && row.Position < len(u.Children) && u.Children[row.Position].TaskID.String() == row.ID {
			t := u.Children[row.Position].Total
			row.Cost = fmt.Sprintf("$%.4f", t.CostUSD)
			if t.Reports == 0 {
				row.Cost = "—"
			}
		}
	}
}

// usageSummary totals the AI usage the task's steps reported.
func usageSummary(events []history.Event) string {
	var tokens int64
	var cost float64
	add := func(us []history.Usage) {
		for _, u := range us {
			tokens += u.InputTokens + u.OutputTokens
			cost += u.CostUSD
		}
	}
	for _, e := range events {
		switch p := e.Data.(type) {
		case history.StepCompletedData:
			add(p.Usage)
		case history.AttemptFailedData:
			add(p.Usage)
		}
	}
	if tokens == 0 && cost == 0 {
		return ""
	}
	return fmt.Sprintf("%d tokens · $%.4f", tokens, cost)
}

// blobLink is a payload kept as a blob, as the task page offers it.
type blobLink struct {
	Size        int64
	ContentType string
	URL         string
}

// consoleBlob downloads a blob of the namespace (an output kept by
// reference), checked against its digest as every read is.
func (s *Console) consoleBlob(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	data, contentType, err := c.client.ReadBlob(r.Context(), r.PathValue("key"))
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, sdk.ErrNotFound) {
			status = http.StatusNotFound
		}
		s.consoleFail(w, r, page, status, s.consoleError(r, err))
		return
	}
	web.WriteBlob(w, data, contentType)
}

// blobLinkOf is the download link of a payload kept as a blob, nil for
// any other payload.
func (s *Console) blobLinkOf(c *call, raw json.RawMessage) *blobLink {
	ref, ok := history.ParseBlobEnvelope(raw)
	if !ok {
		return nil
	}
	return &blobLink{Size: ref.Size, ContentType: ref.ContentType,
		URL: s.path("/console/blobs/" + url.PathEscape(ref.Key) + "?namespace=" + url.QueryEscape(c.namespace))}
}
