package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// remotePages hands a step per page to the queue ocr.
var remotePages = sdk.NewWorkflow("remote.pages", 1, func(ctx workflow.Context, pages []int) ([]string, error) {
	return workflow.MapRemote[int, string](ctx, "ocr.page", pages, &workflow.RemoteOpts{Queue: "ocr"})
}, nil)

// TestRemoteStepsOverHTTP: a worker token works its queues' remote steps
// over the protocol, and nothing else: it cannot start, read or signal
// tasks, nor claim, answer or hand back another queue's steps. An answer
// is idempotent under its claim and refused under a lost one.
func TestRemoteStepsOverHTTP(t *testing.T) {
	const adminToken, ocrToken, gpuToken = "admin-secret", "ocr-secret", "gpu-secret"
	tokens := []Token{
		{Name: "admin", SHA256: HashToken(adminToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleAdmin}},
		{Name: "ocr-workers", SHA256: HashToken(ocrToken), Namespaces: []string{"default"}, Roles: []Role{RoleWork}, Queues: []string{"ocr"}},
		{Name: "gpu-workers", SHA256: HashToken(gpuToken), Namespaces: []string{"default"}, Roles: []Role{RoleWork}, Queues: []string{"gpu"}},
	}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h := testServer(t, st.Store, tokens...)
			as := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st.Store, PollInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			sdk.Register(w, remotePages)
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })

			start := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"remote.pages","input":[4,5]}`), as(adminToken)...)
			require.Equal(t, http.StatusAccepted, start.Status, "%s", start.Body)
			var started startResponse
			require.NoError(t, json.Unmarshal(start.Body, &started))

			// A worker token does nothing but its queues' steps.
			for _, r := range []struct{ method, target, body string }{
				{"POST", "/v1/tasks", `{"type":"remote.pages","input":[1]}`},
				{"GET", "/v1/tasks/" + started.ID.String(), ""},
				{"GET", "/v1/tasks/" + started.ID.String() + "/history", ""},
				{"POST", "/v1/tasks/" + started.ID.String() + "/signals/go", `{}`},
				{"POST", "/v1/tasks/" + started.ID.String() + "/cancel", `{}`},
			} {
				var body []byte
				if r.body != "" {
					body = []byte(r.body)
				}
				res := servertest.Send(t, h, r.method, r.target, body, as(ocrToken)...)
				require.Equal(t, http.StatusForbidden, res.Status, "%s %s: %s", r.method, r.target, res.Body)
			}
			res := servertest.Send(t, h, "POST", "/v1/remote-steps/claim", []byte(`{"queue":"ocr","worker":"gpu-1","wait_seconds":0}`), as(gpuToken)...)
			require.Equal(t, http.StatusForbidden, res.Status, "another queue's steps: %s", res.Body)
			require.Equal(t, "forbidden", res.Problem.Code)

			var steps []remoteStep
			for len(steps) < 2 {
				res := servertest.Send(t, h, "POST", "/v1/remote-steps/claim",
					[]byte(`{"queue":"ocr","worker":"py-1","names":["ocr.page"],"max":2,"wait_seconds":5}`), as(ocrToken)...)
				require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
				var claimed remoteClaimResponse
				require.NoError(t, json.Unmarshal(res.Body, &claimed))
				steps = append(steps, claimed.Steps...)
			}
			for _, s := range steps {
				require.Equal(t, started.ID.String(), s.TaskID)
				require.Equal(t, "ocr.page", s.Name)
				require.Equal(t, 1, s.Attempt)
				require.Equal(t, int64(30_000), s.HeartbeatTimeoutMS)
			}
			claim := func(s remoteStep, verb string) string {
				return "/v1/remote-steps/" + url.PathEscape(s.Claim) + "/" + verb
			}
			// Another queue's token cannot answer, beat, stream or hand
			// back these.
			for _, verb := range []string{"heartbeat", "complete", "release", "stream"} {
				body := []byte(`{}`)
				if verb == "stream" {
					body = []byte(`{"chunks":[{"stream":"tokens","data":"x"}]}`)
				}
				res := servertest.Send(t, h, "POST", claim(steps[0], verb), body, as(gpuToken)...)
				require.Equal(t, http.StatusConflict, res.Status, "%s: %s", verb, res.Body)
				require.Equal(t, "claim_lost", res.Problem.Code)
			}
			beat := servertest.Send(t, h, "POST", claim(steps[0], "heartbeat"), []byte(`{}`), as(ocrToken)...)
			require.Equal(t, http.StatusOK, beat.Status, "%s", beat.Body)
			var renewal remoteHeartbeatResponse
			require.NoError(t, json.Unmarshal(beat.Body, &renewal))
			require.False(t, renewal.CancelRequested)

			// Stream chunks under the claim: written in order, each call's
			// bad chunk refused whole.
			streamed := servertest.Send(t, h, "POST", claim(steps[0], "stream"),
				[]byte(`{"chunks":[{"stream":"tokens","data":"te"},{"stream":"tokens","data":"xt"},{"stream":"progress","data":{"done":1}}]}`), as(ocrToken)...)
			require.Equal(t, http.StatusOK, streamed.Status, "%s", streamed.Body)
			require.JSONEq(t, `{"seq":3}`, string(streamed.Body))
			big := `"` + strings.Repeat("x", 64<<10) + `"`
			for body, status := range map[string]int{
				`{"chunks":[]}`: http.StatusBadRequest,
				`{"chunks":[{"stream":"two words","data":1}]}`:                                http.StatusBadRequest,
				`{"chunks":[{"stream":"tokens"}]}`:                                            http.StatusBadRequest,
				`{"chunks":[{"stream":"tokens","data":1}],"extra":true}`:                      http.StatusBadRequest,
				`{"chunks":[{"stream":"tokens","data":1},{"stream":"t","data":` + big + `}]}`: http.StatusRequestEntityTooLarge,
			} {
				res := servertest.Send(t, h, "POST", claim(steps[0], "stream"), []byte(body), as(ocrToken)...)
				require.Equal(t, status, res.Status, "%.80s: %s", body, res.Body)
			}

			for _, s := range steps {
				var page int
				require.NoError(t, json.Unmarshal(s.Input, &page))
				body := []byte(fmt.Sprintf(`{"output":"text of page %d","duration_ms":12}`, page))
				for range 2 { // the second answers 200 and records nothing
					res := servertest.Send(t, h, "POST", claim(s, "complete"), body, as(ocrToken)...)
					require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
				}
			}
			late := servertest.Send(t, h, "POST", claim(steps[0], "fail"), []byte(`{"error":{"message":"late"}}`), as(ocrToken)...)
			require.Equal(t, http.StatusConflict, late.Status, "%s", late.Body)
			require.Equal(t, "claim_lost", late.Problem.Code)
			bad := servertest.Send(t, h, "POST", "/v1/remote-steps/not-a-claim/complete", []byte(`{"output":1}`), as(ocrToken)...)
			require.Equal(t, http.StatusBadRequest, bad.Status, "%s", bad.Body)

			wait := servertest.Send(t, h, "GET", "/v1/tasks/"+started.ID.String()+"/wait?timeout=20s", nil, as(adminToken)...)
			require.Equal(t, http.StatusOK, wait.Status, "%s", wait.Body)
			var info struct {
				Status history.Status  `json:"status"`
				Output json.RawMessage `json:"output"`
			}
			require.NoError(t, json.Unmarshal(wait.Body, &info))
			require.Equal(t, history.StatusCompleted, info.Status)
			require.JSONEq(t, `["text of page 4","text of page 5"]`, string(info.Output))
			// The completion closed the claim's streams, recorded with it.
			hist := servertest.Send(t, h, "GET", "/v1/tasks/"+started.ID.String()+"/history", nil, as(adminToken)...)
			require.Equal(t, http.StatusOK, hist.Status)
			require.Contains(t, string(hist.Body), `"streams":[{"name":"tokens","position":`+strconv.Itoa(steps[0].Position)+`,"chunks":2,"bytes":8,`)
			require.Contains(t, string(hist.Body), `{"name":"progress","position":`+strconv.Itoa(steps[0].Position)+`,"chunks":1,"bytes":10,`)
		})
	}
}

// TestRemoteTokensAreChecked: the role work needs its queues, and
// queues need the role.
func TestRemoteTokensAreChecked(t *testing.T) {
	hash := HashToken("x")
	require.ErrorContains(t, ValidateTokens([]Token{{Name: "w", SHA256: hash, Namespaces: []string{"default"}, Roles: []Role{RoleWork}}}),
		"needs the queues")
	require.ErrorContains(t, ValidateTokens([]Token{{Name: "r", SHA256: hash, Namespaces: []string{"default"}, Roles: []Role{RoleRead},
		Queues: []string{"ocr"}}}), "queues are for the role work")
	require.NoError(t, ValidateTokens([]Token{{Name: "w", SHA256: hash, Namespaces: []string{"default"}, Roles: []Role{RoleWork},
		Queues: []string{"ocr", "gpu"}}}))
}
