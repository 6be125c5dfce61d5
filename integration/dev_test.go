package integration_test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

// startDev runs `cairn dev` on the embedded store in dbPath, with no
// database URL, and returns once it listens. Its low-confidence documents
// wait for a person's approval, which nobody gives here: a short
// --approval-timeout lets them escalate and fall to the default (rejected,
// "no decision") within the test.
func startDev(t *testing.T, dbPath string, args ...string) *apiServer {
	t.Helper()
	cmd := exec.Command(cairnBinary(t), append([]string{"dev", "--listen", "127.0.0.1:0", "--latency", "5ms", "--approval-timeout", "200ms"}, args...)...)
	cmd.Env = append(os.Environ(), "CAIRN_DATABASE_URL=", "CAIRN_DB="+dbPath)
	return startListening(t, cmd)
}

type devTaskList struct {
	Tasks []struct {
		ID     string         `json:"id"`
		Type   string         `json:"type"`
		Status history.Status `json:"status"`
	} `json:"tasks"`
}

func (s *apiServer) tasks(t *testing.T) devTaskList {
	t.Helper()
	status, _, body := s.call("GET", "/v1/tasks?limit=100", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var list devTaskList
	require.NoError(t, json.Unmarshal(body, &list))
	return list
}

// TestDevRunsTheDemoOnTheEmbeddedStore: `cairn dev` with no database URL
// serves the API and the console, works off its sample documents, and
// after a restart on the same file the tasks are where they were.
func TestDevRunsTheDemoOnTheEmbeddedStore(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "dev.db")
	dev := startDev(t, dbPath, "--documents", "12")

	waitFor(t, time.Minute, "the sample documents finished", func() bool {
		list := dev.tasks(t)
		if len(list.Tasks) != 12 {
			return false
		}
		for _, task := range list.Tasks {
			if !task.Status.Terminal() {
				return false
			}
		}
		return true
	})
	status, _, body := dev.call("GET", "/readyz", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, _, body = dev.call("GET", "/console/", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(body), "default", "the overview shows the demo's queue")
	before := dev.tasks(t)
	id := before.Tasks[0].ID
	// A quarter of the documents waited for an approval nobody gave: they
	// escalated, and the default decided.
	timedOut := 0
	for _, task := range before.Tasks {
		status, _, body := dev.call("GET", "/v1/tasks/"+task.ID+"/history", nil)
		require.Equal(t, http.StatusOK, status, "%s", body)
		if strings.Contains(string(body), `"escalate"`) && strings.Count(string(body), "wait_timed_out") == 2 {
			timedOut++
		}
	}
	require.Equal(t, 3, timedOut, "3 of 12 documents waited for approval, escalated and timed out")
	status, _, body = dev.call("GET", "/v1/tasks/"+id+"/history", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.True(t, strings.Contains(string(body), "task_scheduled"), "%s", body)

	require.NoError(t, dev.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, dev.cmd.Wait(), "cairn dev stops cleanly on SIGTERM")

	again := startDev(t, dbPath, "--documents", "0")
	after := again.tasks(t)
	require.Equal(t, before, after, "the tasks outlive the process")
}
