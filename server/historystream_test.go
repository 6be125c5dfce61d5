package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// growTaskHistory gives task id n signals of a payload of size bytes,
// through the store.
func growTaskHistory(t *testing.T, s store.Store, id uuid.UUID, n, size int) {
	t.Helper()
	payload := json.RawMessage(`"` + strings.Repeat("x", size) + `"`)
	for i := range n {
		_, err := engine.SignalTask(context.Background(), s, &store.TaskSignalParams{
			Namespace: store.DefaultNamespace, TaskID: id, Name: "fill", Payload: payload, Sender: "test", DedupID: fmt.Sprint(i),
		})
		require.NoError(t, err)
	}
}

// TestHistoryIsStreamedInPages: a history of several pages is answered
// as before, byte for byte: {"events":[…],"id":…} and a newline.
func TestHistoryIsStreamedInPages(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			servertest.RegisterDoc(t, ns.Store, "default")
			h := testServer(t, ns.Store)
			id := startDoc(t, h, "")
			growTaskHistory(t, ns.Store, id, 7, 400_000) // 2.8 MB: three pages of 1 MiB
			events, err := store.TaskEvents(context.Background(), ns.Store, "", id)
			require.NoError(t, err)
			require.Len(t, events, 8)
			var want bytes.Buffer
			require.NoError(t, json.NewEncoder(&want).Encode(map[string]any{"id": id, "events": events}))

			a := servertest.Send(t, h, "GET", "/v1/tasks/"+id.String()+"/history", nil)
			require.Equal(t, http.StatusOK, a.Status, "%.300s", a.Body)
			if got, want := string(a.Body), want.String(); got != want {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Fatalf("the answer differs from the one whole document at byte %d of %d/%d: got %.200q, want %.200q",
					i, len(got), len(want), got[max(0, i-100):], want[max(0, i-100):])
			}

			a = servertest.Send(t, h, "GET", "/v1/tasks/"+uuid.NewString()+"/history", nil)
			require.Equal(t, http.StatusNotFound, a.Status)
			require.Equal(t, web.CodeNotFound, a.Problem.Code)
		})
	}
}

// TestClientThatNeverReadsIsCutOff replays the probe's F5 request: a
// client asks for a long history and never reads the answer. The server's
// write deadline ends the request, and with it what the request holds;
// without one the handler would wait on the client for ever.
func TestClientThatNeverReadsIsCutOff(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			servertest.RegisterDoc(t, ns.Store, "default")
			srv, err := New(Config{Store: ns.Store, WriteTimeout: 200 * time.Millisecond})
			require.NoError(t, err)
			ended := make(chan struct{}, 1)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() {
					if strings.HasSuffix(r.URL.Path, "/history") {
						ended <- struct{}{}
					}
				}()
				srv.Handler().ServeHTTP(w, r)
			}))
			t.Cleanup(hs.Close)
			id := startDoc(t, srv.Handler(), "")
			// More than the loopback socket buffers hold (a few MB).
			growTaskHistory(t, ns.Store, id, 40, 800_000)

			conn, err := net.Dial("tcp", hs.Listener.Addr().String())
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
			_, err = fmt.Fprintf(conn, "GET /v1/tasks/%s/history HTTP/1.1\r\nHost: localhost\r\n\r\n", id)
			require.NoError(t, err)
			select {
			case <-ended:
			case <-time.After(time.Minute):
				t.Fatal("the request still runs a minute after its client stopped reading")
			}
			// What the client got is a cut answer (or none, if the
			// deadline passed before the first write), never a whole
			// document.
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err == nil {
				require.Equal(t, http.StatusOK, resp.StatusCode)
				var doc map[string]any
				require.Error(t, json.NewDecoder(resp.Body).Decode(&doc))
			}
		})
	}
}
