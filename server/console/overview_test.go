package console

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
)

// The overview's table and the charts below it give the same quantity
// in the same unit, and each figure says what it is. Seeded: over the
// last hour (60 one-minute buckets) queue docs completed 16 tasks, all in
// the last minute, where 24 attempts ended and 8 of them failed (the 8
// retried tasks among the 16); no task failed. By hand: 16/60 = 0.27
// completed a minute on average over the hour, 16 in the last minute; 0
// % of the finished tasks failed, 8/24 = 33 % of the last minute's
// attempts. Before, the table said "16.0/h" (per hour, completed and
// failed tasks) and "0.0%" under "Error rate" beside a chart of 16.0/min
// and 33 % under "Throughput" and "Error rate".
func TestOverviewFiguresAgreeWithTheCharts(t *testing.T) {
	t.Parallel()
	series := store.QueueSeries{Queue: "docs", Step: time.Minute, Points: make([]store.SeriesPoint, chartBuckets)}
	series.Points[chartBuckets-1] = store.SeriesPoint{Completed: 16, AttemptsEnded: 24, AttemptsFailed: 8}
	stats := store.QueueStats{Queue: "docs", Completed: 16, Failed: 0, AttemptsFailed: 8, Window: time.Hour}

	srv, _ := consoleServer(t)
	w := httptest.NewRecorder()
	srv.render(w, http.StatusOK, "overview", &consolePage{Title: "Queues", Page: "overview", Namespace: "default", Data: overviewData{
		Window: time.Hour, Queues: []store.QueueStats{stats}, Windows: windowLinks{Current: "1h"},
		Charts: []queueChartRow{{Queue: "docs", Charts: queueCharts(series, "1h")}},
	}})
	require.Equal(t, http.StatusOK, w.Code)
	page := w.Body.String()

	head := regexp.MustCompile(`(?s)<thead><tr>(.*?)</tr></thead>`).FindStringSubmatch(page)
	require.NotNil(t, head, page)
	var headers []string
	for _, m := range regexp.MustCompile(`<th[^>]*>([^<]*)</th>`).FindAllStringSubmatch(head[1], -1) {
		headers = append(headers, m[1])
	}
	require.Equal(t, []string{"Queue", "Waiting", "Due", "Running", "Oldest due", "Completed", "Failed tasks", "Failed attempts",
		"Completed/min, avg 1 h", "Failed tasks, % of finished", "Limits"}, headers)
	row := regexp.MustCompile(`(?s)<tbody>\s*<tr>(.*?)</tr>`).FindStringSubmatch(page)
	require.NotNil(t, row, page)
	var cells []string
	for _, m := range regexp.MustCompile(`<td class="num">([^<]*)</td>`).FindAllStringSubmatch(row[1], -1) {
		cells = append(cells, m[1])
	}
	require.Equal(t, []string{"0", "0", "0", "—", "16", "0", "8", "0.27/min", "0%"}, cells)

	captions := map[string]string{}
	for _, m := range regexp.MustCompile(`<figcaption>([^<]*) <strong class="latest">([^<]*)</strong>`).FindAllStringSubmatch(page, -1) {
		captions[m[1]] = m[2]
	}
	require.Equal(t, "16.0/min · last 1 min", captions["Completed/min"], page)
	require.Equal(t, "33% · last 1 min", captions["Failed attempts"], page)
	require.Contains(t, page, "Completed/min of queue docs over the last 1h, now 16.0/min in the last 1 min, 0.27/min on average",
		"the chart's average over the window is the table's figure")
	require.Contains(t, page, "Failed attempts of queue docs over the last 1h, now 33% of the attempts that ended in the last 1 min failed")
	require.NotRegexp(t, `\d/h\b`, page, "one unit for rates: per minute")
}
