package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/cairnflow/cairn/workflow"
)

// declaredApproval awaits the approval "approve", which its type declares
// (its only signal).
func declaredApproval() *sdk.Workflow[struct{}, workflow.Decision] {
	return sdk.NewWorkflow("callback.declared", 1, func(ctx workflow.Context, _ struct{}) (workflow.Decision, error) {
		d, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		return d, err
	}, &sdk.WorkflowOpts{Signals: []sdk.SignalDecl{sdk.DeclareApproval("approve")}})
}

// blobCount is how many blobs task id has.
func blobCount(t *testing.T, st store.Store, id uuid.UUID) int {
	t.Helper()
	keys, err := st.BlobKeysByTasks(context.Background(), &store.BlobKeysByTasksParams{Namespace: "default", IDs: []uuid.UUID{id}})
	require.NoError(t, err)
	return len(keys[id])
}

// The trial's two bad signals, to a task whose type declares its signals:
// the payload without "approved" is a 422 naming the field, the
// misspelled name a 404 naming the declared ones, and neither writes
// anything (no event, no blob, however large the payload); through the
// API, by key, and through a callback link. A good one goes through, and
// a type that declares nothing takes anything, as before. Both stores.
func TestDeclaredSignalsRefusedOverHTTP(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			st := ns.Store
			servertest.RegisterDoc(t, st, "default")
			b := approvalSetupWith(t, st, declaredApproval())
			id, pos := b.startWaiting(t)
			target := "/v1/tasks/" + id.String() + "/signals/"
			link := b.url(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: time.Now().Add(time.Hour)})
			before := servertest.EventCount(t, st, id)

			a := servertest.Send(t, b.h, "POST", target+"approve", []byte(`{"payload":{"ok":"yes"}}`))
			require.Equal(t, http.StatusUnprocessableEntity, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeSignalPayload, a.Problem.Code)
			require.Equal(t, []sdk.SignalPayloadProblem{{Pointer: "/approved", Detail: "missing"}}, a.Problem.Errors)
			require.Contains(t, a.Problem.Detail, "/approved: missing")

			a = servertest.Send(t, b.h, "POST", target+"aproval", []byte(`{"payload":{"approved":true}}`))
			require.Equal(t, http.StatusNotFound, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeSignalNotDeclared, a.Problem.Code)
			require.Equal(t, []string{"approve"}, a.Problem.Declared)
			require.Contains(t, a.Problem.Detail, `"approve"`)

			big := `{"payload":{"ok":"` + strings.Repeat("x", 100<<10) + `"}}`
			a = servertest.Send(t, b.h, "POST", target+"approve", []byte(big))
			require.Equal(t, http.StatusUnprocessableEntity, a.Status, "a payload kept as a blob if taken: %.300s", a.Body)
			a = servertest.Send(t, b.h, "POST", target+"approve", []byte(`{"payload":{"approved":"yes"}}`))
			require.Equal(t, http.StatusUnprocessableEntity, a.Status, "%s", a.Body)
			require.Equal(t, []sdk.SignalPayloadProblem{{Pointer: "/approved", Detail: "got string, want boolean"}}, a.Problem.Errors)
			a = servertest.Send(t, b.h, "POST", link, []byte(`{"ok":"yes"}`))
			require.Equal(t, http.StatusUnprocessableEntity, a.Status, "a callback's payload is checked too: %s", a.Body)

			require.Equal(t, before, servertest.EventCount(t, st, id), "refused signals write nothing")
			require.Zero(t, blobCount(t, st, id), "nor any blob")

			// Undeclared types: as before.
			doc := startDoc(t, b.h, "doc-1")
			a = servertest.Send(t, b.h, "POST", "/v1/tasks/"+doc.String()+"/signals/aproval", []byte(`{"payload":{"ok":"yes"}}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			a = servertest.Send(t, b.h, "POST", "/v1/tasks/by-key/doc-1/signals/anything", []byte(`{}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)

			// The declarations are listed with the type.
			a = servertest.Send(t, b.h, "GET", "/v1/task-types", nil)
			require.Equal(t, http.StatusOK, a.Status)
			var types struct {
				TaskTypes []taskTypeView `json:"task_types"`
			}
			require.NoError(t, json.Unmarshal(a.Body, &types))
			for _, tt := range types.TaskTypes {
				if tt.Type == "callback.declared" {
					require.NotNil(t, tt.Signals)
					require.Contains(t, *tt.Signals, "approve")
				} else {
					require.Nil(t, tt.Signals, tt.Type)
				}
			}

			a = servertest.Send(t, b.h, "POST", target+"approve", []byte(`{"payload":{"approved":true,"comment":"fine"}}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			require.Equal(t, workflow.Decision{Approved: true, Comment: "fine", By: "api"}, decisionOf(t, b.client, id))
			enginetest.RequireProjectionsMatch(t, st)
		})
	}
}

// sendPage serves one request as a browser would send it, and returns the
// recorder.
func sendPage(h http.Handler, method, target, contentType, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Host = "localhost"
	r.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
	if method == "POST" {
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A callback link opened in a browser: its GET is a page saying what is
// decided, for which task, until when, and writes nothing (a chat app's
// unfurler fetches it); its form posts the decision with a comment and
// gets a page back; the link then says it was used. Refused links are
// pages with the POST's statuses.
func TestCallbackPage(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetup(t, ns.Store)
			id, pos := b.startWaiting(t)
			expires := time.Now().Add(time.Hour)
			cb := sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: expires}
			link := b.url(t, cb)
			before := servertest.EventCount(t, ns.Store, id)

			for _, target := range []string{link, link + "?decision=approve", link} {
				w := sendPage(b.h, "GET", target, "", "")
				require.Equal(t, http.StatusOK, w.Code, "%s", w.Body)
				require.Equal(t, "text/html; charset=utf-8", w.Header().Get("Content-Type"))
				require.Contains(t, w.Header().Get("Content-Security-Policy"), "form-action 'self'")
				page := w.Body.String()
				for _, want := range []string{id.String(), "callback.approval@1", "<strong>approve</strong>",
					pageTime(expires), `formaction="?decision=approve"`, `formaction="?decision=reject"`, `name="comment"`} {
					require.Contains(t, page, want)
				}
			}
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id), "a GET writes nothing")

			early := b.url(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos + 3, Expires: expires})
			w := sendPage(b.h, "GET", early, "", "")
			require.Equal(t, http.StatusConflict, w.Code, "%s", w.Body)
			require.Contains(t, w.Body.String(), "Not waiting for this decision yet")
			expired := cb
			expired.Expires = time.Now().Add(-time.Minute)
			w = sendPage(b.h, "GET", b.url(t, expired), "", "")
			require.Equal(t, http.StatusForbidden, w.Code)
			require.Contains(t, w.Body.String(), "the callback link has expired")
			w = sendPage(b.h, "GET", "/v1/callbacks/forged", "", "")
			require.Equal(t, http.StatusForbidden, w.Code)
			require.Contains(t, w.Body.String(), "not valid")

			// The form of another origin is refused; a form elsewhere in
			// the API still is.
			r := httptest.NewRequest("POST", link+"?decision=approve", strings.NewReader("comment=x"))
			r.Host, r.Header["Content-Type"], r.Header["Sec-Fetch-Site"] = "localhost", []string{"application/x-www-form-urlencoded"}, []string{"cross-site"}
			rec := httptest.NewRecorder()
			b.h.ServeHTTP(rec, r)
			require.Equal(t, http.StatusForbidden, rec.Code, "%s", rec.Body)
			w = sendPage(b.h, "POST", "/v1/tasks/"+id.String()+"/signals/approve", "application/x-www-form-urlencoded", "comment=x")
			require.Equal(t, http.StatusUnsupportedMediaType, w.Code)
			w = sendPage(b.h, "POST", link+"?decision=approve", "application/x-www-form-urlencoded", "comment=x&by=mallory")
			require.Equal(t, http.StatusBadRequest, w.Code, "%s", w.Body)
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id), "refused posts write nothing")

			w = sendPage(b.h, "POST", link+"?decision=reject", "application/x-www-form-urlencoded", "comment=needs+a+second+look")
			require.Equal(t, http.StatusAccepted, w.Code, "%s", w.Body)
			require.Equal(t, "text/html; charset=utf-8", w.Header().Get("Content-Type"))
			require.Contains(t, w.Body.String(), "Rejected")
			require.Equal(t, workflow.Decision{Approved: false, Comment: "needs a second look", By: "callback"}, decisionOf(t, b.client, id))

			w = sendPage(b.h, "GET", link, "", "")
			require.Equal(t, http.StatusGone, w.Code)
			require.Contains(t, w.Body.String(), "used already")
			w = sendPage(b.h, "POST", link+"?decision=approve", "application/x-www-form-urlencoded", "")
			require.Equal(t, http.StatusGone, w.Code)
			require.Contains(t, w.Body.String(), "used already")
			require.NotContains(t, w.Body.String(), "<form", "nothing left to decide")
		})
	}
}

// The page escapes what it shows: a signal name is the workflow's, but
// the page is HTML.
func TestCallbackPageEscapes(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, callbackTemplate.Execute(&b, callbackView{Title: "Decide: <b>x</b>", Open: true, TaskID: "t",
		Type: "doc", Version: 1, Name: `<script>alert(1)</script>`, Comment: maxCallbackComment}))
	require.NotContains(t, b.String(), "<script>")
	require.NotContains(t, b.String(), "<b>x</b>")
	require.Contains(t, b.String(), "&lt;script&gt;")
}
