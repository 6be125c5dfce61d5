package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// A task a budget refused with BudgetWait waits for a raise; a signed
// one-time link lets whoever holds it make one raise, of the amounts
// signed in it, without an API token: GET /v1/callbacks/budget/{token}
// is a page saying which task waits on which budget and by how much the
// link raises it, with a button whose form posts to the same URL; POST
// raises it, recorded as by "callback" (plus the link's For).

// BudgetCallbackURL returns the signed one-time URL that makes the raise
// of cb: {base}{Config.Prefix}/v1/callbacks/budget/{token}, its token
// [sdk.BudgetCallbackToken] under Config.CallbackSecret (a server without
// one returns an error marked [sdk.ErrInvalid]). Make cb with
// [sdk.Client.BudgetCallback] for a task waiting on a budget.
func (s *Server) BudgetCallbackURL(base string, cb sdk.BudgetCallback) (string, error) {
	if len(s.cfg.CallbackSecret) == 0 {
		return "", errmark.Mark(errors.New("server: no Config.CallbackSecret to sign callback URLs with"), sdk.ErrInvalid)
	}
	token, err := sdk.BudgetCallbackToken(s.cfg.CallbackSecret, cb)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(base, "/") + s.path("/v1/callbacks/budget/"+token), nil
}

// maxBudgetCallbackReason bounds the page form's comment, recorded as the
// raise's reason, in bytes (the SDK's bound on a reason).
const maxBudgetCallbackReason = 512

// budgetCallbackRequest is the JSON body of a budget link's POST.
type budgetCallbackRequest struct {
	Reason string `json:"reason"`
}

// budgetCallbackResponse answers a budget link's raise.
type budgetCallbackResponse struct {
	TaskID string   `json:"task_id"`
	Ref    string   `json:"ref"`
	By     string   `json:"by"`
	Woken  []string `json:"woken"`
}

// budgetCallback is POST /v1/callbacks/budget/{token}, served without an
// API token: it raises the token's budget by the token's amounts, once,
// and only while the task waits in the wait the token names (see
// [sdk.Client.RaiseBudgetByCallback]). Refusals write nothing: 403 for a
// forged, malformed or expired token, 404 for a task gone, 410
// callback_used for a link used, 410 wait_ended for a wait that ended
// (raised another way, timed out, the task finished or was refused
// again). From the page's form (urlencoded, an optional comment), or
// asked for text/html, it answers with a page.
func (s *Server) budgetCallback(w http.ResponseWriter, r *http.Request) {
	form, page := callbackForm(r)
	refuse := func(p *Problem) {
		if page {
			s.writeCallbackProblem(w, p)
		} else {
			s.writeProblem(w, r, p)
		}
	}
	cb, p := s.parseBudgetCallback(r.PathValue("token"))
	if p != nil {
		refuse(p)
		return
	}
	if len(r.URL.Query()) > 0 {
		refuse(web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "a budget callback takes no query parameter"))
		return
	}
	var reason string
	if form {
		r.Body = http.MaxBytesReader(w, r.Body, callbackBodyBytes)
		if err := r.ParseForm(); err != nil {
			refuse(web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "the form could not be read"))
			return
		}
		for k := range r.PostForm {
			if k != "comment" {
				refuse(web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "unknown form field "+k+": the page sends a comment"))
				return
			}
		}
		reason = strings.TrimSpace(r.PostForm.Get("comment"))
	} else {
		var req budgetCallbackRequest
		if p := decodeBody(w, r, callbackBodyBytes, &req, true); p != nil {
			refuse(p)
			return
		}
		reason = req.Reason
	}
	c, err := s.client(cb.Namespace)
	if err != nil {
		refuse(s.problemOf(r, err))
		return
	}
	woken, err := c.RaiseBudgetByCallback(sdk.WithRequester(r.Context(), cb.By()), cb, reason)
	switch {
	case errors.Is(err, sdk.ErrCallbackUsed):
		refuse(web.NewProblem(http.StatusGone, web.CodeCallbackUsed, "the callback link was used already"))
		return
	case errors.Is(err, sdk.ErrWaitEnded):
		refuse(web.NewProblem(http.StatusGone, web.CodeWaitEnded,
			"the wait this link raises has ended: the budget was raised another way, the wait timed out, or the task finished"))
		return
	case err != nil:
		if web.ProblemFor(err) == nil && r.Context().Err() != nil {
			return
		}
		refuse(s.problemOf(r, err))
		return
	}
	if page {
		s.writeBudgetCallbackPage(w, http.StatusOK, budgetCallbackView{Title: "Budget raised",
			Message: "The budget was raised; the tasks waiting on it retry their step. You may close this page.",
			TaskID:  cb.TaskID.String(), Ref: cb.Ref, Amount: budgetAmount(cb)})
		return
	}
	ids := make([]string, len(woken))
	for i, id := range woken {
		ids[i] = id.String()
	}
	writeJSON(w, http.StatusOK, budgetCallbackResponse{TaskID: cb.TaskID.String(), Ref: cb.Ref, By: cb.By(), Woken: ids})
}

// budgetCallbackPage is GET /v1/callbacks/budget/{token}: the link's page.
// It writes nothing; its statuses are a POST's.
func (s *Server) budgetCallbackPage(w http.ResponseWriter, r *http.Request) {
	cb, p := s.parseBudgetCallback(r.PathValue("token"))
	if p != nil {
		s.writeCallbackProblem(w, p)
		return
	}
	c, err := s.client(cb.Namespace)
	if err != nil {
		s.writeCallbackProblem(w, s.problemOf(r, err))
		return
	}
	at, err := c.BudgetCallbackWait(r.Context(), cb)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		s.writeCallbackProblem(w, s.problemOf(r, err))
		return
	}
	v := budgetCallbackView{TaskID: cb.TaskID.String(), Type: at.TaskType, Version: at.TypeVersion, Step: at.Step, Ref: cb.Ref,
		Amount: budgetAmount(cb), Expires: pageTime(cb.Expires), Comment: maxBudgetCallbackReason}
	if !cb.Window.IsZero() {
		v.Window = pageTime(cb.Window)
	}
	status := http.StatusOK
	switch at.State {
	case sdk.CallbackOpen:
		v.Title, v.Open = "Raise the budget "+cb.Ref, true
		if !at.Deadline.IsZero() {
			v.Until = pageTime(at.Deadline)
		}
	case sdk.CallbackUsed:
		status, v.Title, v.Message = http.StatusGone, "This link was used already", "The budget was raised through a link; a link works once."
	default:
		status, v.Title = http.StatusGone, "There is nothing left to raise"
		v.Message = "The wait this link raises has ended: the budget was raised another way, the wait timed out, or the task finished (" +
			string(at.Status) + ")."
	}
	s.writeBudgetCallbackPage(w, status, v)
}

// parseBudgetCallback checks a budget link's token: a forged, malformed
// or expired one is a 403.
func (s *Server) parseBudgetCallback(token string) (sdk.BudgetCallback, *Problem) {
	cb, err := sdk.ParseBudgetCallbackToken(s.cfg.CallbackSecret, token, time.Now())
	if err == nil {
		return cb, nil
	}
	detail := "the callback link is not valid"
	if errors.Is(err, sdk.ErrCallbackExpired) {
		detail = "the callback link has expired"
	}
	return sdk.BudgetCallback{}, web.NewProblem(http.StatusForbidden, web.CodeForbidden, detail)
}

// budgetAmount is what a link raises by, as the page says it.
func budgetAmount(cb sdk.BudgetCallback) string {
	var parts []string
	if cb.USD > 0 {
		parts = append(parts, "$"+strconv.FormatFloat(cb.USD, 'f', -1, 64))
	}
	if cb.Tokens > 0 {
		parts = append(parts, strconv.FormatInt(cb.Tokens, 10)+" tokens")
	}
	return strings.Join(parts, " and ")
}

// budgetCallbackView is what a budget link's page shows.
type budgetCallbackView struct {
	Title   string
	Message string
	Open    bool
	TaskID  string
	Type    string
	Version int
	Step    string
	Ref     string
	Window  string
	Amount  string
	Until   string
	Expires string
	Comment int
}

var budgetCallbackTemplate = callbackPageTemplate(`button { font: inherit; padding: .5rem 1.5rem; border-radius: 6px; border: 1px solid #1f7a3a; background: #1f7a3a; color: #fff; cursor: pointer; margin-top: 1rem; }`,
	`{{if .TaskID}}<dl>
<dt>Budget</dt><dd><strong>{{.Ref}}</strong>{{if .Window}} (window from {{.Window}}){{end}}</dd>
<dt>Raise by</dt><dd>{{.Amount}}</dd>
<dt>Task</dt><dd><code>{{.TaskID}}</code></dd>
{{if .Type}}<dt>Type</dt><dd>{{.Type}}@{{.Version}}</dd>{{end}}
{{if .Step}}<dt>Refused step</dt><dd>{{.Step}}</dd>{{end}}
{{if .Until}}<dt>Waits until</dt><dd>{{.Until}}</dd>{{end}}
{{if .Expires}}<dt>Link valid until</dt><dd>{{.Expires}}</dd>{{end}}
</dl>{{end}}
{{if .Open}}<form method="post">
<label for="comment">Reason (optional)</label>
<textarea id="comment" name="comment" maxlength="{{.Comment}}"></textarea>
<button type="submit">Raise by {{.Amount}}</button>
</form>
<p class="note">The link works once. A raise wakes every task waiting on this budget.</p>{{end}}`)

// writeBudgetCallbackPage answers with the budget link's page of v.
func (s *Server) writeBudgetCallbackPage(w http.ResponseWriter, status int, v budgetCallbackView) {
	writeLinkPage(w, status, budgetCallbackTemplate, v)
}
