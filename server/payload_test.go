package server

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/stretchr/testify/require"
)

// One limit, MaxPayloadBytes, as in the sdk: an input over it is a 413
// payload_too_large naming its size and the limit; an input of exactly it
// is taken, in a body up to 64 KiB larger; a body over that is a 413 too,
// naming the input limit. The default is the sdk's, 1 MiB.
func TestStartInputOverMaxPayloadBytesIs413(t *testing.T) {
	t.Parallel()
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			srv, err := New(Config{Store: st.Store, MaxPayloadBytes: 1000})
			require.NoError(t, err)
			h := srv.Handler()
			body := func(input int, labels string) []byte {
				return []byte(`{"type":"doc",` + labels + `"input":"` + strings.Repeat("x", input-2) + `"}`)
			}

			a := servertest.Send(t, h, "POST", "/v1/tasks", body(1000, ""))
			require.Equal(t, http.StatusAccepted, a.Status, "an input of exactly the limit: %s", a.Body)
			a = servertest.Send(t, h, "POST", "/v1/tasks", body(1001, ""))
			require.Equal(t, http.StatusRequestEntityTooLarge, a.Status, "%s", a.Body)
			require.Equal(t, web.CodePayloadTooLarge, a.Problem.Code)
			require.Contains(t, a.Problem.Detail, "input is 1001 bytes of JSON, over the limit of 1000 bytes (MaxPayloadBytes)")
			require.Equal(t, [2]int64{1001, 1000}, [2]int64{a.Problem.SizeBytes, a.Problem.LimitBytes})

			// The envelope: 64 KiB besides the input.
			labels := `"idempotency_key":"` + strings.Repeat("k", 200) + `",`
			a = servertest.Send(t, h, "POST", "/v1/tasks", body(1000, labels))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			huge := body(1000, `"trace_id":"`+strings.Repeat(" ", web.EnvelopeBytes)+`",`)
			a = servertest.Send(t, h, "POST", "/v1/tasks", huge)
			require.Equal(t, http.StatusRequestEntityTooLarge, a.Status, "%s", a.Body)
			require.Equal(t, web.CodePayloadTooLarge, a.Problem.Code)
			require.Contains(t, a.Problem.Detail, "the request body is "+strconv.Itoa(len(huge))+" bytes; a task's input may be at most 1000 bytes of JSON (MaxPayloadBytes), the rest of the body 65536 bytes")
			require.Equal(t, [2]int64{int64(len(huge)), 1000}, [2]int64{a.Problem.SizeBytes, a.Problem.LimitBytes})
			require.Equal(t, 2, taskCount(t, st.Store), "only the accepted starts were written")

			// The default is the sdk's.
			srv, err = New(Config{Store: st.Store})
			require.NoError(t, err)
			a = servertest.Send(t, srv.Handler(), "POST", "/v1/tasks", body(sdk.DefaultMaxPayloadBytes+1, ""))
			require.Equal(t, http.StatusRequestEntityTooLarge, a.Status)
			require.Contains(t, a.Problem.Detail, "over the limit of 1048576 bytes")
		})
	}
}
