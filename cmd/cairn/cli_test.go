package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

const secret = "s3cret"

// secretURL is a database URL with a password, at a port nothing answers.
const secretURL = "postgres://postgres:" + secret + "@127.0.0.1:1/test?connect_timeout=2"

func TestRedactMasksPasswords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://postgres:s3cret@127.0.0.1:5432/test":                   "postgres://postgres:xxxxx@127.0.0.1:5432/test",
		"cannot parse `postgres://u:s3cret@h/db?sslmode=disable`: bad":     "cannot parse `postgres://u:xxxxx@h/db?sslmode=disable`: bad",
		"postgresql://u:p%40ss@h:5432/db and postgres://v:w@h2/db":         "postgresql://u:xxxxx@h:5432/db and postgres://v:xxxxx@h2/db",
		"postgres://u:p@ss@h/db":                                           "postgres://u:xxxxx@h/db",
		"postgres://u:@h/db":                                               "postgres://u:xxxxx@h/db",
		"host=h user=u password=s3cret dbname=d":                           "host=h user=u password=xxxxx dbname=d",
		"host=h password='s3 cret' dbname=d":                               "host=h password=xxxxx dbname=d",
		"postgres://u@h/db?sslmode=disable&password=s3cret&x=1":            "postgres://u@h/db?sslmode=disable&password=xxxxx&x=1",
		"PASSWORD = s3cret":                                                "PASSWORD = xxxxx",
		"postgres://u:s3#cret@h/db":                                        "postgres://u:xxxxx@h/db",
		"postgres://u:s3?c/ret@h/db?sslmode=disable":                       "postgres://u:xxxxx@h/db?sslmode=disable",
		"`postgres://u:s3cret@h/db`, `postgres://v:s3cret@h2/db`":          "`postgres://u:xxxxx@h/db`, `postgres://v:xxxxx@h2/db`",
		"host=h sslpassword=s3cret":                                        "host=h sslpassword=xxxxx",
		`host=h password=s3\ cret dbname=d`:                                "host=h password=xxxxx dbname=d",
		"postgres://postgres@127.0.0.1:5432/test (no password)":            "postgres://postgres@127.0.0.1:5432/test (no password)",
		"failed to connect to `user=postgres database=test`: dial refused": "failed to connect to `user=postgres database=test`: dial refused",
		"http://localhost:7233/v1/tasks at 12:30:01":                       "http://localhost:7233/v1/tasks at 12:30:01",
	} {
		require.Equal(t, want, redact(in), in)
		require.NotContains(t, redact(in), secret, in)
	}
}

func TestRedactingLoggerMasksMessagesAndAttributes(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	logger := newRedactingLogger(&out, slog.LevelInfo).With("dsn", secretURL)
	logger.Info("connecting to "+secretURL, "err", errors.New("cannot parse "+secretURL),
		slog.Group("db", "url", secretURL), "n", 3, "parsed", mustParseURL(t, secretURL))
	logger.Debug("below the level " + secretURL)
	require.NotContains(t, out.String(), secret)
	require.Equal(t, 5, strings.Count(out.String(), "postgres:xxxxx@127.0.0.1:1"), out.String())
	require.Contains(t, out.String(), "n=3")
	require.NotContains(t, out.String(), "below the level")
}

func mustParseURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// everyCommand walks the command tree, root first, so a new command is
// covered without a list to keep.
func everyCommand(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, everyCommand(sub)...)
	}
	return out
}

// commandArgs is the command's path as arguments: "cairn task list" is
// ["task", "list"].
func commandArgs(c *cobra.Command) []string {
	return strings.Fields(c.CommandPath())[1:]
}

// The help of every command, with secrets in the environment, prints
// none of them, and succeeds.
func TestHelpOfEveryCommandPrintsNoSecret(t *testing.T) {
	t.Setenv("CAIRN_DATABASE_URL", "postgres://postgres:"+secret+"@127.0.0.1:5432/test")
	t.Setenv("CAIRN_METRICS_TOKEN", secret+"-metrics")
	commands := everyCommand(newRootCmd())
	require.Greater(t, len(commands), 30, "the tree is walked")
	var tg cliTarget
	for _, c := range commands {
		args := append(commandArgs(c), "--help")
		stdout, stderr, err := tg.run(t, args...)
		require.NoError(t, err, "cairn %v", args)
		require.Contains(t, stdout, "Usage:", "cairn %v", args)
		require.Contains(t, stdout, c.UseLine(), "cairn %v", args)
		require.NotContains(t, stdout+stderr, secret, "cairn %v prints a secret", args)
	}
}

// reported runs cairn as main does and returns what it printed on stderr
// and its exit code.
func reported(t *testing.T, tg cliTarget, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, err := tg.run(t, args...)
	var printed bytes.Buffer
	code = reportError(&printed, err)
	return stdout, stderr + printed.String(), code
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	tg := cliTargets["embedded"](t)
	seedTasks(t, tg, 1)
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"task", "list"}, 0, ""},
		{[]string{"task"}, 0, ""}, // a group's help
		{[]string{"task", "list", "--no-such-flag"}, exitConfig, "unknown flag: --no-such-flag"},
		{[]string{"task", "list", "--limit", "many"}, exitConfig, `invalid argument "many"`},
		{[]string{"-o", "yaml", "task", "list"}, exitConfig, `--output "yaml": use text or json`},
		{[]string{"task", "show", "nope"}, exitConfig, `task id "nope" is not a UUID`},
		{[]string{"task", "show"}, exitConfig, "accepts 1 arg(s), received 0"},
		{[]string{"task", "list", "extra"}, exitConfig, `unknown command "extra" for "cairn task list"`},
		{[]string{"tsak", "list"}, exitConfig, `unknown command "tsak" for "cairn"`},
		{[]string{"task", "lsit"}, exitConfig, `unknown command "lsit" for "cairn task"`},
		{[]string{"--max-payload-bytes", "0", "task", "list"}, exitConfig, "--max-payload-bytes 0: must be positive"},
		{[]string{"task", "show", uuid.Nil.String()}, exitError, "task 00000000-0000-0000-0000-000000000000 not found in namespace clitest"},
		{[]string{"task", "retry", uuid.Nil.String()}, exitError, "not found"},
	} {
		_, stderr, code := reported(t, tg, tc.args...)
		require.Equal(t, tc.code, code, "cairn %v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.says, "cairn %v", tc.args)
		if tc.code != 0 {
			require.True(t, strings.HasPrefix(stderr, "cairn: "), "cairn %v: %q", tc.args, stderr)
		}
	}
}

// A database URL with a password that cannot be reached, or cannot be
// parsed, is reported without the password.
func TestConnectionErrorsPrintNoPassword(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		secretURL,
		"postgres://postgres:" + secret + "@127.0.0.1:notaport/test",
		"host=127.0.0.1 port=1 user=postgres password=" + secret + " connect_timeout=2",
		"postgres://postgres:" + secret + "@127.0.0.1:1/test?connect_timeout=2&sslmode=nonsense",
	} {
		tg := cliTarget{flags: []string{"--database-url", url}}
		stdout, stderr, code := reported(t, tg, "task", "list")
		require.Equal(t, exitConfig, code, "%s", stderr)
		require.Contains(t, stderr, "cairn: ")
		require.NotContains(t, stdout+stderr, secret)
	}
}

// field returns the member of m named name, compared without case (a
// value type without json tags encodes its Go field names).
func field(t *testing.T, m map[string]any, name string) any {
	t.Helper()
	for k, v := range m {
		if strings.EqualFold(strings.ReplaceAll(k, "_", ""), strings.ReplaceAll(name, "_", "")) {
			return v
		}
	}
	require.Failf(t, "missing field", "%q in %v", name, m)
	return nil
}

// jsonArray decodes stdout, one JSON array of objects.
func jsonArray(t *testing.T, stdout string) []map[string]any {
	t.Helper()
	var out []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), "one JSON array: %s", stdout)
	return out
}

// TestCLIJSONShapes checks the -o json of the main listings parse and
// carry their fields, on both stores.
func TestCLIJSONShapes(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			ids := seedTasks(t, tg, 3)
			seedDeadLetters(t, tg, 2)
			tg.mustRun(t, "queue", "set", "bounded", "--max-waiting", "5")
			tg.mustRun(t, "schedule", "create", "nightly", "--cron", "0 3 * * *", "--type", "cli.test", "--input", `{"n":1}`)

			out, _ := tg.mustRun(t, "task", "list", "-o", "json")
			tasks := jsonArray(t, out)
			require.Len(t, tasks, 5)
			for _, task := range tasks {
				require.Equal(t, "cli.test", task["type"])
				require.Equal(t, "clitest", task["namespace"])
				require.Contains(t, []any{"pending", "dead_lettered"}, task["status"])
				_, err := uuid.Parse(task["id"].(string))
				require.NoError(t, err)
				require.NotContains(t, task, "input", "a listing carries no input unless --include asks")
			}

			out, _ = tg.mustRun(t, "task", "show", ids[0].String(), "-o", "json")
			var shown map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
			require.Equal(t, ids[0].String(), shown["id"])
			require.Equal(t, "pending", shown["status"])
			require.Equal(t, "default", shown["queue"])
			require.Contains(t, shown, "input")

			out, _ = tg.mustRun(t, "queue", "list", "-o", "json")
			queues := map[string]map[string]any{}
			for _, q := range jsonArray(t, out) {
				queues[q["queue"].(string)] = q
			}
			require.Contains(t, queues, "default", "a queue without limits is listed: it has tasks")
			require.EqualValues(t, 3, queues["default"]["waiting"])
			require.NotContains(t, queues["default"], "max_waiting")
			require.EqualValues(t, 5, queues["bounded"]["max_waiting"], "a queue with limits is listed, without tasks")
			require.EqualValues(t, 0, queues["bounded"]["waiting"])

			out, _ = tg.mustRun(t, "schedule", "list", "-o", "json")
			schedules := jsonArray(t, out)
			require.Len(t, schedules, 1)
			require.Equal(t, "nightly", field(t, schedules[0], "name"))
			require.Equal(t, "0 3 * * *", field(t, schedules[0], "cron"))
			require.Equal(t, "cli.test", field(t, schedules[0], "task_type"))

			out, _ = tg.mustRun(t, "dlq", "list", "-o", "json")
			dead := jsonArray(t, out)
			require.Len(t, dead, 2)
			for _, d := range dead {
				require.Equal(t, "dead_lettered", d["status"])
				lastError := d["last_error"].(map[string]any)
				require.Equal(t, "permanent", lastError["class"])
				require.Equal(t, "boom", lastError["message"])
			}
		})
	}
}

// `cairn queue list` lists a queue that only has tasks, in text as well.
func TestCLIQueueListShowsQueuesWithoutLimits(t *testing.T) {
	t.Parallel()
	tg := cliTargets["embedded"](t)
	tg.withStore(t, func(store.Store) {}) // an empty store: queue list creates none
	out, _ := tg.mustRun(t, "queue", "list")
	require.Equal(t, 1, strings.Count(out, "\n"), "the header alone: %q", out)
	seedTasks(t, tg, 4)
	out, _ = tg.mustRun(t, "queue", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.True(t, strings.HasPrefix(lines[0], "QUEUE"), out)
	require.Equal(t, []string{"default", "4", "4", "0", "-", "-", "0", "0"}, strings.Fields(lines[1]))
	_, _, err := tg.run(t, "queue", "list", "--window", "48h")
	require.ErrorContains(t, err, "--window 48h0m0s: use more than 0s and at most 24h0m0s")
}

func TestCLITaskHistoryShowsCostAndFireTime(t *testing.T) {
	t.Parallel()
	fire := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		p    history.Payload
		want string
	}{
		{history.StepCompletedData{Position: 1, Name: "extract", DurationMillis: 1500,
			Usage: []history.Usage{{Model: "gpt-4o", InputTokens: 1200, OutputTokens: 350, CostUSD: 0.014}}},
			"step 1 extract in 1.5s; gpt-4o 1200+350 tokens $0.0140"},
		{history.StepCompletedData{Position: 2, Name: "both", Usage: []history.Usage{
			{Model: "a", InputTokens: 1, OutputTokens: 2, CostUSD: 0.5}, {Model: "b", InputTokens: 3, OutputTokens: 4, CostUSD: 0.25}}},
			"step 2 both; a 1+2 tokens $0.5000, b 3+4 tokens $0.2500 (total $0.7500)"},
		{history.StepCompletedData{Position: 0, Name: "plain"}, "step 0 plain"},
		{history.AttemptFailedData{Error: history.ErrorInfo{Class: history.Transient, Message: "slow"},
			Usage: []history.Usage{{Model: "m", InputTokens: 10, CostUSD: 0.001}}}, "transient: slow; m 10+0 tokens $0.0010"},
		{history.TimerStartedData{Position: 3, FireAt: fire}, "step 3 sleeps until 2026-12-01 09:30:00.000 UTC"},
		{history.TimerFiredData{Position: 3}, "step 3 sleep done"},
		{history.SignalReceivedData{Name: "approval", Payload: json.RawMessage(`"yes"`), Sender: "alice", DedupID: "d-1"},
			`approval "yes" from alice (dedup id d-1)`},
		{history.WaitStartedData{Name: "approval", Position: 1, Deadline: fire}, "receive 1 waits for approval until 2026-12-01 09:30:00.000 UTC"},
		{history.WaitTimedOutData{Name: "approval", Position: 1}, "receive 1 of approval timed out"},
		{history.ChildStartedData{Position: 2, ChildID: "c-2", TaskType: "ocr", TypeVersion: 1}, "child 2 ocr@1: task c-2"},
		{history.ChildStartedData{Position: 0, ChildID: "c-0", TaskType: "ocr", TypeVersion: 1, OnParentClose: history.ParentCloseAbandon},
			"child 0 ocr@1: task c-0 (abandoned if the parent ends)"},
		{history.ChildWaitStartedData{Positions: []int{4}}, "awaits child 4"},
		{history.ChildWaitStartedData{Positions: []int{0, 1, 2, 3}, Count: 2}, "awaits 2 of 4 children (0 to 3)"},
		{history.ChildFinishedData{Position: 1, ChildID: "c-1", Status: history.StatusFailed,
			Error: &history.ErrorInfo{Class: history.Permanent, Message: "unreadable"}}, "child 1 failed: task c-1: permanent: unreadable"},
		{history.PatchRecordedData{PatchID: "add-classify", Position: 1}, "patch add-classify: new branch from step 1"},
		{history.WaitStartedData{Position: 2, Deadline: fire, Select: &history.SelectWait{Signals: []string{"approval", "cancel"}, Children: []int{0}}},
			"select 2 waits for signals approval, cancel, child 0; timer at 2026-12-01 09:30:00.000 UTC"},
		{history.WaitStartedData{Position: 2, Deadline: history.Never, Select: &history.SelectWait{Children: []int{1}}}, "select 2 waits for child 1; no timer"},
		{history.SelectMatchedData{Position: 2, Case: 1, Kind: history.SelectSignal, Name: "cancel", Seq: 9}, "select 2: case 1 won, signal cancel (event 9)"},
		{history.SelectMatchedData{Position: 2, Case: 2, Kind: history.SelectChild, Child: 0, Seq: 10}, "select 2: case 2 won, child 0 (event 10)"},
		{history.SelectMatchedData{Position: 3, Case: 0, Kind: history.SelectTimer}, "select 3: case 0 won, timer"},
	} {
		require.Equal(t, tc.want, eventDetails(tc.p))
	}
}

// A schedule's input over --max-payload-bytes is refused with the sdk's
// error, which names the size and the limit.
func TestCLIPayloadLimit(t *testing.T) {
	t.Parallel()
	tg := cliTargets["embedded"](t)
	_, _, err := tg.run(t, "--max-payload-bytes", "10", "schedule", "create", "s", "--cron", "@hourly", "--type", "cli.test", "--input", `"0123456789"`)
	require.True(t, errors.Is(err, sdk.ErrPayloadTooLarge), "%v", err)
	require.ErrorContains(t, err, "input is 12 bytes of JSON, over the limit of 10 bytes")
	tg.mustRun(t, "--max-payload-bytes", "12", "schedule", "create", "s", "--cron", "@hourly", "--type", "cli.test", "--input", `"0123456789"`)
}
