package integration_test

import (
	"encoding/json"
	"html"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
)

// devApprovals runs `cairn dev` with a callback secret and n documents,
// each of which waits for a person's approval, and returns it once each
// approval is printed, with the lines printed under each, by task id.
func devApprovals(t *testing.T, n int) (*apiServer, map[string][]string) {
	t.Helper()
	dev := startDev(t, filepath.Join(t.TempDir(), "dev.db"), "--documents", strconv.Itoa(n), "--low-confidence", "1",
		"--failure-rate", "0", "--approval-timeout", "10m", "--callback-secret", "a-callback-secret-for-the-test")
	head := regexp.MustCompile(`^approval needed: document .*; task ([0-9a-f-]{36}) waits`)
	var byTask map[string][]string
	waitFor(t, time.Minute, "every approval printed with its curl line", func() bool {
		byTask = map[string][]string{}
		task := ""
		for _, line := range dev.printed.all() {
			if m := head.FindStringSubmatch(line); m != nil {
				task = m[1]
				continue
			}
			if rest, ok := strings.CutPrefix(line, "  "); ok && task != "" {
				byTask[task] = append(byTask[task], rest)
			}
		}
		curls := 0
		for _, lines := range byTask {
			for _, l := range lines {
				if strings.HasPrefix(l, "curl ") {
					curls++
				}
			}
		}
		return len(byTask) == n && curls == n
	})
	return dev, byTask
}

// lineStarting is the line of lines that starts with prefix.
func lineStarting(t *testing.T, lines []string, prefix string) string {
	t.Helper()
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line starting %q in %q", prefix, lines)
	return ""
}

// pasted runs line as a person pasting it into bash would, with the cairn
// binary on the PATH, and returns what it printed.
func pasted(t *testing.T, line string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", line)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(cairnBinary(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", line, out)
	return string(out)
}

// outcome waits for the demo document task id and returns its review.
func outcome(t *testing.T, dev *apiServer, id string) (string, map[string]any) {
	t.Helper()
	var task apiTask
	waitFor(t, time.Minute, "task "+id+" finished", func() bool {
		dev.expect(http.StatusOK, &task, "GET", "/v1/tasks/"+id, nil)
		return task.Status.Terminal()
	})
	require.Equal(t, history.StatusCompleted, task.Status, "%+v", task.LastError)
	var out struct {
		Outcome string         `json:"outcome"`
		Review  map[string]any `json:"review"`
	}
	require.NoError(t, json.Unmarshal(task.Output, &out), "%s", task.Output)
	return out.Outcome, out.Review
}

// The command lines `cairn dev` prints for an approval, and the curl line
// of the console's task page, work as pasted into a shell: run by bash,
// each decides its task. And the trial's two bad signals, against the
// demo's workflow (which declares its approval), are refused: 422 and 404,
// nothing written.
func TestPrintedLinesWorkAsPasted(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("this test runs the printed curl lines: install curl")
	}
	dev, byTask := devApprovals(t, 3)
	var ids []string
	for id := range byTask {
		ids = append(ids, id)
	}

	// The trial's two signals.
	before := len(historyOf(t, dev, ids[0]))
	status, _, body := dev.call("POST", "/v1/tasks/"+ids[0]+"/signals/approval", `{"payload":{"ok":"yes"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, "%s", body)
	require.Contains(t, string(body), `"pointer":"/approved","detail":"missing"`)
	status, _, body = dev.call("POST", "/v1/tasks/"+ids[0]+"/signals/aproval", `{"payload":{"approved":true}}`)
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	require.Contains(t, string(body), `"code":"signal_not_declared"`)
	require.Len(t, historyOf(t, dev, ids[0]), before, "nothing written")

	// The printed curl line.
	out := pasted(t, lineStarting(t, byTask[ids[0]], "curl "))
	require.Contains(t, out, `"task_id":"`+ids[0]+`"`)
	result, review := outcome(t, dev, ids[0])
	require.Equal(t, "approved", result)
	require.Equal(t, "callback", review["by"])

	// The printed cairn line.
	out = pasted(t, lineStarting(t, byTask[ids[1]], "cairn "))
	require.Contains(t, out, "signal approval sent")
	result, _ = outcome(t, dev, ids[1])
	require.Equal(t, "approved", result)

	// The console's.
	status, _, page := dev.call("GET", "/console/tasks/"+ids[2], nil)
	require.Equal(t, http.StatusOK, status)
	m := regexp.MustCompile(`<pre class="mono" aria-label="Approve with curl">([^<]*)</pre>`).FindSubmatch(page)
	require.NotNil(t, m, "the task page shows a curl line: %s", page)
	out = pasted(t, html.UnescapeString(string(m[1])))
	require.Contains(t, out, `"task_id":"`+ids[2]+`"`)
	result, review = outcome(t, dev, ids[2])
	require.Equal(t, "approved", result)
	require.Equal(t, "callback", review["by"])
}

// historyOf is task id's history through the API.
func historyOf(t *testing.T, dev *apiServer, id string) []json.RawMessage {
	t.Helper()
	var h struct {
		Events []json.RawMessage `json:"events"`
	}
	dev.expect(http.StatusOK, &h, "GET", "/v1/tasks/"+id+"/history", nil)
	return h.Events
}

// A callback link pasted into a chat works in a browser: Chromium opens
// the link `cairn dev` printed, sees what is decided, clicks Approve, and
// the task completes with the decision; the link then says it was used.
func TestCallbackLinkInABrowser(t *testing.T) {
	t.Parallel()
	dev, byTask := devApprovals(t, 1)
	var id, link string
	for task, lines := range byTask {
		id = task
		link = strings.Fields(lineStarting(t, lines, dev.url+"/v1/callbacks/"))[0]
	}
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	before := len(historyOf(t, dev, id))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(link), chromedp.WaitVisible(css("button.approve")),
		screenshot(t, "callback-page.png")))
	page := text(t, ctx, "main")
	require.Contains(t, page, id)
	require.Contains(t, page, "document.process@2")
	require.Contains(t, page, "Link valid until")
	require.Len(t, historyOf(t, dev, id), before, "opening the link writes nothing")

	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(css("#comment"), "looks right"), chromedp.Click(css("button.approve"))))
	waitFor(t, 30*time.Second, "the result page", func() bool {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("h1") ? document.querySelector("h1").textContent : ""`))
		return err == nil && strings.TrimSpace(got) == "Approved"
	})
	require.NoError(t, chromedp.Do(ctx, screenshot(t, "callback-approved.png")))
	result, review := outcome(t, dev, id)
	require.Equal(t, "approved", result)
	require.Equal(t, "looks right", review["comment"])
	require.Equal(t, "callback", review["by"])

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(link), chromedp.WaitVisible(css("h1"))))
	require.Equal(t, "This link was used already", strings.TrimSpace(text(t, ctx, "h1")))
}
