package server_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
)

// The filters of the findings, built as they say.
var (
	// formatBomb: F8.size() > 0 where F0 = "aaaaaaaaaa" and
	// Fn+1 = [Fn].map(x, "%s%s%s%s%s%s%s%s%s%s".format([x,x,x,x,x,x,x,x,x,x]))[0];
	// 551 characters, 10^9 characters of output if it ran.
	formatBomb = func() string {
		f := `"aaaaaaaaaa"`
		for range 8 {
			f = "[" + f + `].map(x, "%s%s%s%s%s%s%s%s%s%s".format([x,x,x,x,x,x,x,x,x,x]))[0]`
		}
		return f + ".size() > 0"
	}()
	// hundred is L = [0..99].
	hundred = func() string {
		var b strings.Builder
		for i := range 100 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(i))
		}
		return "[" + b.String() + "]"
	}()
	// regexEvents: 10,000 regular expressions compiled per event.
	regexEvents = strings.NewReplacer("L", hundred).Replace(`L.exists(x, L.exists(y, ('a'+string(x)).matches('(x{100}){10}'+string(y))))`)
	// cubeTasks: a million iterations per task.
	cubeTasks = strings.NewReplacer("L", hundred).Replace(`L.all(x,L.all(y,L.all(z,x+y+z>=0)))`)
)

// filterStores runs fn on each store, fresh: PostgreSQL in a schema of its
// own and the embedded store in a file of its own.
func filterStores(t *testing.T, fn func(t *testing.T, s store.Store)) {
	t.Run("postgres", func(t *testing.T) { fn(t, enginetest.Store(t)) })
	t.Run("sqlite", func(t *testing.T) {
		s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "cairn.db"))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		fn(t, s)
	})
}

// serve answers req with a server on cfg, in the background, waiting at
// most wait for the answer (a bound against a hang, not a speed check).
func serve(t *testing.T, cfg server.Config, req *http.Request, wait time.Duration) *httptest.ResponseRecorder {
	t.Helper()
	srv, err := server.New(cfg)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Handler().ServeHTTP(rec, req)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatalf("%s %s: no answer within %s", req.Method, req.URL, wait)
	}
	require.NoError(t, srv.Stop(context.Background()))
	return rec
}

// get is a request of a local client: a tokenless server answers only
// loopback Hosts.
func get(path string, query url.Values) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path+"?"+query.Encode(), nil)
	r.Host = "localhost"
	return r
}

// requireTooExpensive checks a 422 filter_too_expensive naming limit.
func requireTooExpensive(t *testing.T, rec *httptest.ResponseRecorder, limit string) server.Problem {
	t.Helper()
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code, rec.Body.String())
	var p server.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), rec.Body.String())
	require.Equal(t, "filter_too_expensive", p.Code)
	if limit != "" {
		require.Equal(t, limit, p.Exceeded, p.Detail)
	}
	require.NotEmpty(t, p.Detail)
	return p
}

// TestFormatBombIsRefused is finding 1: the 551-character format bomb on
// a one-task queue. It is answered 422, well within its deadline, having
// allocated a few megabytes (it took 3 GB and 12.6 s before). Not
// parallel: the allocation count is the process's.
func TestFormatBombIsRefused(t *testing.T) {
	require.Len(t, formatBomb, 551)
	filterStores(t, func(t *testing.T, s store.Store) {
		enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "one-task"})
		req := get("/v1/tasks", url.Values{"queue": {"one-task"}, "filter": {formatBomb}})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rec := serve(t, server.Config{Store: s}, req, sdk.DefaultFilterTimeout+5*time.Second)
		runtime.ReadMemStats(&after)
		p := requireTooExpensive(t, rec, sdk.FilterLimitEvalCost)
		// TotalAlloc only grows: its growth bounds the heap's (and so what
		// the request added to the RSS).
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("422 %s; allocated %.1f MB", p.Detail, float64(allocated)/(1<<20))
		require.Less(t, allocated, uint64(50<<20))
	})
}

// joinBomb is probe finding F7's filter shape: a string of 168,070
// characters made by five levels of seven-fold joins, then one join of
// 400 references to it (a 67 MB string in one call); 1,025 characters.
var joinBomb = func() string {
	f := `"aaaaaaaaaa"`
	for range 5 {
		f = "[" + f + `].map(x, [x,x,x,x,x,x,x].join())[0]`
	}
	return "[" + f + `].map(x, [` + strings.TrimSuffix(strings.Repeat("x,", 400), ",") + `].join())[0].size() > 0`
}()

// TestJoinBombIsRefused is probe finding F7: the join filter on a queue
// of ten tasks is answered 422 having allocated a few megabytes; it
// allocated 360 MB a task (the probe's server peaked at 1.08 GB, 3.6 GB
// with four in parallel). Not parallel: the allocation count is the
// process's.
func TestJoinBombIsRefused(t *testing.T) {
	filterStores(t, func(t *testing.T, s store.Store) {
		enginetest.StartTasks(t, s, 10, &enginetest.TaskOpts{Queue: "ten-tasks"})
		req := get("/v1/tasks", url.Values{"queue": {"ten-tasks"}, "filter": {joinBomb}})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rec := serve(t, server.Config{Store: s}, req, sdk.DefaultFilterTimeout+5*time.Second)
		runtime.ReadMemStats(&after)
		p := requireTooExpensive(t, rec, sdk.FilterLimitEvalCost)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("422 %s; allocated %.1f MB", p.Detail, float64(allocated)/(1<<20))
		require.Less(t, allocated, uint64(50<<20))
	})
}

// TestNestedComprehensionsAreTooExpensive is finding 2: the two filters
// that held cores for minutes are answered 422 filter_too_expensive.
func TestNestedComprehensionsAreTooExpensive(t *testing.T) {
	t.Parallel()
	filterStores(t, func(t *testing.T, s store.Store) {
		enginetest.StartTasks(t, s, 20, nil)
		wait := sdk.DefaultFilterTimeout + 10*time.Second

		rec := serve(t, server.Config{Store: s}, get("/v1/events", url.Values{"since": {"1h"}, "filter": {regexEvents}}), wait)
		p := requireTooExpensive(t, rec, "")
		require.Contains(t, []string{sdk.FilterLimitTime, sdk.FilterLimitCost}, p.Exceeded, p.Detail)

		// A million iterations go over the cost limit of one evaluation;
		// a slow machine (the race detector) may reach the deadline first.
		rec = serve(t, server.Config{Store: s}, get("/v1/tasks", url.Values{"limit": {"1000"}, "filter": {cubeTasks}}), wait)
		p = requireTooExpensive(t, rec, "")
		require.Contains(t, []string{sdk.FilterLimitEvalCost, sdk.FilterLimitTime}, p.Exceeded, p.Detail)
	})
}

// TestFilterLimitsAreConfigured: a server's FilterLimits apply to its
// requests, the dead-letter listing and the console included, and name
// what was exceeded.
func TestFilterLimitsAreConfigured(t *testing.T) {
	t.Parallel()
	filterStores(t, func(t *testing.T, s store.Store) {
		enginetest.StartTasks(t, s, 30, nil)
		wait := 30 * time.Second
		cheap := `task.type == "test"`

		cfg := server.Config{Store: s, FilterLimits: sdk.FilterLimits{MaxScan: 10}}
		rec := serve(t, cfg, get("/v1/events", url.Values{"since": {"1h"}, "filter": {`event.seq > 1 && ` + cheap}}), wait)
		p := requireTooExpensive(t, rec, sdk.FilterLimitScan)
		require.Contains(t, p.Detail, "events were read up to")

		// A task page ends at MaxScan with a cursor to go on from.
		rec = serve(t, cfg, get("/v1/tasks", url.Values{"filter": {cheap}}), wait)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var page struct {
			Tasks      []json.RawMessage `json:"tasks"`
			NextCursor string            `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
		require.Len(t, page.Tasks, 10)
		require.NotEmpty(t, page.NextCursor)

		cfg = server.Config{Store: s, FilterLimits: sdk.FilterLimits{Cost: 50}}
		rec = serve(t, cfg, get("/v1/tasks", url.Values{"filter": {cheap + ` && task.labels.size() == 0`}}), wait)
		requireTooExpensive(t, rec, sdk.FilterLimitCost)

		// The console shows the problem in place of the list.
		rec = serve(t, server.Config{Store: s}, get("/console/tasks", url.Values{"filter": {cubeTasks}}), wait)
		require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
		require.Contains(t, rec.Body.String(), `<p class="notice error" role="alert">filter too expensive: `)
	})
}

// cancellingStore is a store whose caller goes away once a page of events
// has been read: the client of an audit disconnecting while its filter is
// being evaluated.
type cancellingStore struct {
	store.Store
	cancel context.CancelCauseFunc
	// Written by the request's goroutine, read by the test's after it.
	cancelled  bool // a page of events was read, and the caller left
	lateScans  int  // EventScan calls after that
	pageLength int  // the events of that page
}

var errClientGone = errors.New("the client went away")

func (s *cancellingStore) EventScan(ctx context.Context, p *store.EventScanParams) ([]store.AuditEvent, error) {
	if s.cancelled {
		s.lateScans++
	}
	page, err := s.Store.EventScan(ctx, p)
	if len(page) > 0 && !s.cancelled {
		s.cancelled, s.pageLength = true, len(page)
		s.cancel(errClientGone)
	}
	return page, err
}

// TestAClientGoingAwayStopsTheFilter is finding 2's last part: the
// request's context reaches the evaluation. Its client leaves once the
// events are read; under limits that would let the filter run for an hour
// (10,000 regular expressions on each of 200 events), the evaluation stops
// at once with the context's cause, and nothing more is read or written.
func TestAClientGoingAwayStopsTheFilter(t *testing.T) {
	t.Parallel()
	unlimited := sdk.FilterLimits{Timeout: time.Hour, Cost: math.MaxUint64, MaxScan: math.MaxInt}
	filterStores(t, func(t *testing.T, s store.Store) {
		enginetest.StartTasks(t, s, 200, nil)
		filter, err := sdk.CompileEventFilter(regexEvents)
		require.NoError(t, err)

		// Through the sdk: the error is the context's cause.
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		cs := &cancellingStore{Store: s, cancel: cancel}
		c, err := sdk.NewClient(sdk.ClientConfig{Store: cs, FilterLimits: unlimited})
		require.NoError(t, err)
		handed := 0
		err = c.Audit(ctx, sdk.AuditParams{Filter: filter, Since: time.Now().Add(-time.Hour)}, func(sdk.AuditRecord) error {
			handed++
			return nil
		})
		require.True(t, errors.Is(err, errClientGone), "not the context's cause: %v", err)
		require.False(t, errors.Is(err, sdk.ErrFilterTooExpensive))
		require.True(t, cs.cancelled)
		require.Equal(t, 200, cs.pageLength, "one page held every event")
		require.Zero(t, cs.lateScans)
		require.Zero(t, handed)

		// Through the API: the handler returns without an answer.
		ctx, cancel = context.WithCancelCause(context.Background())
		defer cancel(nil)
		cs = &cancellingStore{Store: s, cancel: cancel}
		req := get("/v1/events", url.Values{"since": {"1h"}, "filter": {regexEvents}}).WithContext(ctx)
		rec := serve(t, server.Config{Store: cs, FilterLimits: unlimited}, req, 30*time.Second)
		require.Empty(t, rec.Body.String())
		require.True(t, cs.cancelled)
		require.Zero(t, cs.lateScans)
	})
}

// TestSinceBeyondADurationIsRefused is finding 9's since=1000000d: refused
// with the bound, not overflowed into "since is not before until".
func TestSinceBeyondADurationIsRefused(t *testing.T) {
	t.Parallel()
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "cairn.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	rec := serve(t, server.Config{Store: s}, get("/v1/events", url.Values{"since": {"1000000d"}}), 30*time.Second)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), `since: \"1000000d\" is more than 106751d`)

	rec = serve(t, server.Config{Store: s}, get("/v1/events", url.Values{"since": {"106751d"}}), 30*time.Second)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}
