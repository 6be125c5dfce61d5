package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
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

// callback is POST /v1/callbacks/{token}, served without an API token:
// the token is the capability. It sends the token's signal with the body
// as its payload (none, a Decision, or any JSON), or, with
// ?decision=approve|reject and no body, {"approved": true|false}. The
// signal's dedup id is a hash of the token, so a token works once: a
// forged, expired or reused token is a 403 and writes nothing.
func (s *Server) callback(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	cb, err := sdk.ParseCallbackToken(s.cfg.CallbackSecret, token, time.Now())
	if err != nil {
		detail := "the callback link is not valid"
		if errors.Is(err, sdk.ErrCallbackExpired) {
			detail = "the callback link has expired"
		}
		s.writeProblem(w, r, problem(http.StatusForbidden, codeForbidden, detail))
		return
	}
	q := r.URL.Query()
	for k := range q {
		if k != "decision" {
			s.writeProblem(w, r, problem(http.StatusBadRequest, codeInvalidRequest, "unknown query parameter "+k+": a callback takes only decision=approve|reject"))
			return
		}
	}
	var body json.RawMessage
	if p := decodeBody(w, r, int64(s.cfg.MaxPayloadBytes)+envelopeBytes, &body, true); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	var payload json.RawMessage
	if t := bytes.TrimSpace(body); len(t) > 0 && !bytes.Equal(t, []byte("{}")) {
		payload = body
	}
	if q.Has("decision") {
		if payload != nil {
			s.writeProblem(w, r, problem(http.StatusBadRequest, codeInvalidRequest, "send a decision either as ?decision= or as the body, not both"))
			return
		}
		switch q.Get("decision") {
		case "approve":
			payload = json.RawMessage(`{"approved":true}`)
		case "reject":
			payload = json.RawMessage(`{"approved":false}`)
		default:
			s.writeProblem(w, r, problem(http.StatusBadRequest, codeInvalidRequest, "decision must be approve or reject"))
			return
		}
	}
	c, err := s.client(cb.Namespace)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := c.Signal(sdk.WithRequester(r.Context(), callbackSender), cb.TaskID, cb.Name, payload,
		sdk.SignalOpts{DedupID: sdk.CallbackDedupID(token), Sender: callbackSender})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if res.Duplicate {
		// The store found the token's dedup id in the history and wrote
		// nothing: the link was used already.
		s.writeProblem(w, r, problem(http.StatusForbidden, codeForbidden, "the callback link was used already"))
		return
	}
	writeJSON(w, http.StatusAccepted, signalResponse{TaskID: res.TaskID})
}
