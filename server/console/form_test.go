package console

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// tempEntries is how many entries the temporary directory holds.
func tempEntries(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir(os.TempDir())
	require.NoError(t, err)
	return len(entries)
}

// Probe finding F6: POST /console/login, unauthenticated, took multipart
// bodies without limit (file parts spooled to the temporary directory,
// values held in memory). Every console form is now
// application/x-www-form-urlencoded only (415 otherwise, the body not
// read) and bounded (413 past the limit), and nobody is signed in.
func TestConsoleFormsAreBoundedAndNotMultipart(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // multipart spools here: it must stay empty
	st := enginetest.Store(t)
	tokens := []web.Token{{Name: "ops", SHA256: web.HashToken("ops-token"), Namespaces: []string{"*"}, Roles: []web.Role{web.RoleAdmin}}}
	h := newTestConsole(t, st, Config{Tokens: tokens})

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(t, mw.WriteField("token", "ops-token"))
	part, err := mw.CreateFormFile("upload", "big.bin")
	require.NoError(t, err)
	_, err = part.Write(bytes.Repeat([]byte("x"), 40<<20)) // over multipart's 32 MB in memory: spooled to disk
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	before := tempEntries(t)
	w := servertest.PostConsole(t, h, "/console/login", mw.FormDataContentType(), &body, "")
	require.Equal(t, http.StatusUnsupportedMediaType, w.Code, w.Body.String())
	require.Empty(t, w.Result().Cookies(), "nobody signed in")
	require.Equal(t, before, tempEntries(t), "nothing spooled to the temporary directory")

	big := url.Values{"token": {"ops-token"}, "pad": {strings.Repeat("x", 2*web.EnvelopeBytes)}}.Encode()
	w = servertest.PostConsole(t, h, "/console/login", "application/x-www-form-urlencoded", strings.NewReader(big), "")
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code, w.Body.String())
	require.Empty(t, w.Result().Cookies())

	for _, ct := range []string{"text/plain", "application/json", ""} {
		w = servertest.PostConsole(t, h, "/console/login", ct, strings.NewReader("token=ops-token"), "")
		require.Equal(t, http.StatusUnsupportedMediaType, w.Code, "%q: %s", ct, w.Body.String())
	}

	// The token in the URL is refused, even a good one, and a form's
	// token still signs in.
	w = servertest.PostConsole(t, h, "/console/login?token=ops-token", "application/x-www-form-urlencoded", strings.NewReader(""), "")
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Empty(t, w.Result().Cookies())
	w = servertest.PostConsole(t, h, "/console/login?token=ops-token", "application/x-www-form-urlencoded", strings.NewReader("token=ops-token"), "")
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Empty(t, w.Result().Cookies())
	w = servertest.PostConsole(t, h, "/console/login", "application/x-www-form-urlencoded", strings.NewReader("token=ops-token"), "")
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	require.NotEmpty(t, w.Result().Cookies())
}

// Probe findings F8/F9: the console's forms ignored the API's body
// limits: a 9 MB signal payload was stored, and a 9 MB cancel reason
// stored twice. They now take what the API takes: a signal's body up to
// MaxPayloadBytes plus 64 KiB, any other form 64 KiB; past that 413 and
// nothing written.
func TestConsoleFormsTakeTheAPIsLimits(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, ns.Store, "default")
			h := newTestConsole(t, ns.Store, Config{MaxPayloadBytes: 256 << 10})
			id := startWaiting(t, ns.Store, "documents")
			before := servertest.EventCount(t, ns.Store, id)

			payload := `{"blob":"` + strings.Repeat("x", 1<<20) + `"}`
			w := servertest.PostConsole(t, h, "/console/tasks/"+id.String()+"/signals/documents", "application/x-www-form-urlencoded",
				strings.NewReader(url.Values{"payload": {payload}}.Encode()), "")
			require.Equal(t, http.StatusRequestEntityTooLarge, w.Code, w.Body.String())

			reason := strings.Repeat("r", 2*web.EnvelopeBytes)
			w = servertest.PostConsole(t, h, "/console/tasks/"+id.String()+"/cancel", "application/x-www-form-urlencoded",
				strings.NewReader(url.Values{"reason": {reason}}.Encode()), "")
			require.Equal(t, http.StatusRequestEntityTooLarge, w.Code, w.Body.String())
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id), "nothing written")

			// Within the limits, both are taken.
			small := `{"pages":3}`
			w = servertest.PostConsole(t, h, "/console/tasks/"+id.String()+"/signals/documents", "application/x-www-form-urlencoded",
				strings.NewReader(url.Values{"payload": {small}}.Encode()), "")
			require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
			require.Len(t, servertest.SignalsOf(t, ns.Store, id), 1)
			require.JSONEq(t, small, string(servertest.SignalsOf(t, ns.Store, id)[0].Payload))
			events, err := store.TaskEvents(t.Context(), ns.Store, "", id)
			require.NoError(t, err)
			require.IsType(t, history.SignalReceivedData{}, events[len(events)-1].Data)
		})
	}
}

// Probe finding: ?notice= and ?error= were shown in the console's system
// notice as given, so a link could make the console say anything ("Your
// token expired: sign in at https://evil.example"). The console shows
// only the messages its own redirects kept on the server (?flash=), once,
// to whom they were for.
func TestConsoleShowsNoNoticeFromTheURL(t *testing.T) {
	t.Parallel()
	st := enginetest.Store(t)
	tokens := []web.Token{
		{Name: "ops", SHA256: web.HashToken("ops-token"), Namespaces: []string{"*"}, Roles: []web.Role{web.RoleAdmin}},
		{Name: "other", SHA256: web.HashToken("other-token"), Namespaces: []string{"*"}, Roles: []web.Role{web.RoleAdmin}},
	}
	h := newTestConsole(t, st, Config{Tokens: tokens})
	lure := "Your session expired: sign in again at https://evil.example"
	for _, q := range []string{"notice", "error", "flash"} {
		a := servertest.Send(t, h, "GET", "/console/?"+url.Values{q: {lure}}.Encode(), nil, "Authorization", "Bearer ops-token")
		require.Equal(t, http.StatusOK, a.Status)
		require.NotContains(t, string(a.Body), "evil.example", q)
	}

	// A form's own message is shown once, to its poster only.
	w := servertest.PostConsole(t, h, "/console/schedules/nightly/pause", "application/x-www-form-urlencoded", strings.NewReader(""), "ops-token")
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	landing := w.Header().Get("Location")
	other := servertest.Send(t, h, "GET", landing, nil, "Authorization", "Bearer other-token")
	require.NotContains(t, string(other.Body), `class="notice error"`, "not shown to another token")
	mine := servertest.Send(t, h, "GET", landing, nil, "Authorization", "Bearer ops-token")
	require.Contains(t, string(mine.Body), `class="notice error"`, "the pause of an unknown schedule failed: %s", mine.Body)
	again := servertest.Send(t, h, "GET", landing, nil, "Authorization", "Bearer ops-token")
	require.NotContains(t, string(again.Body), `class="notice error"`, "shown once")
}
