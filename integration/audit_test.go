package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// failWith starts a task of type typ and fails its attempts with the given
// HTTP statuses in turn (each retried at once), then completes it.
func failWith(t *testing.T, s store.Store, typ string, statuses ...int) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	opts := &enginetest.TaskOpts{Type: typ}
	id := enginetest.StartTask(t, s, opts)
	attempt := func(payloads ...history.Payload) {
		claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{
			Namespace: store.DefaultNamespace, Queues: []string{"default"}, Types: []store.TypeKey{opts.TypeKey()},
			Owner: "audit-test", Max: 1, LeaseTTL: time.Minute,
		})
		claimed := claimedRes.Tasks
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		ct := claimed[0]
		require.Equal(t, id, ct.Task.ID)
		_, err = s.EventAppend(ctx, &store.EventAppendParams{
			TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt, Payloads: payloads,
		})
		require.NoError(t, err)
	}
	for _, status := range statuses {
		now := time.Now()
		attempt(history.AttemptFailedData{NextRunAt: &now, Error: history.ErrorInfo{
			Class: history.Transient, Message: fmt.Sprintf("HTTP %d", status), Kind: "http", Status: status,
		}})
	}
	attempt(history.TaskCompletedData{Output: json.RawMessage(`{"ok":true}`)})
	return id
}

// auditLine is what the test reads of a line of `cairn audit -o json`.
type auditLine struct {
	Event struct {
		Type    history.Type `json:"type"`
		Seq     int64        `json:"seq"`
		Attempt int          `json:"attempt"`
		Data    struct {
			V     int `json:"v"`
			Error struct {
				Status int `json:"status"`
			} `json:"error"`
		} `json:"data"`
	} `json:"event"`
	Task struct {
		ID     uuid.UUID      `json:"id"`
		Type   string         `json:"type"`
		Status history.Status `json:"status"`
	} `json:"task"`
}

func TestCLIAuditPrintsMatchingEventsAsJSONLines(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	store := newStore(t, enginetest.Pool(t), c.schema)
	crm := failWith(t, store, "crm.sync", 429, 503, 429)
	ocr := failWith(t, store, "ocr.scan", 503, 429)
	failWith(t, store, "mail.send", 500)

	const expr = `event.type == "attempt_failed" && event.data.error.status == 429`
	out := c.run("audit", expr, "--since", "1h", "-o", "json")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 3, "%s", out)
	type seen struct {
		task    uuid.UUID
		attempt int
	}
	var got []seen
	for _, line := range lines {
		var r auditLine
		require.NoError(t, json.Unmarshal([]byte(line), &r), "one JSON object per line: %s", line)
		require.Equal(t, history.AttemptFailed, r.Event.Type)
		require.Equal(t, 429, r.Event.Data.Error.Status)
		require.Equal(t, 1, r.Event.Data.V, "the payload as stored")
		require.Equal(t, history.StatusCompleted, r.Task.Status)
		got = append(got, seen{r.Task.ID, r.Event.Attempt})
	}
	require.Equal(t, []seen{{crm, 1}, {crm, 3}, {ocr, 2}}, got, "in order of time")

	limited := c.run("audit", expr, "--since", "1h", "-o", "json", "--limit", "1")
	require.Equal(t, lines[0], strings.TrimSpace(string(limited)))

	table := string(c.run("audit", `task.type == "ocr.scan" && event.type in ["attempt_failed", "task_completed"]`, "--since", "1h"))
	tableLines := strings.Split(strings.TrimSpace(table), "\n")
	require.Len(t, tableLines, 4, "a header and three events: %s", table)
	require.Contains(t, tableLines[0], "EVENT")
	require.Contains(t, tableLines[1], "status 503")
	require.Contains(t, tableLines[2], "status 429")
	require.Contains(t, tableLines[3], "task_completed")
	require.Contains(t, tableLines[3], ocr.String())

	require.Empty(t, strings.TrimSpace(string(c.run("audit", expr, "--since", "2h", "--until", "1h", "-o", "json"))),
		"nothing happened between two hours and one hour ago")
}

func TestCLIAuditRefusesABadExpressionSayingWhere(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, tt := range []struct{ expr, where string }{
		{`event.type = "attempt_failed"`, "1:12"},
		{"event.type == \"attempt_failed\" &&\n  event.data.error.status == 429 && task.typo == \"x\"", "2:41"},
	} {
		cmd := c.command("audit", tt.expr, "--since", "1h")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%q", tt.expr)
		require.Equal(t, 2, exit.ExitCode(), "%q: %s", tt.expr, stderr.String())
		require.Contains(t, stderr.String(), "filter: "+tt.where, "%q", tt.expr)
		require.Empty(t, stdout.String())
	}
}
