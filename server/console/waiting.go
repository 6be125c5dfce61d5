package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// consoleWaitingScan bounds the pending tasks the waiting page reads the
// histories of: a task waiting for a signal is pending, due at its wait's
// deadline, so only pending tasks due later are read, the newest first.
const consoleWaitingScan = 200

// waitingTask is a task whose workflow waits for a signal.
type waitingTask struct {
	Task     *sdk.TaskInfo
	Name     string    // the signal awaited
	Position int       // the receive's position (history.Wait.Position): a callback token names it
	Since    time.Time // when the wait began (its wait_started)
	Deadline time.Time // when the receive gives up
}

// Approval reports whether the wait is approval-style: a signal whose
// name speaks of approval, answered with {"approved", "comment"}.
func (w *waitingTask) Approval() bool { return isApprovalSignal(w.Name) }

func isApprovalSignal(name string) bool { return strings.Contains(strings.ToLower(name), "approv") }

// currentWait returns the wait the task's state is in, read from its
// history, or nil.
func currentWait(info *sdk.TaskInfo, events []history.Event) *waitingTask {
	if info.Status.Terminal() {
		return nil
	}
	state, err := history.Replay(events)
	if err != nil || state.Wait == nil || state.Wait.Select != nil {
		// A select's wait names no one signal to send (nor a callback
		// link for one): its timeline says what it waits for.
		return nil
	}
	w := &waitingTask{Task: info, Name: state.Wait.Name, Position: state.Wait.Position, Deadline: state.Wait.Deadline}
	for _, e := range events {
		if p, ok := e.Data.(history.WaitStartedData); ok && p.Position == state.Wait.Position && p.Name == state.Wait.Name {
			w.Since = e.At
		}
	}
	return w
}

// waitingShort is a wait in a status cell: "waiting · approval
// invoice-review" (an approval-style signal), "waiting · signal ping",
// "waiting · 2 of 3 children", "sleeping".
func waitingShort(w *sdk.Waiting) string {
	switch w.Kind {
	case sdk.WaitingSignal:
		if isApprovalSignal(w.Name) {
			return "waiting · approval " + w.Name
		}
		return "waiting · signal " + w.Name
	case sdk.WaitingChildren:
		return fmt.Sprintf("waiting · %d of %d children", w.Children, w.Of)
	case sdk.WaitingTimer:
		return "sleeping"
	case sdk.WaitingSelect:
		return "waiting · select"
	}
	return "waiting · " + w.Kind
}

// waitingLong is a wait in a sentence, with its deadline.
func waitingLong(w *sdk.Waiting) string {
	var text string
	switch w.Kind {
	case sdk.WaitingSignal:
		text = "waiting for signal " + w.Name
	case sdk.WaitingChildren:
		text = fmt.Sprintf("waiting for %d of %d children, %d finished", w.Children, w.Of, w.Finished)
	case sdk.WaitingTimer:
		text = "sleeping"
	case sdk.WaitingSelect:
		text = "waiting in a select"
		if len(w.Signals) > 0 {
			text += " for signal " + strings.Join(w.Signals, " or ")
		}
		if w.Of > 0 {
			text += fmt.Sprintf(", or %d children", w.Of)
		}
	default:
		text = "waiting for " + w.Kind
	}
	if w.Deadline != nil {
		text += " until " + consoleTime(*w.Deadline)
	}
	return text
}

// waitingTasks lists the tasks of c's namespace waiting for a signal,
// among the newest [consoleWaitingScan] pending tasks due later. Scanned
// says whether that bound was reached (older waits may be left out).
func waitingTasks(ctx context.Context, c *sdk.Client) (tasks []*waitingTask, scanned bool, err error) {
	list, err := c.ListPage(ctx, &sdk.ListOpts{Status: history.StatusPending, Limit: consoleWaitingScan})
	if err != nil {
		return nil, false, err
	}
	now := time.Now()
	var later []*sdk.TaskInfo
	var ids []uuid.UUID
	for _, info := range list.Tasks {
		if info.RunAt.After(now) { // due now: not waiting (or about to time out)
			later, ids = append(later, info), append(ids, info.ID)
		}
	}
	if len(ids) == 0 {
		return nil, list.Next != uuid.Nil, nil
	}
	// One read for every candidate's history, not a query per task. The
	// ids come from the namespace's listing; one deleted since has none.
	histories, err := c.RawHistories(ctx, ids)
	if err != nil {
		return nil, false, err
	}
	for _, info := range later {
		if events := histories[info.ID]; len(events) > 0 {
			if w := currentWait(info, events); w != nil {
				tasks = append(tasks, w)
			}
		}
	}
	return tasks, list.Next != uuid.Nil, nil
}

type waitingData struct {
	Tasks   []*waitingTask
	Partial bool
}

// consoleWaiting lists the tasks waiting for a signal.
func (s *Console) consoleWaiting(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	page.Title, page.Page = "Waiting", "waiting"
	tasks, partial, err := waitingTasks(r.Context(), c.client)
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	page.Data = &waitingData{Tasks: tasks, Partial: partial}
	s.render(w, http.StatusOK, "waiting", page)
}

// consoleSignal sends the signal {name} to the task from its page's form:
// an approval's Approve or Reject with a comment ({"approved", "comment"}),
// or a JSON payload. The sender is the console's requester,
// console:<token name>.
func (s *Console) consoleSignal(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.consoleFail(w, r, page, http.StatusBadRequest, "not a task id")
		return
	}
	name := r.PathValue("name")
	back := url.Values{"namespace": {c.namespace}}
	payload, err := consoleSignalPayload(r)
	if err == nil {
		_, err = c.client.Signal(r.Context(), id, name, payload, &sdk.SignalOpts{Sender: consoleRequester(c.who)})
	}
	switch {
	case err != nil:
		s.flash(back, c, "", s.consoleError(r, err))
	case r.FormValue("approved") == "true":
		s.flash(back, c, "Approved: signal "+name+" sent.", "")
	case r.FormValue("approved") == "false":
		s.flash(back, c, "Rejected: signal "+name+" sent.", "")
	default:
		s.flash(back, c, "Signal "+name+" sent.", "")
	}
	http.Redirect(w, r, s.path("/console/tasks/"+url.PathEscape(id.String())+"?"+back.Encode()), http.StatusSeeOther)
}

// consoleSignalPayload is the payload the signal form asks for: with an
// "approved" field (the Approve and Reject buttons), {"approved",
// "comment"}; else the "payload" field's JSON, none when it is empty.
func consoleSignalPayload(r *http.Request) (any, error) {
	switch r.FormValue("approved") {
	case "true", "false":
		return struct {
			Approved bool   `json:"approved"`
			Comment  string `json:"comment"`
		}{r.FormValue("approved") == "true", strings.TrimSpace(r.FormValue("comment"))}, nil
	case "":
	default:
		return nil, errmark.Mark(errors.New("approved is true or false"), sdk.ErrInvalid)
	}
	raw := strings.TrimSpace(r.FormValue("payload"))
	if raw == "" {
		return nil, nil
	}
	if !json.Valid([]byte(raw)) {
		return nil, errmark.Mark(errors.New("the payload is not JSON"), sdk.ErrInvalid)
	}
	return json.RawMessage(raw), nil
}
