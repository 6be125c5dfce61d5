package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// seedTasks starts n tasks in the target's namespace and returns their ids
// as listings order them, newest first.
func seedTasks(t *testing.T, tg cliTarget, n int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	tg.withStore(t, func(s store.Store) {
		c, err := sdk.NewClient(sdk.ClientConfig{Store: s, Namespace: "clitest"})
		require.NoError(t, err)
		defer c.Close()
		starts := make([]sdk.StartParams, n)
		for i := range starts {
			starts[i] = sdk.StartParams{Workflow: sdk.TypeRef{Name: "cli.test", Version: 1}, Input: map[string]int{"i": i}}
		}
		res, err := c.StartMany(context.Background(), starts)
		require.NoError(t, err)
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	})
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return -bytes.Compare(a[:], b[:]) })
	return ids
}

// jsonIDs decodes `task list -o json` and returns the ids in order.
func jsonIDs(t *testing.T, stdout string) []uuid.UUID {
	t.Helper()
	var tasks []sdk.TaskInfo
	require.NoError(t, json.Unmarshal([]byte(stdout), &tasks), "stdout is one JSON array: %s", stdout)
	ids := make([]uuid.UUID, len(tasks))
	for i, task := range tasks {
		ids[i] = task.ID
	}
	return ids
}

// tableIDs returns the ID column of `task list`'s table, checking the
// header comes once, first.
func tableIDs(t *testing.T, stdout string) []uuid.UUID {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.True(t, strings.HasPrefix(lines[0], "ID "), "header first: %q", lines[0])
	var ids []uuid.UUID
	for _, line := range lines[1:] {
		id, err := uuid.Parse(strings.Fields(line)[0])
		require.NoError(t, err, "a row starts with a task id: %q", line)
		ids = append(ids, id)
	}
	return ids
}

var moreRE = regexp.MustCompile(`^more tasks: --cursor (\S+) \(or --all\)\n$`)

// nextCursor returns the cursor of the "more tasks" line, the whole of
// stderr.
func nextCursor(t *testing.T, stderr string) string {
	t.Helper()
	m := moreRE.FindStringSubmatch(stderr)
	require.NotNil(t, m, "stderr says more tasks remain, with the cursor: %q", stderr)
	return m[1]
}

func TestCLITaskListPages(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			want := seedTasks(t, tg, 23)

			// A page, then the next from the cursor it printed.
			out, errOut := tg.mustRun(t, "task", "list", "--limit", "5", "-o", "json")
			require.Equal(t, want[:5], jsonIDs(t, out))
			cursor := nextCursor(t, errOut)
			require.Equal(t, want[4].String(), cursor, "the cursor is the page's last task")
			out, errOut = tg.mustRun(t, "task", "list", "--limit", "5", "--cursor", cursor, "-o", "json")
			require.Equal(t, want[5:10], jsonIDs(t, out), "the cursor resumes where the page ended")
			require.Equal(t, want[9].String(), nextCursor(t, errOut))

			// The same as a table.
			out, errOut = tg.mustRun(t, "task", "list", "--limit", "5")
			require.Equal(t, want[:5], tableIDs(t, out))
			out, _ = tg.mustRun(t, "task", "list", "--limit", "5", "--cursor", nextCursor(t, errOut))
			require.Equal(t, want[5:10], tableIDs(t, out))

			// A full last page: no more tasks, so no cursor.
			out, errOut = tg.mustRun(t, "task", "list", "--limit", "5", "--cursor", want[17].String(), "-o", "json")
			require.Equal(t, want[18:], jsonIDs(t, out))
			require.Empty(t, errOut)
			out, errOut = tg.mustRun(t, "task", "list", "--limit", "1000")
			require.Equal(t, want, tableIDs(t, out), "--limit 1000, the real bound, is accepted")
			require.Empty(t, errOut)

			// Nothing to list: still one JSON array, and a table header.
			out, errOut = tg.mustRun(t, "task", "list", "--status", "completed", "-o", "json")
			require.JSONEq(t, "[]", out)
			require.Empty(t, errOut)
			out, _ = tg.mustRun(t, "task", "list", "--status", "completed", "--all")
			require.Empty(t, tableIDs(t, out))
		})
	}
}

func TestCLITaskListAll(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			want := seedTasks(t, tg, 23)
			for _, args := range [][]string{
				{"--all", "--limit", "5", "-o", "json"}, // 5 pages, the last short
				{"--all", "--limit", "1", "-o", "json"}, // a page per task
				{"--all", "-o", "json"},                 // one page of MaxListLimit
			} {
				out, errOut := tg.mustRun(t, append([]string{"task", "list"}, args...)...)
				require.Equal(t, want, jsonIDs(t, out), "every task exactly once, newest first (%v)", args)
				require.Empty(t, errOut, "--all leaves nothing for later")
			}
			out, errOut := tg.mustRun(t, "task", "list", "--all", "--limit", "4")
			require.Equal(t, want, tableIDs(t, out))
			require.Empty(t, errOut)
			out, _ = tg.mustRun(t, "task", "list", "--all", "--limit", "4", "--cursor", want[10].String(), "-o", "json")
			require.Equal(t, want[11:], jsonIDs(t, out), "--all from a cursor lists the rest")
		})
	}
}

// TestCLITaskListCursorIsTheAPIs checks that a cursor the CLI prints pages
// GET /v1/tasks and the API's next_cursor pages the CLI.
func TestCLITaskListCursorIsTheAPIs(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			want := seedTasks(t, tg, 12)
			_, errOut := tg.mustRun(t, "task", "list", "--limit", "4")
			cliCursor := nextCursor(t, errOut)

			type apiPage struct {
				Tasks      []sdk.TaskInfo `json:"tasks"`
				NextCursor string         `json:"next_cursor"`
			}
			get := func(s store.Store, query string) apiPage {
				srv, err := server.New(server.Config{Store: s})
				require.NoError(t, err)
				defer func() { _ = srv.Stop(context.Background()) }()
				rec := httptest.NewRecorder()
				// A tokenless server answers loopback hosts only, not httptest's example.com.
				srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/v1/tasks?namespace=clitest&"+query, nil))
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				var p apiPage
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
				return p
			}
			var apiCursor string
			tg.withStore(t, func(s store.Store) {
				first := get(s, "limit=4")
				require.Equal(t, cliCursor, first.NextCursor, "the API's first page ends where the CLI's does")
				second := get(s, "limit=4&cursor="+cliCursor)
				require.Len(t, second.Tasks, 4)
				require.Equal(t, want[4], second.Tasks[0].ID, "the CLI's cursor pages the API")
				apiCursor = second.NextCursor
			})
			out, _ := tg.mustRun(t, "task", "list", "--limit", "4", "--cursor", apiCursor, "-o", "json")
			require.Equal(t, want[8:], jsonIDs(t, out), "the API's next_cursor pages the CLI")
		})
	}
}

func TestCLITaskListRefusesBadFlags(t *testing.T) {
	tg := cliTargets["embedded"](t)
	bound := strconv.Itoa(sdk.MaxListLimit)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--limit", "100000"}, "--limit 100000: use 1 to " + bound + " (--all lists every task, page by page)"},
		{[]string{"--limit", "1001"}, "--limit 1001: use 1 to " + bound},
		{[]string{"--limit", "0", "--all"}, "--limit 0: use 1 to " + bound},
		{[]string{"--cursor", "nope"}, `--cursor "nope": not a cursor of a task listing`},
	} {
		_, _, err := tg.run(t, append([]string{"task", "list"}, tc.args...)...)
		require.True(t, errors.Is(err, configError), "%v: a configuration error (exit 2): %v", tc.args, err)
		require.ErrorContains(t, err, tc.msg)
	}
	require.Equal(t, 1000, sdk.MaxListLimit, "the README and the API's docs say 1000")
}

// TestTaskListPrinterJSONIsPrintJSON checks the streamed array is laid out
// as printJSON lays out the same slice.
func TestTaskListPrinterJSONIsPrintJSON(t *testing.T) {
	t.Parallel()
	tasks := []*sdk.TaskInfo{
		{ID: uuid.New(), Type: "a<b>&c", Output: json.RawMessage(`{"x": [1, 2]}`)},
		{ID: uuid.New(), Type: "b"},
		{ID: uuid.New(), Type: "c"},
	}
	var want bytes.Buffer
	root := newRootCmd()
	root.SetOut(&want)
	shown := make([]listedTask, len(tasks))
	for i, task := range tasks {
		shown[i] = listed(task, false, true) // as --include output lists them
	}
	require.NoError(t, printJSON(root, shown))
	var got bytes.Buffer
	p := newTaskListPrinter(&got, true)
	p.output = true
	require.NoError(t, p.page(tasks[:2]))
	require.NoError(t, p.page(nil))
	require.NoError(t, p.page(tasks[2:]))
	require.NoError(t, p.end())
	require.Equal(t, want.String(), got.String())
}

// A listing's JSON carries the payloads --include names, and only those.
func TestListedTaskCarriesWhatIsIncluded(t *testing.T) {
	t.Parallel()
	task := &sdk.TaskInfo{ID: uuid.New(), Type: "a", Input: json.RawMessage(`{"in":1}`)}
	fields := func(input, output bool) map[string]json.RawMessage {
		b, err := json.Marshal(listed(task, input, output))
		require.NoError(t, err)
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	lean := fields(false, false)
	require.NotContains(t, lean, "input")
	require.NotContains(t, lean, "output")
	require.Contains(t, lean, "type")
	require.JSONEq(t, `{"in":1}`, string(fields(true, false)["input"]))
	require.NotContains(t, fields(true, false), "output")
	require.Equal(t, "null", string(fields(false, true)["output"]))
	_, _, err := parseInclude([]string{"labels"})
	require.Error(t, err)
}

// `cairn task signal` appends signal_received, once per dedup id, and a
// finished task refuses it; the history shows the signal.
func TestCLITaskSignal(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			id := seedTasks(t, tg, 1)[0].String()
			out, _ := tg.mustRun(t, "task", "signal", id, "approval", "--payload", `{"ok":true}`, "--dedup-id", "click-1")
			require.Equal(t, "task "+id+": signal approval sent\n", out)
			out, _ = tg.mustRun(t, "task", "signal", id, "approval", "--payload", `{"ok":true}`, "--dedup-id", "click-1", "-o", "json")
			var res map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &res))
			require.Equal(t, true, res["duplicate"], "the dedup id was seen: nothing sent")
			out, _ = tg.mustRun(t, "task", "history", id)
			require.Contains(t, out, `signal_received`)
			require.Contains(t, out, "(dedup id click-1)")
			require.Equal(t, 1, strings.Count(out, "signal_received"))

			_, _, err := tg.run(t, "task", "signal", id, "approval", "--payload", "{")
			require.ErrorContains(t, err, "is not JSON")
			tg.mustRun(t, "task", "cancel", id)
			_, _, err = tg.run(t, "task", "signal", id, "approval")
			require.ErrorIs(t, err, sdk.ErrTaskState)
		})
	}
}

// TestCLITaskShowNamesTheBudget: a task recorded without a retry budget
// (max_attempts 0, as children were before they recorded their type's) is
// shown with the budget it has, the default, not "of 0".
func TestCLITaskShowNamesTheBudget(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			var id uuid.UUID
			tg.withStore(t, func(s store.Store) {
				res, err := s.TaskStart(context.Background(), &store.TaskStartParams{Namespace: "clitest",
					Scheduled: history.TaskScheduledData{TaskType: "cli.test", TypeVersion: 1, Queue: "default"}})
				require.NoError(t, err)
				id = res.ID
			})
			out, _ := tg.mustRun(t, "task", "show", id.String())
			require.Regexp(t, fmt.Sprintf(`(?m)^attempt:\s+0 of %d$`, history.DefaultMaxAttempts), out)
		})
	}
}
