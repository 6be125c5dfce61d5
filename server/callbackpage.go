package server

import (
	"encoding/json"
	"html/template"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// A callback link pasted into a chat is opened in a browser: GET
// /v1/callbacks/{token} is a page saying what is being decided, for which
// task, until when, with Approve and Reject buttons whose form posts the
// decision to the same URL (?decision=approve|reject, and an optional
// comment). The GET writes nothing: chat apps fetch links to unfurl them.
// A POST from that form (urlencoded, or asking for text/html) is answered
// with a page too; any other POST with JSON, as before.

// callbackPageCSP is the page's content security policy: nothing loaded,
// its one inline style sheet, forms posted only to the server itself.
const callbackPageCSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// maxCallbackComment bounds a decision's comment from the page's form, in
// characters (the form's maxlength).
const maxCallbackComment = 2000

// callbackView is what the page shows.
type callbackView struct {
	Title   string
	Message string // why there is nothing to decide (not Open)
	Open    bool   // the form is shown
	Done    bool   // a decision was just recorded
	TaskID  string
	Type    string
	Version int
	Name    string
	Wait    int
	Until   string // the receive's deadline, or ""
	Expires string // the link's expiry
	Comment int    // maxCallbackComment
}

// callbackFrame is what every callback link's page shares (a decision's,
// a budget raise's): the head, the style, the title and message; a page
// adds its own "style" rules and "body" to a clone of it.
var callbackFrame = template.Must(template.New("frame").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<meta name="referrer" content="no-referrer">
<title>{{.Title}} · cairn</title>
<style>
body { font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f6f6f4; color: #222; }
main { max-width: 36rem; margin: 3rem auto; padding: 1.5rem 2rem; background: #fff; border: 1px solid #ddd; border-radius: 8px; }
h1 { font-size: 1.4rem; margin-top: 0; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
dt { color: #666; } dd { margin: 0; word-break: break-all; }
textarea { width: 100%; box-sizing: border-box; min-height: 4rem; font: inherit; }
.note { color: #666; font-size: .9rem; }
{{template "style" .}}
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
{{if .Message}}<p>{{.Message}}</p>{{end}}
{{template "body" .}}
</main>
</body>
</html>
`))

// callbackPageTemplate is callbackFrame with a page's style and body.
func callbackPageTemplate(style, body string) *template.Template {
	t := template.Must(callbackFrame.Clone())
	template.Must(t.New("style").Parse(style))
	template.Must(t.New("body").Parse(body))
	return t.Lookup("frame")
}

var callbackTemplate = callbackPageTemplate(`.buttons { display: flex; gap: 1rem; margin-top: 1rem; }
button { font: inherit; padding: .5rem 1.5rem; border-radius: 6px; border: 1px solid #888; cursor: pointer; }
button.approve { background: #1f7a3a; color: #fff; border-color: #1f7a3a; }
button.reject { background: #a32020; color: #fff; border-color: #a32020; }`, `{{if .TaskID}}<dl>
<dt>Decision</dt><dd><strong>{{.Name}}</strong> (receive {{.Wait}})</dd>
<dt>Task</dt><dd><code>{{.TaskID}}</code></dd>
{{if .Type}}<dt>Type</dt><dd>{{.Type}}@{{.Version}}</dd>{{end}}
{{if .Until}}<dt>Waits until</dt><dd>{{.Until}}</dd>{{end}}
{{if .Expires}}<dt>Link valid until</dt><dd>{{.Expires}}</dd>{{end}}
</dl>{{end}}
{{if .Open}}<form method="post">
<label for="comment">Comment (optional)</label>
<textarea id="comment" name="comment" maxlength="{{.Comment}}"></textarea>
<div class="buttons">
<button type="submit" class="approve" formaction="?decision=approve">Approve</button>
<button type="submit" class="reject" formaction="?decision=reject">Reject</button>
</div>
</form>
<p class="note">The link works once: the first decision sent through it counts.</p>{{end}}`)

// writeCallbackPage answers with the page of v, with status.
func (s *Server) writeCallbackPage(w http.ResponseWriter, status int, v callbackView) {
	v.Comment = maxCallbackComment
	writeLinkPage(w, status, callbackTemplate, v)
}

// writeLinkPage answers with a callback link's page: t executed with v,
// under the headers every such page has (nothing loaded from elsewhere,
// not cached, not indexed).
func writeLinkPage(w http.ResponseWriter, status int, t *template.Template, v any) {
	h := w.Header()
	h.Set("Content-Security-Policy", callbackPageCSP)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Robots-Tag", "noindex, nofollow")
	w.WriteHeader(status)
	_ = t.Execute(w, v)
}

// writeCallbackProblem answers a refused callback with a page saying why,
// with the problem's status (and Retry-After).
func (s *Server) writeCallbackProblem(w http.ResponseWriter, p *Problem) {
	if p.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfterSeconds))
	}
	title := p.Title
	if title == "" {
		title = "The request was refused"
	}
	s.writeCallbackPage(w, p.Status, callbackView{Title: title, Message: p.Detail})
}

// callbackPage is GET /v1/callbacks/{token}: the page of a callback link.
// It reads the link's wait and writes nothing. The statuses are a POST's:
// 200 while the task waits there; 403 for a forged, malformed or expired
// link; 404 for a task that is gone; 410 for a link used or a wait that
// ended; 409 (with Retry-After) for a wait not reached yet.
func (s *Server) callbackPage(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	cb, p := s.parseCallback(token)
	if p != nil {
		s.writeCallbackProblem(w, p)
		return
	}
	c, err := s.client(cb.Namespace)
	if err != nil {
		s.writeCallbackProblem(w, s.problemOf(r, err))
		return
	}
	at, err := c.CallbackWait(r.Context(), cb, token)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		s.writeCallbackProblem(w, s.problemOf(r, err))
		return
	}
	v := callbackView{TaskID: cb.TaskID.String(), Type: at.TaskType, Version: at.TypeVersion, Name: cb.Name, Wait: cb.Wait,
		Expires: pageTime(cb.Expires)}
	status := http.StatusOK
	switch at.State {
	case sdk.CallbackOpen:
		v.Title, v.Open = "Decide: "+cb.Name, true
		if !at.Deadline.IsZero() {
			v.Until = pageTime(at.Deadline)
		}
	case sdk.CallbackUsed:
		status, v.Title, v.Message = http.StatusGone, "This link was used already", "A decision was sent through it; it works once."
	case sdk.CallbackEnded:
		status, v.Title = http.StatusGone, "There is nothing left to decide"
		v.Message = "The wait this link answers has ended: it was answered another way, timed out, or the task finished (" + string(at.Status) + ")."
	default:
		w.Header().Set("Retry-After", "1")
		status, v.Title = http.StatusConflict, "Not waiting for this decision yet"
		v.Message = "The task has not reached the wait this link answers. Reload this page shortly."
	}
	s.writeCallbackPage(w, status, v)
}

// pageTime is t as the page shows it.
func pageTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// parseCallback checks a callback token: a forged, malformed or expired
// one is a 403.
func (s *Server) parseCallback(token string) (sdk.Callback, *Problem) {
	cb, err := sdk.ParseCallbackToken(s.cfg.CallbackSecret, token, time.Now())
	if err == nil {
		return cb, nil
	}
	detail := "the callback link is not valid"
	if errors.Is(err, sdk.ErrCallbackExpired) {
		detail = "the callback link has expired"
	}
	return sdk.Callback{}, web.NewProblem(http.StatusForbidden, web.CodeForbidden, detail)
}

// callbackForm reports whether a callback POST came from the page's form
// (urlencoded), or asks for a page rather than JSON.
func callbackForm(r *http.Request) (form, page bool) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	form = mt == "application/x-www-form-urlencoded"
	return form, form || acceptsHTML(r.Header.Get("Accept"))
}

// acceptsHTML reports whether an Accept header names text/html.
func acceptsHTML(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		if mt == "text/html" {
			return true
		}
	}
	return false
}

// formDecision reads the page form's decision: ?decision= (or the field
// decision) and an optional comment, as a Decision payload.
func formDecision(w http.ResponseWriter, r *http.Request) (json.RawMessage, *Problem) {
	r.Body = http.MaxBytesReader(w, r.Body, callbackBodyBytes)
	if err := r.ParseForm(); err != nil {
		return nil, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "the form could not be read")
	}
	for k := range r.PostForm {
		if k != "comment" && k != "decision" {
			return nil, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "unknown form field "+k+": the page sends decision and comment")
		}
	}
	decision := r.Form.Get("decision") // the query's first
	var d struct {
		Approved bool   `json:"approved"`
		Comment  string `json:"comment,omitempty"`
	}
	switch decision {
	case "approve":
		d.Approved = true
	case "reject":
	default:
		return nil, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "decision must be approve or reject")
	}
	d.Comment = strings.TrimSpace(r.PostForm.Get("comment"))
	if !utf8.ValidString(d.Comment) || utf8.RuneCountInString(d.Comment) > maxCallbackComment || strings.ContainsRune(d.Comment, 0) {
		return nil, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "the comment must be text of at most 2000 characters")
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "the decision could not be encoded")
	}
	return raw, nil
}
