package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

var testCallbackSecret = []byte("server-test-callback-secret-0123")

// approvalBundle is a server with a callback secret, a worker running
// the "callback.approval" workflow (one AwaitApproval of "approve") and a
// client.
type approvalBundle struct {
	srv    *Server
	h      http.Handler
	client *sdk.Client
	wf     *sdk.Workflow[struct{}, workflow.Decision]
}

func approvalSetup(t *testing.T, st store.Store) *approvalBundle {
	t.Helper()
	return approvalSetupWith(t, st, sdk.NewWorkflow("callback.approval", 1, func(ctx workflow.Context, _ struct{}) (workflow.Decision, error) {
		d, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		return d, err
	}, nil))
}

// approvalSetupWith is approvalSetup running wf.
func approvalSetupWith(t *testing.T, st store.Store, wf *sdk.Workflow[struct{}, workflow.Decision]) *approvalBundle {
	t.Helper()
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Concurrency: 2, PollInterval: 20 * time.Millisecond, RescueInterval: -1})
	require.NoError(t, err)
	sdk.Register(w, wf)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, w.StopAndCancel(context.Background())) })
	client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	srv, err := New(Config{Store: st, CallbackSecret: testCallbackSecret})
	require.NoError(t, err)
	return &approvalBundle{srv: srv, h: srv.Handler(), client: client, wf: wf}
}

// startWaiting starts the workflow and returns its id and the position of
// the wait it is in.
func (b *approvalBundle) startWaiting(t *testing.T) (uuid.UUID, int) {
	t.Helper()
	run, err := sdk.Start(context.Background(), b.client, b.wf, struct{}{}, nil)
	require.NoError(t, err)
	return run.ID, b.waitNumber(t, run.ID, 1)
}

// waitNumber waits until task id has started its nth wait and returns the
// wait's position.
func (b *approvalBundle) waitNumber(t *testing.T, id uuid.UUID, n int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := b.client.History(context.Background(), id)
		require.NoError(t, err)
		seen := 0
		for _, e := range events {
			if w, ok := e.Data.(history.WaitStartedData); ok {
				if seen++; seen == n {
					return w.Position
				}
			}
		}
		require.False(t, time.Now().After(deadline), "task %s never started wait %d", id, n)
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *approvalBundle) url(t *testing.T, cb sdk.Callback) string {
	t.Helper()
	u, err := b.srv.CallbackURL("http://localhost:7233/", cb)
	require.NoError(t, err)
	path, ok := strings.CutPrefix(u, "http://localhost:7233")
	require.True(t, ok, u)
	return path
}

// decisionOf waits for the task and returns its output.
func decisionOf(t *testing.T, c *sdk.Client, id uuid.UUID) workflow.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
	var d workflow.Decision
	require.NoError(t, json.Unmarshal(info.Output, &d))
	return d
}

func TestCallbackDeliversADecisionOnce(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetup(t, ns.Store)
			id, pos := b.startWaiting(t)
			cb := sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: time.Now().Add(time.Hour)}
			target := b.url(t, cb)
			token := strings.TrimPrefix(target, "/v1/callbacks/")

			// Refused links write nothing.
			forged, err := sdk.CallbackToken([]byte("not the server's secret, 16+ bytes"), cb)
			require.NoError(t, err)
			expired := cb
			expired.Expires = time.Now().Add(-time.Minute)
			raw, err := base64.RawURLEncoding.DecodeString(token)
			require.NoError(t, err)
			raw[len(raw)-1] ^= 1 // the MAC's last byte
			badMAC := base64.RawURLEncoding.EncodeToString(raw)
			raw[len(raw)-1] ^= 1
			raw[9] ^= 1 // the task id's first byte
			otherTask := base64.RawURLEncoding.EncodeToString(raw)
			before := servertest.EventCount(t, ns.Store, id)
			for name, path := range map[string]string{
				"wrong secret": "/v1/callbacks/" + forged,
				"bad MAC":      "/v1/callbacks/" + badMAC,
				"tampered":     "/v1/callbacks/" + otherTask,
				"expired":      b.url(t, expired),
				"malformed":    "/v1/callbacks/not-a-token",
				"empty-ish":    "/v1/callbacks/AAAA",
			} {
				a := servertest.Send(t, b.h, "POST", path, []byte(`{"approved":true}`))
				require.Equal(t, http.StatusForbidden, a.Status, "%s: %s", name, a.Body)
				require.Equal(t, web.CodeForbidden, a.Problem.Code, name)
			}
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id), "refused links write nothing")

			a := servertest.Send(t, b.h, "POST", target, []byte(`{"approved":true,"comment":"ship it"}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			var res signalResponse
			require.NoError(t, json.Unmarshal(a.Body, &res))
			require.Equal(t, signalResponse{TaskID: id}, res)
			require.Equal(t, workflow.Decision{Approved: true, Comment: "ship it", By: "callback"}, decisionOf(t, b.client, id))

			// A second use, after the task finished: 410, nothing written.
			after := servertest.EventCount(t, ns.Store, id)
			for _, body := range []string{`{"approved":true,"comment":"ship it"}`, `{"approved":false}`} {
				a = servertest.Send(t, b.h, "POST", target, []byte(body))
				require.Equal(t, http.StatusGone, a.Status, "%s", a.Body)
				require.Equal(t, web.CodeCallbackUsed, a.Problem.Code)
			}
			require.Equal(t, after, servertest.EventCount(t, ns.Store, id), "a reused link writes nothing")
			sigs := servertest.SignalsOf(t, ns.Store, id)
			require.Len(t, sigs, 1)
			require.Equal(t, sdk.CallbackDedupID(token), sigs[0].DedupID)
			require.Equal(t, "callback", sigs[0].Sender)
			enginetest.RequireProjectionsMatch(t, ns.Store)
		})
	}
}

// A used link stays used while its task goes on: sent again while the task
// waits for a second approval of the same name, it is a 410 and writes
// nothing, where a signal would have answered that wait.
func TestCallbackReusedWhileTheTaskWaitsAgainIsRefused(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetupWith(t, ns.Store, sdk.NewWorkflow("callback.twice", 1, func(ctx workflow.Context, _ struct{}) (workflow.Decision, error) {
				first, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
				if err != nil {
					return workflow.Decision{}, err
				}
				second, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
				if err != nil {
					return workflow.Decision{}, err
				}
				return workflow.Decision{Approved: first.Approved && second.Approved, Comment: first.Comment + "+" + second.Comment}, nil
			}, nil))
			id, pos := b.startWaiting(t)
			first := b.url(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: time.Now().Add(time.Hour)})
			a := servertest.Send(t, b.h, "POST", first, []byte(`{"approved":true,"comment":"legal"}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)

			pos2 := b.waitNumber(t, id, 2)
			require.Greater(t, pos2, pos)
			before := servertest.EventCount(t, ns.Store, id)
			a = servertest.Send(t, b.h, "POST", first, []byte(`{"approved":true,"comment":"legal"}`))
			require.Equal(t, http.StatusGone, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeCallbackUsed, a.Problem.Code)
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id), "a reused link writes nothing")

			second := b.url(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos2, Expires: time.Now().Add(time.Hour)})
			a = servertest.Send(t, b.h, "POST", second, []byte(`{"approved":true,"comment":"finance"}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			require.Equal(t, workflow.Decision{Approved: true, Comment: "legal+finance"}, decisionOf(t, b.client, id))
			events, err := store.TaskEvents(context.Background(), ns.Store, "", id)
			require.NoError(t, err)
			var sigs int
			for _, e := range events {
				if _, ok := e.Data.(history.SignalReceivedData); ok {
					sigs++
				}
			}
			require.Equal(t, 2, sigs, "one signal per link")
			enginetest.RequireProjectionsMatch(t, ns.Store)
		})
	}
}

func TestCallbackDecisionQuery(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetup(t, ns.Store)
			id, pos := b.startWaiting(t)
			target := b.url(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: time.Now().Add(time.Hour)})
			before := servertest.EventCount(t, ns.Store, id)
			for _, c := range []struct{ query, body string }{
				{"?decision=maybe", `{}`},
				{"?decision=reject", `{"approved":true}`},
				{"?other=1", `{}`},
			} {
				a := servertest.Send(t, b.h, "POST", target+c.query, []byte(c.body))
				require.Equal(t, http.StatusBadRequest, a.Status, "%s %s: %s", c.query, c.body, a.Body)
			}
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id))
			a := servertest.Send(t, b.h, "POST", target+"?decision=reject", []byte(`{}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			require.Equal(t, workflow.Decision{Approved: false, By: "callback"}, decisionOf(t, b.client, id))
		})
	}
}

func TestCallbackWithoutASecretIsNotFound(t *testing.T) {
	t.Parallel()
	st := enginetest.Store(t)
	token, err := sdk.CallbackToken(testCallbackSecret, sdk.Callback{Namespace: "default", TaskID: uuid.New(), Name: "approve", Expires: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	a := servertest.Send(t, testServer(t, st), "POST", "/v1/callbacks/"+token, []byte(`{"approved":true}`))
	require.Equal(t, http.StatusNotFound, a.Status, "%s", a.Body)
	require.Equal(t, web.CodeNotFound, a.Problem.Code)

	srv, err := New(Config{Store: st})
	require.NoError(t, err)
	_, err = srv.CallbackURL("http://x", sdk.Callback{Namespace: "default", TaskID: uuid.New(), Name: "approve", Expires: time.Now().Add(time.Hour)})
	require.ErrorIs(t, err, sdk.ErrInvalid)
	_, err = New(Config{Store: st, CallbackSecret: []byte("short")})
	require.Error(t, err)
}

func TestCallbackNeedsNoAPIToken(t *testing.T) {
	t.Parallel()
	st := enginetest.Store(t)
	b := approvalSetup(t, st)
	tokens := []Token{{Name: "reader", SHA256: HashToken("read"), Namespaces: []string{"default"}, Roles: []Role{RoleRead}}}
	srv, err := New(Config{Store: st, Tokens: tokens, CallbackSecret: testCallbackSecret})
	require.NoError(t, err)
	id, pos := b.startWaiting(t)
	u, err := srv.CallbackURL("https://cairn.example", sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	a := servertest.Send(t, srv.Handler(), "POST", strings.TrimPrefix(u, "https://cairn.example"), []byte(`{"approved":true,"by":"carol"}`))
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	require.Equal(t, workflow.Decision{Approved: true, By: "callback"}, decisionOf(t, b.client, id),
		"a link's decision is the link's, whatever its payload claims")
}

// Probe finding: Decision.By was whatever the payload said, not who sent
// it. A decision sent through the API is by the token that sent it
// (api:<name>), one from the console's form by console:<name>, whatever
// the payload claims.
func TestDecisionIsByItsAuthenticatedSender(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetupWith(t, ns.Store, sdk.NewWorkflow("callback.by", 1, func(ctx workflow.Context, _ struct{}) (workflow.Decision, error) {
				var by []string
				for range 2 {
					d, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
					if err != nil {
						return workflow.Decision{}, err
					}
					by = append(by, d.By)
				}
				return workflow.Decision{Approved: true, Comment: strings.Join(by, ",")}, nil
			}, nil))
			tokens := []Token{{Name: "clerk", SHA256: HashToken("clerk-token"), Namespaces: []string{"*"}, Roles: []Role{RoleOperate}}}
			srv, err := New(Config{Store: ns.Store, Tokens: tokens})
			require.NoError(t, err)
			h := srv.Handler()
			id, _ := b.startWaiting(t)
			a := servertest.Send(t, h, "POST", "/v1/tasks/"+id.String()+"/signals/approve",
				[]byte(`{"payload":{"approved":true,"comment":"api","by":"the-ceo"}}`), "Authorization", "Bearer clerk-token")
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			b.waitNumber(t, id, 2)
			w := servertest.PostConsole(t, h, "/console/tasks/"+id.String()+"/signals/approve", "application/x-www-form-urlencoded",
				strings.NewReader(url.Values{"approved": {"true"}, "comment": {"console"}, "by": {"the-ceo"}}.Encode()), "clerk-token")
			require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
			require.Equal(t, "api:clerk,console:clerk", decisionOf(t, b.client, id).Comment, "the decisions' By")
		})
	}
}

// twoApprovals is a workflow waiting twice for the approval "approve",
// as a first-level approver and then a supervisor would decide.
func twoApprovals(name string) *sdk.Workflow[struct{}, workflow.Decision] {
	return sdk.NewWorkflow(name, 1, func(ctx workflow.Context, _ struct{}) (workflow.Decision, error) {
		first, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		if err != nil {
			return workflow.Decision{}, err
		}
		second, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		if err != nil {
			return workflow.Decision{}, err
		}
		return workflow.Decision{Approved: first.Approved && second.Approved, Comment: first.Comment + "+" + second.Comment}, nil
	}, nil)
}

// Probe finding F1: a used link, spelled otherwise (a line break inside,
// "%0A" in the URL, or its last character's unused bits changed), was a
// new signal that answered the task's next wait of the name. Every other
// spelling is now refused as not valid (403), and writes nothing.
func TestCallbackUsedLinkSpelledOtherwiseIsRefused(t *testing.T) {
	t.Parallel()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetupWith(t, ns.Store, twoApprovals("callback.respelled"))
			id, pos := b.startWaiting(t)
			link := b.url(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: time.Now().Add(time.Hour)})
			a := servertest.Send(t, b.h, "POST", link+"?decision=approve", nil, "Content-Type", "application/json")
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			b.waitNumber(t, id, 2)

			tok := strings.TrimPrefix(link, "/v1/callbacks/")
			raw, err := base64.RawURLEncoding.DecodeString(tok)
			require.NoError(t, err)
			require.NotZero(t, len(raw)%3, "the token ends in a character with unused bits")
			last := strings.IndexByte(alphabet, tok[len(tok)-1])
			before := servertest.EventCount(t, ns.Store, id)
			for name, path := range map[string]string{
				"%0A inside (the probe's request)": "/v1/callbacks/" + tok[:10] + "%0A" + tok[10:],
				"%0D%0A at the end":                "/v1/callbacks/" + tok + "%0D%0A",
				"last character's bits changed":    "/v1/callbacks/" + tok[:len(tok)-1] + string(alphabet[last^1]),
			} {
				a := servertest.Send(t, b.h, "POST", path+"?decision=reject", nil, "Content-Type", "application/json")
				require.Equal(t, http.StatusForbidden, a.Status, "%s: %s", name, a.Body)
				require.Equal(t, web.CodeForbidden, a.Problem.Code, name)
			}
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id), "no spelling of a used link writes anything")
			require.Len(t, servertest.SignalsOf(t, ns.Store, id), 1)
		})
	}
}

// Probe finding F2: a link names the receive it answers. An unused link
// of the first wait, once that wait was answered another way (a signal
// through the API), does not answer the second wait of the same name: it
// is 410 Gone and writes nothing. A link of a wait the task has not
// reached is 409, and works once the task waits there.
func TestCallbackAnswersOnlyItsOwnWait(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetupWith(t, ns.Store, twoApprovals("callback.ownwait"))
			id, pos := b.startWaiting(t)
			first := b.url(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: time.Now().Add(time.Hour)})
			early := b.url(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos + 1, Expires: time.Now().Add(time.Hour)})

			before := servertest.EventCount(t, ns.Store, id)
			a := servertest.Send(t, b.h, "POST", early+"?decision=approve", nil, "Content-Type", "application/json")
			require.Equal(t, http.StatusConflict, a.Status, "a link of a wait not reached: %s", a.Body)
			require.Equal(t, web.CodeWaitNotReached, a.Problem.Code)
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id))

			_, err := b.client.Signal(context.Background(), id, "approve", workflow.Decision{Approved: true, Comment: "legal"}, nil)
			require.NoError(t, err)
			pos2 := b.waitNumber(t, id, 2)
			require.Equal(t, pos+1, pos2)

			before = servertest.EventCount(t, ns.Store, id)
			a = servertest.Send(t, b.h, "POST", first+"?decision=reject", nil, "Content-Type", "application/json")
			require.Equal(t, http.StatusGone, a.Status, "the first wait's link after it was answered: %s", a.Body)
			require.Equal(t, web.CodeWaitEnded, a.Problem.Code)
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id), "nothing written")
			require.Len(t, servertest.SignalsOf(t, ns.Store, id), 1)

			a = servertest.Send(t, b.h, "POST", early, []byte(`{"approved":true,"comment":"supervisor"}`))
			require.Equal(t, http.StatusAccepted, a.Status, "the second wait's link, now: %s", a.Body)
			require.Equal(t, workflow.Decision{Approved: true, Comment: "legal+supervisor"}, decisionOf(t, b.client, id))

			// The task finished: its links' waits have ended.
			a = servertest.Send(t, b.h, "POST", first+"?decision=approve", nil, "Content-Type", "application/json")
			require.Equal(t, http.StatusGone, a.Status, "%s", a.Body)
			enginetest.RequireProjectionsMatch(t, ns.Store)
		})
	}
}

// unavailableStore is a store whose database stops answering signals:
// TaskGet, a signal's first statement, fails as a dropped connection does.
type unavailableStore struct{ store.Store }

func (unavailableStore) TaskGet(context.Context, *store.TaskGetParams) (*store.Task, error) {
	return nil, errmark.Mark(errors.New("connection reset by peer"), store.ErrUnavailable)
}

// Probe finding: a callback whose delivery failed with a 5xx was logged
// at WARN with its URL, which still worked. The token is left out of
// every log line; the answer is the 503 it was.
func TestCallbackTokenIsNotLogged(t *testing.T) {
	t.Parallel()
	st := enginetest.Store(t)
	var logs bytes.Buffer
	srv, err := New(Config{Store: unavailableStore{st}, CallbackSecret: testCallbackSecret,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	token, err := sdk.CallbackToken(testCallbackSecret, sdk.Callback{Namespace: "default", TaskID: uuid.New(), Name: "approve",
		Expires: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	a := servertest.Send(t, srv.Handler(), "POST", "/v1/callbacks/"+token+"?decision=approve", nil, "Content-Type", "application/json")
	require.Equal(t, http.StatusServiceUnavailable, a.Status, "%s", a.Body)
	require.Contains(t, logs.String(), "database unavailable")
	require.Contains(t, logs.String(), "/v1/callbacks/[redacted]")
	require.NotContains(t, logs.String(), token)
	require.NotContains(t, logs.String(), token[:20])
}
