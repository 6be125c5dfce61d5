package integration_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// ocrPage is a page as the example workers read it: how long to take,
// and what error to raise.
type ocrPage struct {
	Page    int    `json:"page"`
	DelayMS int    `json:"delay_ms,omitempty"`
	Error   string `json:"error,omitempty"`
}

type ocrText struct {
	Page   int    `json:"page"`
	Text   string `json:"text"`
	Worker string `json:"worker"`
}

type ocrDocument struct {
	Queue string    `json:"queue"`
	Pages []ocrPage `json:"pages"`
}

// ocrPolicy is the remote steps' CEL classifier: an error the worker's
// language calls ValueError or TypeError (a bug: no retry fixes it) is
// permanent, the rest transient.
var ocrPolicy = activities.MustPolicy("ocr", `error.kind in ["ValueError", "TypeError"] ? "permanent" : "transient"`)

// ocrWorkflow reads a document's pages in parallel on remote workers.
var ocrWorkflow = sdk.NewWorkflow("ocr.document", 1, func(ctx workflow.Context, doc ocrDocument) ([]ocrText, error) {
	return workflow.MapRemote[ocrPage, ocrText](ctx, "ocr.page", doc.Pages, &workflow.RemoteOpts{
		Queue: doc.Queue, HeartbeatTimeout: 2 * time.Second,
		Retry: &activities.RetryPolicy{MaxAttempts: 3, InitialInterval: 20 * time.Millisecond, MaxInterval: 50 * time.Millisecond, Classifier: ocrPolicy},
	})
}, nil)

// remoteWorker is an example worker process (Python or TypeScript) and
// the events it printed.
type remoteWorker struct {
	id  string
	cmd *exec.Cmd
	got chan map[string]any // every event, as printed
}

// startRemoteWorker runs an example worker with args and the token,
// stopped when the test ends.
func startRemoteWorker(t *testing.T, id, token string, name string, args ...string) *remoteWorker {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "CAIRN_TOKEN="+token)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = &testLog{t: t, prefix: id + ": "}
	require.NoError(t, cmd.Start())
	w := &remoteWorker{id: id, cmd: cmd, got: make(chan map[string]any, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e map[string]any
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				t.Log(id + " says: " + sc.Text())
				continue
			}
			select {
			case w.got <- e:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		<-done
	})
	return w
}

// await waits for the worker's event of kind.
func (w *remoteWorker) await(t *testing.T, kind string) map[string]any {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case e := <-w.got:
			if e["event"] == kind {
				return e
			}
		case <-deadline:
			t.Fatalf("worker %s printed no %q event", w.id, kind)
		}
	}
}

// testLog writes a process's stderr to the test's log.
type testLog struct {
	t      *testing.T
	prefix string
}

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Log(l.prefix + string(p))
	return len(p), nil
}

// buildTypeScriptWorker builds clients/typescript once (npm ci, tsc) and
// returns the example worker's script.
func buildTypeScriptWorker(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(filepath.Dir(file)), "clients", "typescript")
	tsOnce.Do(func() {
		for _, args := range [][]string{{"ci", "--no-audit", "--no-fund"}, {"run", "build"}} {
			cmd := exec.Command("npm", args...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				tsErr = &buildError{what: "npm " + args[0], out: string(out), err: err}
				return
			}
		}
	})
	require.NoError(t, tsErr)
	return filepath.Join(dir, "dist", "examples", "ocr_worker.js")
}

var (
	tsOnce sync.Once
	tsErr  error
)

type buildError struct {
	what, out string
	err       error
}

func (e *buildError) Error() string { return e.what + ": " + e.err.Error() + "\n" + e.out }

func pythonWorker() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "clients", "python", "examples", "ocr_worker.py")
}

// TestRemoteOCRInThreeLanguages: a Go workflow's parallel map of 20
// remote OCR steps, served by two Python workers and a TypeScript one
// over a real `cairn server`. One Python worker is SIGKILLed mid-step:
// every step completes once in the history, the killed worker's claim
// fails when its lease ends and its step runs again elsewhere, and the
// killed claim's late answer, replayed by the test, is refused.
func TestRemoteOCRInThreeLanguages(t *testing.T) {
	t.Parallel()
	script := buildTypeScriptWorker(t)
	schema := enginetest.Schema(t)
	const adminToken, workerToken = "admin-secret", "ocr-workers-secret"
	tokens := writeTokens(t, []map[string]any{
		{"name": "admin", "sha256": hashOf(adminToken), "namespaces": []string{"*"}, "roles": []string{"admin"}},
		{"name": "ocr", "sha256": hashOf(workerToken), "namespaces": []string{"default"}, "roles": []string{"work"},
			"queues": []string{"ocr", "ocr-py", "ocr-ts"}},
	})
	srv := startServer(t, schema, "--tokens", tokens)
	startOCRWorker(t, schema)
	admin, worker := srv.as(adminToken), srv.as(workerToken)

	py1 := startRemoteWorker(t, "py-1", workerToken, "python3", pythonWorker(), "--url", srv.url, "--queue", "ocr", "--concurrency", "2", "--worker-id", "py-1")
	py1.await(t, "ready")

	pages := make([]ocrPage, 20)
	for i := range pages {
		pages[i] = ocrPage{Page: i + 1, DelayMS: 300}
	}
	id := admin.start(map[string]any{"type": "ocr.document", "input": ocrDocument{Queue: "ocr", Pages: pages}})
	// py-1 takes the first steps; it dies holding one mid-step.
	killed := py1.await(t, "claimed")
	require.NoError(t, py1.cmd.Process.Signal(syscall.SIGKILL))
	py2 := startRemoteWorker(t, "py-2", workerToken, "python3", pythonWorker(), "--url", srv.url, "--queue", "ocr", "--concurrency", "2", "--worker-id", "py-2")
	ts1 := startRemoteWorker(t, "ts-1", workerToken, "node", script, "--url", srv.url, "--queue", "ocr", "--concurrency", "2", "--worker-id", "ts-1")

	done := admin.wait(id)
	require.Equal(t, history.StatusCompleted, done.Status, "%s", done.Output)
	var texts []ocrText
	require.NoError(t, json.Unmarshal(done.Output, &texts))
	require.Len(t, texts, 20)
	by := map[string]int{}
	for i, tx := range texts {
		require.Equal(t, i+1, tx.Page)
		by[tx.Worker]++
	}
	require.Positive(t, by["py-2"], "py-2 did steps: %v", by)
	require.Positive(t, by["ts-1"], "ts-1 did steps: %v", by)

	// The history: every step completed once; the killed claim failed
	// with heartbeat_timeout, and its step ran again as attempt 2.
	_, events := admin.historyTypes(id)
	completed := map[int]int{}
	var lost []history.RemoteStepFailedData
	for _, e := range events {
		switch d := e.Data.(type) {
		case history.RemoteStepCompletedData:
			completed[d.Position]++
			// Each worker wrote the page's progress chunk, which the
			// completion ended and recorded.
			require.Len(t, d.Streams, 1, "step %d by %s", d.Position, d.Worker)
			require.Equal(t, "progress", d.Streams[0].Name)
			require.EqualValues(t, 1, d.Streams[0].Chunks)
			require.Equal(t, history.StreamCompleted, d.Streams[0].Outcome)
		case history.RemoteStepFailedData:
			lost = append(lost, d)
		}
	}
	require.Len(t, completed, 20)
	for pos, n := range completed {
		require.Equal(t, 1, n, "step %d completed once", pos)
	}
	require.NotEmpty(t, lost, "the killed worker's claims failed")
	killedPos := int(killed["position"].(float64))
	found := false
	for _, f := range lost {
		require.Equal(t, "heartbeat_timeout", f.Error.Kind)
		require.Equal(t, "py-1", f.Worker)
		found = found || f.Position == killedPos
	}
	require.True(t, found, "the step py-1 died in (%d) failed with its lease: %+v", killedPos, lost)
	for _, e := range events {
		if d, ok := e.Data.(history.RemoteStepCompletedData); ok && d.Position == killedPos {
			require.Equal(t, 2, d.Attempt, "the lost claim's step ran again")
			require.NotEqual(t, "py-1", d.Worker)
		}
	}

	// The killed claim's answer, replayed now, is refused.
	claim := killed["claim"].(string)
	status, _, body := worker.call("POST", "/v1/remote-steps/"+url.PathEscape(claim)+"/complete", `{"output":{"page":0,"text":"late","worker":"py-1"}}`)
	require.Equal(t, http.StatusConflict, status, "%s", body)
	require.Contains(t, string(body), "claim_lost")
	_ = py2
	_ = ts1
}

// TestRemoteErrorsClassifiedAsInGo: errors raised in Python and in
// TypeScript are classified by the step's CEL policy, or by the class
// the worker marked, exactly as a Go step's, with the evidence in the
// history.
func TestRemoteErrorsClassifiedAsInGo(t *testing.T) {
	t.Parallel()
	script := buildTypeScriptWorker(t)
	schema := enginetest.Schema(t)
	srv := startServer(t, schema)
	startOCRWorker(t, schema)
	startRemoteWorker(t, "py", "", "python3", pythonWorker(), "--url", srv.url, "--queue", "ocr-py", "--worker-id", "py").await(t, "ready")
	startRemoteWorker(t, "ts", "", "node", script, "--url", srv.url, "--queue", "ocr-ts", "--worker-id", "ts").await(t, "ready")

	for _, c := range []struct {
		queue, error, kind, classifiedBy string
		class                            history.Class
		attempts                         int
	}{
		{"ocr-py", "unmarked", "ValueError", "policy:ocr", history.Permanent, 1},
		{"ocr-ts", "unmarked", "TypeError", "policy:ocr", history.Permanent, 1},
		{"ocr-py", "permanent", "BadInput", "mark:permanent", history.Permanent, 1},
		{"ocr-ts", "permanent", "BadInput", "mark:permanent", history.Permanent, 1},
		{"ocr-py", "transient", "Unavailable", "mark:transient", history.Transient, 3},
		{"ocr-ts", "transient", "Unavailable", "mark:transient", history.Transient, 3},
	} {
		id := srv.start(map[string]any{"type": "ocr.document", "input": ocrDocument{Queue: c.queue, Pages: []ocrPage{{Page: 1, Error: c.error}}}})
		done := srv.wait(id)
		require.Equal(t, history.StatusDeadLettered, done.Status, "%s %s", c.queue, c.error)
		_, events := srv.historyTypes(id)
		var failed []history.RemoteStepFailedData
		var classified []history.ErrorInfo
		for _, e := range events {
			switch d := e.Data.(type) {
			case history.RemoteStepFailedData:
				failed = append(failed, d)
			case history.AttemptFailedData:
				classified = append(classified, d.Error)
			}
		}
		require.Len(t, failed, c.attempts, "%s %s: one remote attempt per try", c.queue, c.error)
		last := classified[len(classified)-1]
		require.Equal(t, c.class, last.Class, "%s %s", c.queue, c.error)
		require.Equal(t, c.kind, last.Kind, "%s %s", c.queue, c.error)
		require.Equal(t, c.classifiedBy, last.ClassifiedBy, "%s %s", c.queue, c.error)
		require.Equal(t, "ocr.page", last.Step)
		require.NotEmpty(t, failed[0].Error.Attrs["type"], "the worker's error type is in the evidence")
	}
}

// startOCRWorker runs the Go worker of ocr.document on schema.
func startOCRWorker(t *testing.T, schema string) {
	t.Helper()
	w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: enginetest.Pool(t), Schema: schema, Concurrency: 4, PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	sdk.Register(w, ocrWorkflow)
	startWorker(t, w)
}

// The clients' own tests, run by the project's test command: the Python
// worker's unittest suite and the TypeScript worker's node:test suite,
// each against a fake server of its own.
func TestPythonWorkerClient(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("python3", "-m", "unittest")
	cmd.Dir = filepath.Dir(filepath.Dir(pythonWorker()))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "OK")
}

func TestTypeScriptWorkerClient(t *testing.T) {
	t.Parallel()
	script := buildTypeScriptWorker(t)
	// The suite as `npm test` runs it, on the build buildTypeScriptWorker
	// made: rebuilding here would rewrite files the other tests' workers
	// are loading.
	cmd := exec.Command("node", "--test", "dist/test/worker.test.js")
	cmd.Dir = filepath.Dir(filepath.Dir(filepath.Dir(script)))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "# fail 0")
}
