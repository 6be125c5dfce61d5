package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// queryRequest is the body of POST /v1/tasks/{id}/queries/{name}: the
// query's arguments.
type queryRequest struct {
	Args json.RawMessage `json:"args,omitempty"`
}

// queryResponse answers a query.
type queryResponse struct {
	Answer json.RawMessage `json:"answer"`
}

// queryTask is GET /v1/tasks/{id}/queries/{name} (arguments in ?args=, as
// JSON) and POST (arguments in the body's "args"): the task's workflow
// answers the query by replay (sdk.Client.Query).
func (s *Server) queryTask(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	var args json.RawMessage
	if r.Method == http.MethodPost {
		var req queryRequest
		if p := decodeBody(w, r, sdk.MaxQueryArgsBytes+web.EnvelopeBytes, &req, true); p != nil {
			s.writeProblem(w, r, p)
			return
		}
		args = req.Args
	} else if q := r.URL.Query(); q.Has("args") {
		raw := q.Get("args")
		if len(raw) > sdk.MaxQueryArgsBytes {
			p := web.NewProblem(http.StatusRequestEntityTooLarge, web.CodePayloadTooLarge, "the query's arguments are "+
				strconv.Itoa(len(raw))+" bytes, over the bound of "+strconv.Itoa(sdk.MaxQueryArgsBytes))
			p.SizeBytes, p.LimitBytes = int64(len(raw)), sdk.MaxQueryArgsBytes
			s.writeProblem(w, r, p)
			return
		}
		if !json.Valid([]byte(raw)) {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "the query's args parameter is not JSON"))
			return
		}
		args = json.RawMessage(raw)
	}
	if len(args) == 0 || string(args) == "null" {
		args = nil
	}
	var answer json.RawMessage
	if err := c.client.Query(r.Context(), id, r.PathValue("name"), args, &answer); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, queryResponse{Answer: answer})
}
