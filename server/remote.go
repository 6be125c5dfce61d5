package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// The remote step protocol (docs/remote-steps-protocol.md): workers in
// any language claim the remote steps of their queues, heartbeat them,
// and complete, fail or release each under its claim. A token with the
// role work may call these routes only, for its queues.

// Bounds of the protocol's requests.
const (
	// defaultRemoteWait is a claim's long poll when it names none.
	defaultRemoteWait = 20 * time.Second
	// remoteControlBytes bounds the body of a heartbeat, a release and a
	// claim; a failure's is remoteFailureBytes.
	remoteControlBytes = 64 << 10
	remoteFailureBytes = 64 << 10
	// remoteStreamBytes bounds the body of a stream call: 4 MiB, some
	// sixty chunks of the largest.
	remoteStreamBytes = 4 << 20
)

// remoteClaimRequest is the body of POST /v1/remote-steps/claim.
type remoteClaimRequest struct {
	Queue       string   `json:"queue"`
	Worker      string   `json:"worker"`
	Names       []string `json:"names,omitempty"`
	Max         int      `json:"max,omitempty"`
	WaitSeconds *int     `json:"wait_seconds,omitempty"`
}

// remoteStep is a claimed step as the protocol hands it out.
type remoteStep struct {
	Claim              string          `json:"claim"`
	TaskID             string          `json:"task_id"`
	Namespace          string          `json:"namespace"`
	Position           int             `json:"position"`
	Name               string          `json:"name"`
	Attempt            int             `json:"attempt"`
	Input              json.RawMessage `json:"input"`
	DispatchedAt       time.Time       `json:"dispatched_at"`
	LeaseExpiresAt     time.Time       `json:"lease_expires_at"`
	HeartbeatTimeoutMS int64           `json:"heartbeat_timeout_ms"`
	StartToCloseMS     int64           `json:"start_to_close_ms"`
}

type remoteClaimResponse struct {
	Steps []remoteStep `json:"steps"`
}

// claimRemote is POST /v1/remote-steps/claim: a long poll for up to max
// steps of a queue the token may work. Steps claimed for a client that
// has gone are released, so they do not wait out their lease.
func (s *Server) claimRemote(w http.ResponseWriter, r *http.Request, c *call) {
	var req remoteClaimRequest
	if p := decodeBody(w, r, remoteControlBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	wait := defaultRemoteWait
	if req.WaitSeconds != nil {
		if *req.WaitSeconds < 0 || time.Duration(*req.WaitSeconds)*time.Second > sdk.MaxRemoteClaimWait {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
				fmt.Sprintf("wait_seconds %d is outside 0..%d", *req.WaitSeconds, int(sdk.MaxRemoteClaimWait/time.Second))))
			return
		}
		wait = time.Duration(*req.WaitSeconds) * time.Second
	}
	if req.Queue == "" || !c.who.CanWork(req.Queue) {
		s.writeProblem(w, r, web.NewProblem(http.StatusForbidden, web.CodeForbidden, fmt.Sprintf("the token may not work queue %q", req.Queue)))
		return
	}
	if wait > 0 {
		if !s.holdLongPoll() {
			s.writeProblem(w, r, s.longPollsFull("try again shortly"))
			return
		}
		defer s.longPolls.Add(-1)
		s.extendWrite(w, wait)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.drained: // shutting down: answer now
			cancel()
		case <-ctx.Done():
		}
	}()
	claims, err := c.client.ClaimRemote(ctx, sdk.RemoteClaimOpts{Queue: req.Queue, Worker: req.Worker, Names: req.Names, Max: req.Max, Wait: wait})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := remoteClaimResponse{Steps: make([]remoteStep, len(claims))}
	for i, cl := range claims {
		resp.Steps[i] = remoteStep{
			Claim: cl.Claim, TaskID: cl.TaskID.String(), Namespace: cl.Namespace, Position: cl.Position, Name: cl.Name,
			Attempt: cl.Attempt, Input: cl.Input, DispatchedAt: cl.DispatchedAt, LeaseExpiresAt: cl.LeaseExpiresAt,
			HeartbeatTimeoutMS: cl.HeartbeatTimeout.Milliseconds(), StartToCloseMS: cl.StartToClose.Milliseconds(),
		}
		if len(resp.Steps[i].Input) == 0 {
			resp.Steps[i].Input = json.RawMessage("null")
		}
	}
	if r.Context().Err() != nil {
		s.releaseUnsent(c, claims) // the worker went while the claim was made
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// releaseUnsent hands back steps claimed for a worker that is gone.
func (s *Server) releaseUnsent(c *call, claims []sdk.RemoteClaim) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, cl := range claims {
		_ = c.client.ReleaseRemote(ctx, cl.Claim, nil)
	}
}

// remoteHeartbeatResponse answers a heartbeat.
type remoteHeartbeatResponse struct {
	LeaseExpiresAt  time.Time `json:"lease_expires_at"`
	CancelRequested bool      `json:"cancel_requested"`
}

// emptyRequest is the body of a heartbeat and a release: {} or none.
type emptyRequest struct{}

// heartbeatRemote is POST /v1/remote-steps/{claim}/heartbeat.
func (s *Server) heartbeatRemote(w http.ResponseWriter, r *http.Request, c *call) {
	if p := decodeBody(w, r, remoteControlBytes, &emptyRequest{}, true); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	renewal, err := c.client.HeartbeatRemote(r.Context(), r.PathValue("claim"), &sdk.RemoteCallOpts{Queues: c.who.WorkQueues()})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, remoteHeartbeatResponse{LeaseExpiresAt: renewal.LeaseExpiresAt, CancelRequested: renewal.CancelRequested})
}

// remoteCompleteRequest is the body of a completion.
type remoteCompleteRequest struct {
	Output     json.RawMessage `json:"output"`
	DurationMS int64           `json:"duration_ms,omitempty"`
}

type remoteOutcomeResponse struct {
	Status string `json:"status"`
}

// completeRemote is POST /v1/remote-steps/{claim}/complete.
func (s *Server) completeRemote(w http.ResponseWriter, r *http.Request, c *call) {
	var req remoteCompleteRequest
	if p := decodeBody(w, r, int64(s.cfg.MaxPayloadBytes)+web.EnvelopeBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	opts, ok := s.remoteCallOpts(w, r, c, req.DurationMS)
	if !ok {
		return
	}
	if err := c.client.CompleteRemote(r.Context(), r.PathValue("claim"), req.Output, opts); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, remoteOutcomeResponse{Status: "completed"})
}

// remoteStreamRequest is the body of a stream call.
type remoteStreamRequest struct {
	Chunks []remoteChunk `json:"chunks"`
}

type remoteChunk struct {
	Stream string          `json:"stream"`
	Data   json.RawMessage `json:"data"`
}

type remoteStreamResponse struct {
	Seq int64 `json:"seq"`
}

// streamRemote is POST /v1/remote-steps/{claim}/stream: chunks written to
// the task's streams under the claim.
func (s *Server) streamRemote(w http.ResponseWriter, r *http.Request, c *call) {
	var req remoteStreamRequest
	if p := decodeBody(w, r, remoteStreamBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	chunks := make([]sdk.RemoteChunk, len(req.Chunks))
	for i, ch := range req.Chunks {
		chunks[i] = sdk.RemoteChunk{Stream: ch.Stream, Data: ch.Data}
	}
	seq, err := c.client.StreamRemote(r.Context(), r.PathValue("claim"), chunks, &sdk.RemoteCallOpts{Queues: c.who.WorkQueues()})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, remoteStreamResponse{Seq: seq})
}

// remoteFailRequest is the body of a failure.
type remoteFailRequest struct {
	Error      remoteError `json:"error"`
	DurationMS int64       `json:"duration_ms,omitempty"`
}

// remoteError is a failure as a worker describes it.
type remoteError struct {
	Message      string            `json:"message"`
	Type         string            `json:"type,omitempty"`
	Class        string            `json:"class,omitempty"`
	Kind         string            `json:"kind,omitempty"`
	Status       int               `json:"status,omitempty"`
	Attributes   map[string]string `json:"attributes,omitempty"`
	RetryAfterMS int64             `json:"retry_after_ms,omitempty"`
}

// failRemote is POST /v1/remote-steps/{claim}/fail.
func (s *Server) failRemote(w http.ResponseWriter, r *http.Request, c *call) {
	var req remoteFailRequest
	if p := decodeBody(w, r, remoteFailureBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	opts, ok := s.remoteCallOpts(w, r, c, req.DurationMS)
	if !ok {
		return
	}
	e := req.Error
	f := sdk.RemoteFailure{Message: e.Message, Type: e.Type, Class: e.Class, Kind: e.Kind, Status: e.Status, Attributes: e.Attributes,
		RetryAfter: time.Duration(e.RetryAfterMS) * time.Millisecond}
	if err := c.client.FailRemote(r.Context(), r.PathValue("claim"), f, opts); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, remoteOutcomeResponse{Status: "failed"})
}

// releaseRemote is POST /v1/remote-steps/{claim}/release.
func (s *Server) releaseRemote(w http.ResponseWriter, r *http.Request, c *call) {
	if p := decodeBody(w, r, remoteControlBytes, &emptyRequest{}, true); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	if err := c.client.ReleaseRemote(r.Context(), r.PathValue("claim"), &sdk.RemoteCallOpts{Queues: c.who.WorkQueues()}); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, remoteOutcomeResponse{Status: "released"})
}

// remoteCallOpts are the options of an outcome reported by c, which ran
// durationMS.
func (s *Server) remoteCallOpts(w http.ResponseWriter, r *http.Request, c *call, durationMS int64) (*sdk.RemoteCallOpts, bool) {
	if durationMS < 0 || durationMS > int64(24*time.Hour/time.Millisecond) {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, fmt.Sprintf("duration_ms %d is outside 0..86400000", durationMS)))
		return nil, false
	}
	return &sdk.RemoteCallOpts{Queues: c.who.WorkQueues(), Ran: time.Duration(durationMS) * time.Millisecond}, true
}
