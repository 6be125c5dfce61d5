package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/require"
)

// apiServer is a real `cairn server` process on a free port.
type apiServer struct {
	t          *testing.T
	url        string
	metricsURL string    // the --metrics-addr listener's /metrics, when there is one
	token      string    // sent as the bearer token when set
	cmd        *exec.Cmd // the server process
	printed    *printed  // what the process wrote to stderr
}

// printed is the lines a process wrote, as they come.
type printed struct {
	mu    sync.Mutex
	lines []string
}

// all returns the lines written so far.
func (p *printed) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// startServer runs `cairn server` against schema and returns once it
// listens. It is stopped with SIGTERM when the test ends.
func startServer(t *testing.T, schema string, args ...string) *apiServer {
	t.Helper()
	return startServerAt(t, enginetest.DatabaseURL(t), schema, args...)
}

// startServerAt is startServer against the database at url.
func startServerAt(t *testing.T, url, schema string, args ...string) *apiServer {
	t.Helper()
	cmd := exec.Command(cairnBinary(t), append([]string{"server", "--listen", "127.0.0.1:0", "--schema", schema,
		"--rescue-interval", "200ms", "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+url)
	return startListening(t, cmd)
}

// startListening starts cmd, a command that serves the API, and returns
// once it listens. It is stopped with SIGTERM when the test ends.
func startListening(t *testing.T, cmd *exec.Cmd) *apiServer {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	addr, metrics := make(chan string, 1), make(chan string, 1) // each printed once, metrics first
	out := &printed{}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			out.mu.Lock()
			out.lines = append(out.lines, line)
			out.mu.Unlock()
			if rest, ok := strings.CutPrefix(line, "cairn server metrics on "); ok {
				metrics <- rest
			}
			if rest, ok := strings.CutPrefix(line, "cairn server listening on "); ok {
				addr <- rest
			}
			t.Log("server: " + line)
		}
	}()
	select {
	case url := <-addr:
		srv := &apiServer{t: t, url: url, cmd: cmd, printed: out}
		select {
		case srv.metricsURL = <-metrics:
		default:
		}
		return srv
	case <-time.After(30 * time.Second):
		t.Fatal("cairn server did not start listening")
	}
	return nil
}

// call sends a request (body encoded as JSON unless it is a string or
// []byte; a POST says Content-Type: application/json unless header says
// otherwise) and returns the status and body.
func (s *apiServer) call(method, path string, body any, header ...string) (int, http.Header, []byte) {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(s.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	require.NoError(s.t, err)
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json") // the API takes JSON writes only
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, resp.Header, out
}

// as returns a view of the server that sends token.
func (s *apiServer) as(token string) *apiServer {
	return &apiServer{t: s.t, url: s.url, token: token, cmd: s.cmd, printed: s.printed}
}

// expect calls and requires status, decoding the body into out if given.
func (s *apiServer) expect(status int, out any, method, path string, body any, header ...string) {
	s.t.Helper()
	got, _, raw := s.call(method, path, body, header...)
	require.Equal(s.t, status, got, "%s %s: %s", method, path, raw)
	if out != nil {
		require.NoError(s.t, json.Unmarshal(raw, out), "%s", raw)
	}
}

type apiTask struct {
	ID         uuid.UUID          `json:"id"`
	Type       string             `json:"type"`
	Status     history.Status     `json:"status"`
	Queue      string             `json:"queue"`
	Existing   bool               `json:"existing"`
	Output     json.RawMessage    `json:"output"`
	LastError  *history.ErrorInfo `json:"last_error"`
	Labels     map[string]string  `json:"labels"`
	TraceID    string             `json:"trace_id"`
	MaxAttempt int                `json:"max_attempts"`
}

type apiProblem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Code       string `json:"code"`
	Line       int    `json:"line"`
	Column     int    `json:"column"`
	RetryAfter int    `json:"retry_after_seconds"`
}

func sevenAttempts() *activities.RetryPolicy {
	p := activities.DefaultRetryPolicy
	p.MaxAttempts = 7
	return &p
}

// e2eWorkflows are the workflows the end-to-end tests' worker runs.
type e2eWorkflows struct {
	echo, slow, fragile, booking, approval sdk.WorkflowRef
	fixed                                  atomic.Bool // fragile succeeds once set
	released                               atomic.Int32
}

func startE2EWorker(t *testing.T, schema, namespace string) *e2eWorkflows {
	t.Helper()
	wfs := &e2eWorkflows{}
	echo := sdk.NewWorkflow("e2e.echo", 1, func(ctx workflow.Context, in json.RawMessage) (json.RawMessage, error) {
		return workflow.Step(ctx, "echo", func(context.Context) (json.RawMessage, error) { return in, nil }, nil)
	}, &sdk.WorkflowOpts{Retry: sevenAttempts()})
	slow := sdk.NewWorkflow("e2e.slow", 1, func(ctx workflow.Context, ms int) (string, error) {
		return workflow.Step(ctx, "wait", func(ctx context.Context) (string, error) {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return "waited", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}, nil)
	}, nil)
	fragile := sdk.NewWorkflow("e2e.fragile", 1, func(ctx workflow.Context, _ string) (string, error) {
		return workflow.Step(ctx, "parse", func(context.Context) (string, error) {
			if !wfs.fixed.Load() {
				return "", activities.Permanent(errors.New("parser bug"))
			}
			return "parsed", nil
		}, nil)
	}, nil)
	booking := sdk.NewWorkflow("e2e.booking", 1, func(ctx workflow.Context, _ string) (string, error) {
		return workflow.Step(ctx, "reserve", func(context.Context) (string, error) { return "seat-12", nil },
			&workflow.StepOpts{Compensate: workflow.Compensate(func(context.Context, string) error {
				wfs.released.Add(1)
				return nil
			})})
	}, nil)
	// approval waits up to an hour for the signal "approval" and says what
	// it decided.
	approval := sdk.NewWorkflow("e2e.approval", 1, func(ctx workflow.Context, _ string) (string, error) {
		d, ok, err := workflow.Receive[struct {
			Approved bool   `json:"approved"`
			Comment  string `json:"comment"`
		}](ctx, "approval", time.Hour)
		switch {
		case err != nil:
			return "", err
		case !ok:
			return "timed out", nil
		case d.Approved:
			return "approved: " + d.Comment, nil
		}
		return "rejected: " + d.Comment, nil
	}, nil)
	wfs.echo, wfs.slow, wfs.fragile, wfs.booking, wfs.approval = echo, slow, fragile, booking, approval
	w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: enginetest.Pool(t), Schema: schema, Namespace: namespace,
		Concurrency: 8, PollInterval: 100 * time.Millisecond, RescueInterval: -1})
	require.NoError(t, err)
	sdk.Register(w, echo)
	sdk.Register(w, slow)
	sdk.Register(w, fragile)
	sdk.Register(w, booking)
	sdk.Register(w, approval)
	startWorker(t, w)
	return wfs
}

// start posts a task and returns its id.
func (s *apiServer) start(body map[string]any) uuid.UUID {
	s.t.Helper()
	var res apiTask
	s.expect(http.StatusAccepted, &res, "POST", "/v1/tasks", body)
	require.Equal(s.t, history.StatusPending, res.Status)
	return res.ID
}

// wait long-polls a task until it is finished.
func (s *apiServer) wait(id uuid.UUID) apiTask {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var task apiTask
		s.expect(http.StatusOK, &task, "GET", "/v1/tasks/"+id.String()+"/wait?timeout=5s", nil)
		if task.Status.Terminal() || time.Now().After(deadline) {
			return task
		}
	}
}

func (s *apiServer) historyTypes(id uuid.UUID) ([]history.Type, []history.Event) {
	s.t.Helper()
	var h struct {
		Events []history.Event `json:"events"`
	}
	s.expect(http.StatusOK, &h, "GET", "/v1/tasks/"+id.String()+"/history", nil)
	types := make([]history.Type, len(h.Events))
	for i, e := range h.Events {
		types[i] = e.Type()
	}
	return types, h.Events
}

func TestServerEndToEnd(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	srv := startServer(t, schema)
	wfs := startE2EWorker(t, schema, "default")

	// Submit, and the same idempotency key again: the first task's id.
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	body := map[string]any{"type": "e2e.echo", "input": map[string]int{"x": 1}, "idempotency_key": "order-1",
		"labels": map[string]string{"tenant": "acme"}}
	var first apiTask
	srv.expect(http.StatusAccepted, &first, "POST", "/v1/tasks", body, "traceparent", traceparent)
	var again apiTask
	srv.expect(http.StatusOK, &again, "POST", "/v1/tasks", body)
	require.Equal(t, first.ID, again.ID)
	require.True(t, again.Existing)

	done := srv.wait(first.ID)
	require.Equal(t, history.StatusCompleted, done.Status)
	require.JSONEq(t, `{"x":1}`, string(done.Output))
	require.Equal(t, "acme", done.Labels["tenant"])
	require.Equal(t, traceparent, done.TraceID, "the trace context is stored with the task")
	require.Equal(t, 7, done.MaxAttempt, "the registered type's defaults apply")
	types, events := srv.historyTypes(first.ID)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted, history.TaskCompleted}, types)
	require.Equal(t, traceparent, events[0].Data.(history.TaskScheduledData).TraceID)

	// Cancel a running task.
	slow := srv.start(map[string]any{"type": "e2e.slow", "input": 20000})
	waitFor(t, 10*time.Second, "the slow task to run", func() bool {
		var task apiTask
		srv.expect(http.StatusOK, &task, "GET", "/v1/tasks/"+slow.String(), nil)
		return task.Status == history.StatusRunning
	})
	srv.expect(http.StatusAccepted, nil, "POST", "/v1/tasks/"+slow.String()+"/cancel", map[string]string{"reason": "user clicked stop"})
	require.Equal(t, history.StatusCancelled, srv.wait(slow).Status)
	types, events = srv.historyTypes(slow)
	require.Contains(t, types, history.CancelRequested)
	cancels, ok := srv.metric("cairn_cancellations_total", "type", "e2e.slow")
	require.True(t, ok, "the API's cancel is counted")
	require.Equal(t, 1.0, cancels)
	for _, e := range events {
		if req, ok := e.Data.(history.CancelRequestedData); ok {
			require.Equal(t, "api", req.By)
			require.Equal(t, "user clicked stop", req.Reason)
		}
	}

	// Retry a dead letter once the bug is fixed.
	fragile := srv.start(map[string]any{"type": "e2e.fragile", "input": "doc"})
	require.Equal(t, history.StatusDeadLettered, srv.wait(fragile).Status)
	dead, ok := srv.metric("cairn_queue_tasks", "namespace", "default", "queue", "default", "status", "dead_lettered")
	require.True(t, ok, "queue depth by status is read from the database")
	require.Equal(t, 1.0, dead)
	wfs.fixed.Store(true)
	srv.expect(http.StatusAccepted, nil, "POST", "/v1/tasks/"+fragile.String()+"/retry", map[string]string{"reason": "parser fixed"})
	require.Equal(t, history.StatusCompleted, srv.wait(fragile).Status)

	// Compensate a completed booking.
	booking := srv.start(map[string]any{"type": "e2e.booking", "input": "trip"})
	require.Equal(t, history.StatusCompleted, srv.wait(booking).Status)
	srv.expect(http.StatusAccepted, nil, "POST", "/v1/tasks/"+booking.String()+"/compensate", nil)
	require.Equal(t, history.StatusCancelled, srv.wait(booking).Status)
	types, _ = srv.historyTypes(booking)
	require.Contains(t, types, history.StepCompensated)
	require.Equal(t, int32(1), wfs.released.Load())

	// List with filters, a page at a time.
	var globex []uuid.UUID
	for i := range 5 {
		globex = append(globex, srv.start(map[string]any{"type": "e2e.echo", "input": i, "labels": map[string]string{"tenant": "globex"}}))
	}
	var seen []uuid.UUID
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		var page struct {
			Tasks      []apiTask `json:"tasks"`
			NextCursor string    `json:"next_cursor"`
		}
		srv.expect(http.StatusOK, &page, "GET", "/v1/tasks?type=e2e.echo&limit=2&filter="+
			urlQuery(`task.labels["tenant"] == "globex"`)+"&cursor="+cursor, nil)
		for _, task := range page.Tasks {
			require.Equal(t, "globex", task.Labels["tenant"])
			seen = append(seen, task.ID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.ElementsMatch(t, globex, seen, "every matching task once, across pages")
	// Tasks without the label do not match it, and are no filter error.
	var labelled struct {
		Tasks        []apiTask `json:"tasks"`
		FilterErrors int       `json:"filter_errors"`
		FilterError  string    `json:"filter_error"`
	}
	srv.expect(http.StatusOK, &labelled, "GET", "/v1/tasks?filter="+urlQuery(`task.labels["tenant"] == "globex"`), nil)
	require.Len(t, labelled.Tasks, 5)
	require.Zero(t, labelled.FilterErrors, "the slow, fragile and booking tasks have no labels: not a match, not an error")
	require.Empty(t, labelled.FilterError)

	// A long poll on a task that does not finish answers at its timeout
	// with the task as it is.
	later := srv.start(map[string]any{"type": "e2e.echo", "input": "later", "delay": "1h"})
	var pending apiTask
	srv.expect(http.StatusOK, &pending, "GET", "/v1/tasks/"+later.String()+"/wait?timeout=200ms", nil)
	require.Equal(t, history.StatusPending, pending.Status)
	srv.expect(http.StatusAccepted, nil, "POST", "/v1/tasks/"+later.String()+"/cancel", nil)
	var cancelled struct {
		Tasks []apiTask `json:"tasks"`
	}
	srv.expect(http.StatusOK, &cancelled, "GET", "/v1/tasks?status=cancelled", nil)
	require.Len(t, cancelled.Tasks, 3, "the slow task, the compensated booking, the delayed one")

	var queues struct {
		Queues []struct {
			Queue     string `json:"queue"`
			Completed int    `json:"completed"`
		} `json:"queues"`
	}
	srv.expect(http.StatusOK, &queues, "GET", "/v1/queues?window=1h", nil)
	require.Len(t, queues.Queues, 1)
	require.Equal(t, "default", queues.Queues[0].Queue)
	require.GreaterOrEqual(t, queues.Queues[0].Completed, 2)

	// Audit: the events the filter matches, as JSON lines.
	status, h, raw := srv.call("GET", "/v1/events?since=1h&filter="+urlQuery(`event.type == "cancel_requested" && event.data.reason == "user clicked stop"`), nil)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, "application/x-ndjson", h.Get("Content-Type"))
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 1, "%s", raw)
	var rec struct {
		Event struct {
			Type history.Type `json:"type"`
		} `json:"event"`
		Task struct {
			ID   uuid.UUID `json:"id"`
			Type string    `json:"type"`
		} `json:"task"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec))
	require.Equal(t, slow, rec.Task.ID)
	require.Equal(t, history.CancelRequested, rec.Event.Type)
	status, _, raw = srv.call("GET", "/v1/events?since=1h&filter="+urlQuery(`event.type == "task_completed"`)+"&limit=2", nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, strings.Split(strings.TrimSpace(string(raw)), "\n"), 2, "the limit holds")

	var diagnosis struct {
		Queue   string            `json:"queue"`
		Causes  []json.RawMessage `json:"causes"`
		Summary string            `json:"summary"`
	}
	srv.expect(http.StatusOK, &diagnosis, "GET", "/v1/queues/default/diagnosis?window=1m", nil)
	require.Equal(t, "default", diagnosis.Queue)
	require.NotEmpty(t, diagnosis.Summary)
	srv.expect(http.StatusOK, nil, "GET", "/healthz", nil)
	srv.expect(http.StatusOK, nil, "GET", "/readyz", nil)
	for _, id := range append(seen, first.ID) {
		srv.wait(id)
	}
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema))
}

func urlQuery(s string) string {
	r := strings.NewReplacer("%", "%25", " ", "%20", "\"", "%22", "&", "%26", "=", "%3D", "+", "%2B", "[", "%5B", "]", "%5D", "#", "%23")
	return r.Replace(s)
}

// metric returns the value of the sample of name with the given labels in
// the server's /metrics, after checking the whole exposition passes the
// linter promtool check metrics runs.
func (s *apiServer) metric(name string, labels ...string) (float64, bool) {
	s.t.Helper()
	status, _, raw := s.call("GET", "/metrics", nil)
	require.Equal(s.t, http.StatusOK, status)
	problems, err := promlint.New(bytes.NewReader(raw)).Lint()
	require.NoError(s.t, err)
	require.Empty(s.t, problems, "promlint")
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		matches := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`) {
				matches = false
			}
		}
		if matches {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			require.NoError(s.t, err, line)
			return v, true
		}
	}
	return 0, false
}

// writeTokens writes a tokens file holding the given tokens' hashes.
func writeTokens(t *testing.T, entries []map[string]any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.json")
	raw, err := json.Marshal(map[string]any{"tokens": entries})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	return path
}

func hashOf(token string) string {
	out, err := exec.Command("sh", "-c", "printf %s \"$0\" | sha256sum | cut -d' ' -f1", token).Output()
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(out))
}

// Every error status, with its problem code, and the task count unchanged
// after each rejected request.
func TestServerErrors(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	tokens := writeTokens(t, []map[string]any{
		{"name": "admin", "sha256": hashOf("admin-token"), "namespaces": []string{"*"}, "roles": []string{"admin"}},
		{"name": "reader", "sha256": hashOf("read-token"), "namespaces": []string{"default"}, "roles": []string{"read"}},
		{"name": "tenant-a", "sha256": hashOf("a-token"), "namespaces": []string{"tenant-a"}, "roles": []string{"submit", "read"}},
		{"name": "submitter", "sha256": hashOf("submit-token"), "namespaces": []string{"default"}, "roles": []string{"submit"}},
		{"name": "operator-b", "sha256": hashOf("op-b-token"), "namespaces": []string{"tenant-b"}, "roles": []string{"operate"}},
	})
	base := startServer(t, schema, "--tokens", tokens, "--max-payload-bytes", "1024")
	admin := base.as("admin-token")
	startE2EWorker(t, schema, "default")
	client := newClient(t, schema)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "the worker to register its types", func() bool {
		types, err := client.TaskTypes(ctx)
		return err == nil && len(types) == 5
	})

	done := admin.start(map[string]any{"type": "e2e.echo", "input": "x"})
	require.Equal(t, history.StatusCompleted, admin.wait(done).Status)
	other, err := sdk.NewClient(sdk.ClientConfig{Pool: enginetest.Pool(t), Schema: schema, Namespace: "tenant-b"})
	require.NoError(t, err)
	inB, err := other.StartDynamic(ctx, sdk.TypeRef{Name: "e2e.echo", Version: 1}, "b", nil)
	require.NoError(t, err)
	require.NoError(t, client.SetQueue(ctx, "tiny", sdk.QueueSettings{MaxWaiting: 1}))
	admin.start(map[string]any{"type": "e2e.echo", "queue": "tiny", "input": "fills it", "delay": "1h"})

	// What a rejected request must leave alone: every task and every event.
	count := func() [2]int {
		var n [2]int
		require.NoError(t, enginetest.Pool(t).QueryRow(ctx, "SELECT (SELECT count(*) FROM "+schema+".tasks), (SELECT count(*) FROM "+schema+".events)").
			Scan(&n[0], &n[1]))
		return n
	}
	before := count()
	big := `{"type":"e2e.echo","input":"` + strings.Repeat("x", 2000) + `"}`
	huge := `{"type":"e2e.echo","input":"` + strings.Repeat("x", 200_000) + `"}`
	for _, c := range []struct {
		name   string
		srv    *apiServer
		method string
		path   string
		body   any
		status int
		code   string
	}{
		{"malformed JSON", admin, "POST", "/v1/tasks", `{"type": "e2e.echo",`, 400, "malformed_json"},
		{"not an object", admin, "POST", "/v1/tasks", `[1, 2]`, 400, "invalid_request"},
		{"two values", admin, "POST", "/v1/tasks", `{"type":"e2e.echo"} {}`, 400, "malformed_json"},
		{"unknown field", admin, "POST", "/v1/tasks", `{"type":"e2e.echo","colour":"red"}`, 400, "unknown_field"},
		{"unknown task type", admin, "POST", "/v1/tasks", `{"type":"e2e.nope"}`, 400, "unknown_task_type"},
		{"no type", admin, "POST", "/v1/tasks", `{"input":1}`, 400, "invalid_request"},
		{"bad delay", admin, "POST", "/v1/tasks", `{"type":"e2e.echo","delay":"soon"}`, 400, "invalid_request"},
		{"bad label", admin, "POST", "/v1/tasks", `{"type":"e2e.echo","labels":{"no spaces":"x"}}`, 400, "invalid_request"},
		{"bad traceparent", admin, "POST", "/v1/tasks", `{"type":"e2e.echo"}`, 400, "invalid_request"},
		{"text/plain body", admin, "POST", "/v1/tasks", `{"type":"e2e.echo"}`, 415, "unsupported_media_type"},
		{"bad CEL", admin, "GET", "/v1/tasks?filter=" + urlQuery(`task.type == `), nil, 400, "bad_filter"},
		{"diagnosis window too long", admin, "GET", "/v1/queues/default/diagnosis?window=48h", nil, 400, "invalid_request"},
		{"bad audit CEL", admin, "GET", "/v1/events?filter=" + urlQuery(`event.nope`), nil, 400, "bad_filter"},
		{"bad audit range", admin, "GET", "/v1/events?since=yesterday", nil, 400, "invalid_request"},
		{"bad id", admin, "GET", "/v1/tasks/not-a-uuid", nil, 400, "invalid_request"},
		{"unknown task", admin, "GET", "/v1/tasks/" + uuid.New().String(), nil, 404, "not_found"},
		{"retry a completed task", admin, "POST", "/v1/tasks/" + done.String() + "/retry", nil, 409, "task_state"},
		{"input over the limit", admin, "POST", "/v1/tasks", big, 413, "payload_too_large"},
		{"body over the limit", admin, "POST", "/v1/tasks", huge, 413, "payload_too_large"},
		{"queue full", admin, "POST", "/v1/tasks", `{"type":"e2e.echo","queue":"tiny"}`, 429, "queue_full"},
		{"no token", base, "GET", "/v1/tasks", nil, 401, "unauthorized"},
		{"unknown token", base.as("guess"), "GET", "/v1/tasks", nil, 401, "unauthorized"},
		{"read-only token submits", base.as("read-token"), "POST", "/v1/tasks", `{"type":"e2e.echo"}`, 403, "forbidden"},
		{"read-only token cancels", base.as("read-token"), "POST", "/v1/tasks/" + done.String() + "/cancel", nil, 403, "forbidden"},
		{"submit-only token reads", base.as("submit-token"), "GET", "/v1/tasks/" + done.String(), nil, 403, "forbidden"},
		{"submit-only token retries", base.as("submit-token"), "POST", "/v1/tasks/" + done.String() + "/retry", nil, 403, "forbidden"},
		{"operator of another namespace cancels", base.as("op-b-token"), "POST", "/v1/tasks/" + done.String() + "/cancel", nil, 404, "not_found"},
		{"priority out of range", admin, "POST", "/v1/tasks", `{"type":"e2e.echo","priority":99999999999}`, 400, "invalid_request"},
		{"NUL in the input", admin, "POST", "/v1/tasks", `{"type":"e2e.echo","input":"a\u0000b"}`, 400, "invalid_request"},
		{"NUL in the key", admin, "POST", "/v1/tasks", `{"type":"e2e.echo","idempotency_key":"a\u0000b"}`, 400, "invalid_request"},
		{"trace id too long", admin, "POST", "/v1/tasks", `{"type":"e2e.echo","trace_id":"` + strings.Repeat("f", 600) + `"}`, 400, "invalid_request"},
		{"trailing garbage", admin, "POST", "/v1/tasks", `{"type":"e2e.echo"}]`, 400, "malformed_json"},
		{"bad namespace", admin, "GET", "/v1/tasks?namespace=" + urlQuery("a b"), nil, 400, "invalid_request"},
		{"token of another namespace", base.as("a-token"), "GET", "/v1/tasks/" + inB.ID.String(), nil, 404, "not_found"},
		{"namespace not in the token", base.as("a-token"), "GET", "/v1/tasks?namespace=tenant-b", nil, 403, "forbidden"},
	} {
		header := []string{}
		switch c.name {
		case "bad traceparent":
			header = []string{"traceparent", "not-a-trace"}
		case "text/plain body":
			header = []string{"Content-Type", "text/plain"}
		}
		status, h, raw := c.srv.call(c.method, c.path, c.body, header...)
		require.Equal(t, c.status, status, "%s: %s", c.name, raw)
		require.Equal(t, "application/problem+json", h.Get("Content-Type"), c.name)
		var p apiProblem
		require.NoError(t, json.Unmarshal(raw, &p), "%s: %s", c.name, raw)
		require.Equal(t, c.code, p.Code, "%s: %s", c.name, raw)
		require.Equal(t, c.status, p.Status, c.name)
		require.Equal(t, "urn:cairn:problem:"+c.code, p.Type, c.name)
		require.NotEmpty(t, p.Title, c.name)
		switch c.code {
		case "queue_full":
			require.NotEmpty(t, h.Get("Retry-After"), c.name)
			require.Positive(t, p.RetryAfter, c.name)
		case "unauthorized":
			require.Equal(t, `Bearer realm="cairn"`, h.Get("WWW-Authenticate"), c.name)
		case "bad_filter":
			require.Equal(t, 1, p.Line, "%s: %s", c.name, raw)
			require.Positive(t, p.Column, "%s: %s", c.name, raw)
		}
		require.Equal(t, before, count(), "%s: nothing written", c.name)
	}

	// Metrics cover every namespace: a token that reads them all may read
	// them, no other; the full queue's depth comes from the database.
	status, _, _ := base.call("GET", "/metrics", nil)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = base.as("read-token").call("GET", "/metrics", nil)
	require.Equal(t, http.StatusForbidden, status)
	pending, ok := admin.metric("cairn_queue_tasks", "queue", "tiny", "status", "pending")
	require.True(t, ok)
	require.Equal(t, 1.0, pending)

	// The scheme is case-insensitive.
	status, _, _ = base.call("GET", "/v1/tasks/"+done.String(), nil, "Authorization", "bearer read-token")
	require.Equal(t, http.StatusOK, status)

	// The reader reads; a tenant's token works in its namespace.
	var task apiTask
	base.as("read-token").expect(http.StatusOK, &task, "GET", "/v1/tasks/"+done.String(), nil)
	require.Equal(t, history.StatusCompleted, task.Status)
	var types struct {
		TaskTypes []map[string]any `json:"task_types"`
	}
	base.as("read-token").expect(http.StatusOK, &types, "GET", "/v1/task-types", nil)
	require.Len(t, types.TaskTypes, 5)
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema))
}

// A server told to stop answers its open long polls with the task as it
// is and exits cleanly, rather than cutting them off at the shutdown
// timeout.
func TestServerShutdownAnswersLongPolls(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	srv := startServer(t, schema, "--shutdown-timeout", "20s")
	startE2EWorker(t, schema, "default")
	later := srv.start(map[string]any{"type": "e2e.echo", "input": "x", "delay": "1h"})
	answered := make(chan apiTask, 1)
	go func() {
		var task apiTask
		status, _, raw := srv.call("GET", "/v1/tasks/"+later.String()+"/wait?timeout=5m", nil)
		if status == http.StatusOK {
			_ = json.Unmarshal(raw, &task)
		}
		answered <- task
	}()
	time.Sleep(300 * time.Millisecond) // the poll is waiting
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case task := <-answered:
		require.Equal(t, history.StatusPending, task.Status, "the poll got the task as it is")
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll was not answered at shutdown")
	}
	require.NoError(t, srv.cmd.Wait(), "the server exits cleanly")
}
