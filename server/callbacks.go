package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// callbackSender is the sender recorded for a signal sent through a
// callback URL (and so a Decision's By when its payload does not say).
const callbackSender = "callback"

// CallbackURL returns the signed one-time URL that delivers the signal of
// cb: {base}{Config.Prefix}/v1/callbacks/{token}, base being the server's
// origin as its users reach it ("https://cairn.example.com"). Its token is
// [sdk.CallbackToken] under Config.CallbackSecret; a server without one
// returns an error marked [sdk.ErrInvalid].
func (s *Server) CallbackURL(base string, cb sdk.Callback) (string, error) {
	if len(s.cfg.CallbackSecret) == 0 {
		return "", errmark.Mark(errors.New("server: no Config.CallbackSecret to sign callback URLs with"), sdk.ErrInvalid)
	}
	token, err := sdk.CallbackToken(s.cfg.CallbackSecret, cb)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(base, "/") + s.path("/v1/callbacks/"+token), nil
}

// callbackBodyBytes bounds a callback's body: a decision, or a small
// JSON payload. It is the blob threshold, so a payload stays in its
// signal_received and a refused link writes no blob either.
const callbackBodyBytes = sdk.DefaultBlobThreshold

// callback is POST /v1/callbacks/{token}, served without an API token:
// the token is the capability. It sends the token's signal with the body
// as its payload (none, a Decision, or any JSON up to 64 KiB), or, with
// ?decision=approve|reject and no body, {"approved": true|false}, to the
// one receive the token names, and only while the task waits there. The
// signal's dedup id is a hash of the token, so a token works once. Each
// refusal writes nothing: a forged, malformed (any spelling but the
// canonical one) or expired token is a 403; a used one a 410
// callback_used; one whose wait has ended (answered another way, timed
// out, the task finished) a 410 wait_ended; one whose wait the task has
// not reached a 409 wait_not_reached; a payload the task's type does not
// take (its declared signals) a 404 or 422, as a signal's. From the link's
// page (callbackPage: an urlencoded form with ?decision= and an optional
// comment), or asked for text/html, it answers with a page.
func (s *Server) callback(w http.ResponseWriter, r *http.Request) {
	form, page := callbackForm(r)
	refuse := func(p *Problem) {
		if page {
			s.writeCallbackProblem(w, p)
		} else {
			s.writeProblem(w, r, p)
		}
	}
	token := r.PathValue("token")
	cb, p := s.parseCallback(token)
	if p != nil {
		refuse(p)
		return
	}
	q := r.URL.Query()
	for k := range q {
		if k != "decision" {
			refuse(web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "unknown query parameter "+k+": a callback takes only decision=approve|reject"))
			return
		}
	}
	var payload json.RawMessage
	if form {
		if payload, p = formDecision(w, r); p != nil {
			refuse(p)
			return
		}
	} else if payload, p = jsonDecision(w, r, q); p != nil {
		refuse(p)
		return
	}
	c, err := s.client(cb.Namespace)
	if err != nil {
		refuse(s.problemOf(r, err))
		return
	}
	res, err := c.Signal(sdk.WithRequester(r.Context(), callbackSender), cb.TaskID, cb.Name, payload,
		&sdk.SignalOpts{DedupID: sdk.CallbackDedupID(token), Sender: callbackSender, ForWait: &cb.Wait})
	switch {
	case errors.Is(err, sdk.ErrWaitEnded):
		refuse(web.NewProblem(http.StatusGone, web.CodeWaitEnded,
			"the wait this link answers has ended: it was answered another way, timed out, or the task finished"))
		return
	case errors.Is(err, sdk.ErrWaitNotReached):
		p := web.NewProblem(http.StatusConflict, web.CodeWaitNotReached, "the task does not wait for this decision yet; try again shortly")
		web.RetryAfter(p, time.Second)
		refuse(p)
		return
	case err != nil:
		if web.ProblemFor(err) == nil && r.Context().Err() != nil {
			return // the client went away: nobody to answer
		}
		refuse(s.problemOf(r, err))
		return
	case res.Duplicate:
		// The store found the token's dedup id in the history and wrote
		// nothing: the link was used already.
		refuse(web.NewProblem(http.StatusGone, web.CodeCallbackUsed, "the callback link was used already"))
		return
	}
	if page {
		decision := q.Get("decision")
		if decision == "" && form {
			decision = r.PostForm.Get("decision")
		}
		title := "Sent"
		switch decision {
		case "approve":
			title = "Approved"
		case "reject":
			title = "Rejected"
		}
		s.writeCallbackPage(w, http.StatusAccepted, callbackView{Title: title,
			Message: "Your decision was recorded; the task goes on with it. You may close this page.",
			TaskID:  cb.TaskID.String(), Name: cb.Name, Wait: cb.Wait})
		return
	}
	writeJSON(w, http.StatusAccepted, signalResponse{TaskID: res.TaskID})
}

// jsonDecision reads a callback's JSON body and ?decision=: the signal's
// payload, nil for none.
func jsonDecision(w http.ResponseWriter, r *http.Request, q url.Values) (json.RawMessage, *Problem) {
	var body json.RawMessage
	if p := decodeBody(w, r, callbackBodyBytes, &body, true); p != nil {
		return nil, p
	}
	var payload json.RawMessage
	if t := bytes.TrimSpace(body); len(t) > 0 && !bytes.Equal(t, []byte("{}")) {
		payload = body
	}
	if !q.Has("decision") {
		return payload, nil
	}
	if payload != nil {
		return nil, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "send a decision either as ?decision= or as the body, not both")
	}
	switch q.Get("decision") {
	case "approve":
		return json.RawMessage(`{"approved":true}`), nil
	case "reject":
		return json.RawMessage(`{"approved":false}`), nil
	}
	return nil, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "decision must be approve or reject")
}
