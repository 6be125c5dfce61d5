package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The finding: 200 tasks with 1 MiB inputs made GET /v1/tasks?limit=1000 a
// 200 MB response and grew the server by 700 MB. A listing now carries no
// payloads unless asked, and one that asks is bounded in bytes per page
// while its cursor still reaches every task. On both stores.
func TestListingsWithLargeInputsAreBounded(t *testing.T) {
	t.Run("PostgreSQL", func(t *testing.T) { testLargeInputListings(t, enginetest.Store(t)) })
	t.Run("SQLite", func(t *testing.T) {
		s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "cairn.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		testLargeInputListings(t, s)
	})
}

const (
	largeTasks = 200
	pagedTasks = 40      // of largeTasks, listed with include
	largeInput = 1 << 20 // bytes of each task's input
)

func testLargeInputListings(t *testing.T, st store.Store) {
	input := json.RawMessage(`{"doc":"` + strings.Repeat("x", largeInput-10) + `"}`)
	require.Len(t, input, largeInput)
	began := time.Now()
	// Of the tasks, the include half pages through one type's: every task
	// of a listing, at a fifth of the bytes the whole would take under the
	// race detector.
	enginetest.StartTasks(t, st, largeTasks-pagedTasks, &enginetest.TaskOpts{Input: input})
	ids := enginetest.StartTasks(t, st, pagedTasks, &enginetest.TaskOpts{Type: "paged", Input: input})
	t.Logf("started in %s", time.Since(began))
	began = time.Now()
	defer func() { t.Logf("listed in %s", time.Since(began)) }()
	srv, err := server.New(server.Config{Store: st})
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	// Lean: the whole listing in one page, a small fraction of the inputs,
	// with neither input nor output, and no payload read into the heap.
	var page listing
	allocated := allocatedBy(func() { page = getListing(t, hs.URL+"/v1/tasks?limit=1000") })
	t.Logf("lean: %d tasks in %d bytes; %d bytes allocated", len(page.Tasks), page.bytes, allocated)
	require.Len(t, page.Tasks, largeTasks)
	require.Empty(t, page.NextCursor)
	require.Less(t, page.bytes, 256<<10, "a lean page of %d tasks with 1 MiB inputs", largeTasks)
	for _, task := range page.Tasks {
		require.NotContains(t, task, "input")
		require.NotContains(t, task, "output")
		require.Contains(t, task, "status")
	}
	require.Less(t, allocated, uint64(32<<20), "the lean listing allocated %d bytes; the inputs are %d", allocated, largeTasks*largeInput)

	// With include: pages of at most the cap in payloads, each task whole,
	// and the cursors reach every task, newest first.
	seen := map[uuid.UUID]bool{}
	var order []uuid.UUID
	next := "/v1/tasks?limit=1000&type=paged&include=input,output"
	for pages := 0; next != ""; pages++ {
		require.Less(t, pages, pagedTasks, "paging must end")
		allocated := allocatedBy(func() { page = getListing(t, hs.URL+next) })
		payloads := 0
		for _, task := range page.Tasks {
			require.True(t, bytes.Equal(input, task["input"]), "a listed input is whole")
			require.Equal(t, "null", string(task["output"]), "an included output is there, null while pending")
			payloads += len(task["input"])
			if string(task["output"]) != "null" {
				payloads += len(task["output"])
			}
			var id uuid.UUID
			require.NoError(t, json.Unmarshal(task["id"], &id))
			require.False(t, seen[id], "task %s listed twice", id)
			seen[id] = true
			order = append(order, id)
		}
		t.Logf("include page %d: %d tasks, %d bytes of payloads, %d bytes in all; %d bytes allocated", pages, len(page.Tasks), payloads, page.bytes, allocated)
		if len(page.Tasks) == 0 {
			// A page full to the byte may be followed by an empty one, the
			// last, as a page full to the row is.
			require.Empty(t, page.NextCursor, "page %d is empty", pages)
		}
		require.LessOrEqual(t, payloads, sdk.DefaultMaxListPayloadBytes, "page %d carries %d bytes of payloads", pages, payloads)
		require.Less(t, page.bytes, sdk.DefaultMaxListPayloadBytes+(64<<10))
		require.Less(t, allocated, uint64(12*sdk.DefaultMaxListPayloadBytes), "page %d allocated %d bytes", pages, allocated)
		next = ""
		if page.NextCursor != "" {
			next = "/v1/tasks?limit=1000&type=paged&include=input,output&cursor=" + page.NextCursor
		}
	}
	require.Len(t, seen, pagedTasks, "the cursors reach every task")
	for i := 1; i < len(order); i++ {
		require.Equal(t, 1, bytes.Compare(order[i-1][:], order[i][:]), "newest first")
	}
	for _, id := range ids {
		require.True(t, seen[id], "task %s listed", id)
	}

	// The console's task list shows no payloads and loads none.
	resp, err := http.Get(hs.URL + "/console/tasks?namespace=default")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "Older tasks", "a page of 50 and a link to more")
	require.NotContains(t, string(body), "xxxxxxxx")
	require.Less(t, len(body), 256<<10)
}

// listing is a page of GET /v1/tasks, its tasks' fields undecoded, and the
// size of the response body.
type listing struct {
	Tasks      []map[string]json.RawMessage `json:"tasks"`
	NextCursor string                       `json:"next_cursor"`
	bytes      int
}

func getListing(t *testing.T, url string) listing {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var page listing
	require.NoError(t, json.Unmarshal(body, &page))
	page.bytes = len(body)
	return page
}

// allocatedBy returns the bytes the process allocated on the heap while
// fn ran: the server's handler, the store's reads and the test's client
// together, a bound on the heap growth fn can cause.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// include= names what a listing may carry; anything else is refused.
func TestListingIncludeIsChecked(t *testing.T) {
	st := enginetest.Store(t)
	enginetest.StartTasks(t, st, 1, &enginetest.TaskOpts{Input: json.RawMessage(`{"a":1}`)})
	srv, err := server.New(server.Config{Store: st})
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	page := getListing(t, hs.URL+"/v1/tasks?include=input")
	require.Len(t, page.Tasks, 1)
	require.JSONEq(t, `{"a":1}`, string(page.Tasks[0]["input"]))
	require.NotContains(t, page.Tasks[0], "output")
	page = getListing(t, hs.URL+"/v1/tasks?include=output")
	require.NotContains(t, page.Tasks[0], "input")
	require.Equal(t, "null", string(page.Tasks[0]["output"]))
	page = getListing(t, hs.URL+"/v1/tasks?include=input&include=output")
	require.Contains(t, page.Tasks[0], "input")
	require.Contains(t, page.Tasks[0], "output")

	resp, err := http.Get(hs.URL + "/v1/tasks?include=labels")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), `include \"labels\"`)
}
