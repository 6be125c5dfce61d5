package integration_test

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/stretchr/testify/require"
)

// Without --tokens, cairn server and cairn dev refuse to listen on an
// address other hosts reach, and say what to do, in one line.
func TestServerWithoutTokensRefusesAnOpenAddress(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	for _, args := range [][]string{
		{"server", "--listen", "0.0.0.0:0", "--schema", schema},
		{"server", "--listen", ":0", "--schema", schema},
		{"dev", "--listen", "0.0.0.0:0", "--documents", "0"},
	} {
		cmd := exec.Command(cairnBinary(t), args...)
		cmd.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+enginetest.DatabaseURL(t), "CAIRN_DB="+t.TempDir()+"/dev.db")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%v: %s", args, stderr.String())
		require.Equal(t, 2, exit.ExitCode(), "%v: %s", args, stderr.String())
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		require.Len(t, lines, 1, "%v: %q", args, stderr.String())
		require.Contains(t, lines[0], "--insecure-no-auth")
		require.Contains(t, lines[0], "--tokens")
	}
}

// Told --insecure-no-auth, it listens on every interface and answers the
// hosts of --allowed-hosts besides loopback ones, no others; --metrics-addr
// takes /metrics off the API's address onto its own, behind
// --metrics-token.
func TestServerInsecureNoAuthAnswersAllowedHosts(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	cmd := exec.Command(cairnBinary(t), "server", "--listen", "0.0.0.0:0", "--schema", schema, "--log-level", "warn",
		"--insecure-no-auth", "--allowed-hosts", "cairn.test", "--metrics-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+enginetest.DatabaseURL(t), "CAIRN_METRICS_TOKEN=scrape-secret")
	srv := startListening(t, cmd)
	port := srv.url[strings.LastIndexByte(srv.url, ':'):]
	srv.url = "http://127.0.0.1" + port
	status, _, body := srv.call("GET", "/v1/tasks", nil, "Host", "cairn.test"+port)
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, _, body = srv.call("GET", "/v1/tasks", nil, "Host", "attacker.example"+port)
	require.Equal(t, http.StatusForbidden, status, "%s", body)
	require.Contains(t, string(body), "host_not_allowed")

	status, _, _ = srv.call("GET", "/metrics", nil)
	require.Equal(t, http.StatusNotFound, status, "not on the API's address")
	require.NotEmpty(t, srv.metricsURL)
	metrics := &apiServer{t: t, url: strings.TrimSuffix(srv.metricsURL, "/metrics")}
	status, _, _ = metrics.call("GET", "/metrics", nil)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, body = metrics.as("scrape-secret").call("GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, status)
	require.True(t, strings.Contains(string(body), "\nprocess_start_time_seconds "), "the exposition")
}
