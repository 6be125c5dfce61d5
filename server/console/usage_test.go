package console

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// A batch run by a real worker: the parent's page shows its own cost,
// the batch's (its own plus every child's) and each child's on its row;
// a child's page shows its own.
func TestTaskPageShowsABatchsCost(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			doc := sdk.NewWorkflow("console.doc", 1, func(ctx workflow.Context, n int) (int, error) {
				return workflow.Step(ctx, "summarize", func(ctx context.Context) (int, error) {
					activities.RecordUsage(ctx, activities.Usage{Model: "small", InputTokens: int64(100 * n), OutputTokens: 10, CostUSD: 0.25 * float64(n)})
					return n, nil
				}, nil)
			}, nil)
			batch := sdk.NewWorkflow("console.batch", 1, func(ctx workflow.Context, docs []int) (int, error) {
				if _, err := workflow.Step(ctx, "plan", func(ctx context.Context) (int, error) {
					activities.RecordUsage(ctx, activities.Usage{Model: "large", InputTokens: 50, OutputTokens: 50, CostUSD: 1})
					return 0, nil
				}, nil); err != nil {
					return 0, err
				}
				_, err := workflow.MapChildren(ctx, doc, docs, nil)
				return len(docs), err
			}, nil)
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: ns.Store, Concurrency: 4, PollInterval: 20 * time.Millisecond, RescueInterval: -1})
			require.NoError(t, err)
			sdk.Register(w, doc)
			sdk.Register(w, batch)
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, w.StopAndCancel(context.Background())) })
			client, err := sdk.NewClient(sdk.ClientConfig{Store: ns.Store})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			run, err := sdk.Start(ctx, client, batch, []int{1, 2, 4}, nil)
			require.NoError(t, err)
			_, err = run.Result(ctx)
			require.NoError(t, err)

			h := testConsole(t, ns.Store)
			page := getPage(t, h, "/console/tasks/"+run.ID.String())
			require.Contains(t, page, `<dd id="task-cost">100 tokens · $1.0000</dd>`)
			require.Contains(t, page, `<dd id="task-batch-cost">830 tokens · $2.7500 over 4 tasks</dd>`)
			kids := panelChildren(t, page)
			require.Len(t, kids, 3)
			for i, want := range []string{"$0.2500", "$0.5000", "$1.0000"} {
				require.Equal(t, want, kids[i].Cost, "child %d", i)
			}
			child := getPage(t, h, kids[2].Href)
			require.Contains(t, child, `<dd id="task-cost">410 tokens · $1.0000</dd>`)
			require.NotContains(t, child, `id="task-batch-cost"`, "a task without children has no batch")
		})
	}
}

// usageCall is one task of runUsage: its tenant and what its one step
// reports.
type usageCall struct {
	Tenant string
	Usage  activities.Usage
}

// runUsage runs a task of type console.usage per call on st, with a
// real worker, and waits until each completed.
func runUsage(t *testing.T, st store.Store, calls []usageCall) {
	t.Helper()
	wf := sdk.NewWorkflow("console.usage", 1, func(ctx workflow.Context, u activities.Usage) (string, error) {
		return workflow.Step(ctx, "call", func(ctx context.Context) (string, error) {
			activities.RecordUsage(ctx, u)
			return u.Model, nil
		}, nil)
	}, nil)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Concurrency: 4, PollInterval: 20 * time.Millisecond, RescueInterval: -1})
	require.NoError(t, err)
	sdk.Register(w, wf)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, w.StopAndCancel(context.Background())) })
	client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var runs []*sdk.Run[string]
	for _, c := range calls {
		run, err := sdk.Start(ctx, client, wf, c.Usage, &sdk.StartOpts{FairnessKey: c.Tenant})
		require.NoError(t, err)
		runs = append(runs, run)
	}
	for _, run := range runs {
		_, err := run.Result(ctx)
		require.NoError(t, err)
	}
}

// usageTableRow is one row of a usage page's table, as shown.
type usageTableRow struct {
	Key                    string // "(none)" and "(other)" as shown
	Marker                 bool   // Key is the page's (none) or (other), not a key of that name
	Cost, In, Out, Reports string
}

var (
	usageRowRE  = regexp.MustCompile(`(?s)<tr><td class="key">(.*?)</td><td class="num">([^<]*)</td><td class="num">([^<]*)</td><td class="num">([^<]*)</td><td class="num">([^<]*)</td></tr>`)
	usageFootRE = regexp.MustCompile(`(?s)<tfoot><tr><th>All</th><td class="num">([^<]*)</td><td class="num">([^<]*)</td><td class="num">([^<]*)</td><td class="num">([^<]*)</td></tr></tfoot>`)
	usageTagRE  = regexp.MustCompile(`<[^>]*>`)
)

// usageTable reads the table of section id (tenant, model, type) on a
// usage page: its rows and its footer's totals.
func usageTable(t *testing.T, page, id string) (rows []usageTableRow, total usageTableRow) {
	t.Helper()
	start := strings.Index(page, `<table id="usage-`+id+`-totals"`)
	require.Positive(t, start, "the page has a %s table", id)
	end := strings.Index(page[start:], "</table>")
	table := page[start : start+end]
	for _, m := range usageRowRE.FindAllStringSubmatch(table, -1) {
		rows = append(rows, usageTableRow{Key: html.UnescapeString(usageTagRE.ReplaceAllString(m[1], "")), Marker: strings.HasPrefix(m[1], "<em"),
			Cost: m[2], In: m[3], Out: m[4], Reports: m[5]})
	}
	foot := usageFootRE.FindStringSubmatch(table)
	require.NotNil(t, foot, table)
	return rows, usageTableRow{Key: "All", Cost: foot[1], In: foot[2], Out: foot[3], Reports: foot[4]}
}

// wantUsageTable is what usageTable should read for s.
func wantUsageTable(s *cairntype.UsageSeries) (rows []usageTableRow, total usageTableRow) {
	cells := func(u cairntype.UsageTotal) usageTableRow {
		return usageTableRow{Cost: fmt.Sprintf("$%.4f", u.CostUSD), In: strconv.FormatInt(u.InputTokens, 10),
			Out: strconv.FormatInt(u.OutputTokens, 10), Reports: strconv.Itoa(u.Reports)}
	}
	for _, k := range s.Keys {
		r := cells(k.Total)
		r.Key = usageKeyName(k)
		r.Marker = k.Other || k.Key == ""
		rows = append(rows, r)
	}
	total = cells(s.Total)
	total.Key = "All"
	return rows, total
}

// chartLines reads the lines of the chart with id: each line's name and
// its number of points.
func chartLines(t *testing.T, page, id string) map[string]int {
	t.Helper()
	start := strings.Index(page, `<svg id="`+id+`"`)
	require.Positive(t, start, "the page has chart %s", id)
	end := strings.Index(page[start:], "</svg>")
	lines := map[string]int{}
	for _, m := range regexp.MustCompile(`<polyline class="line [^"]*" points="([^"]*)"><title>([^<]*)</title>`).FindAllStringSubmatch(page[start:start+end], -1) {
		lines[html.UnescapeString(m[2])] = len(strings.Fields(m[1]))
	}
	return lines
}

// Tasks of two tenants (and one without a fairness key) calling two
// models, run by a real worker: the usage page shows, by tenant, model and
// type, each key's totals as Client.UsageSeries has them over the same
// window, in its order, the keys without a tenant as (none), and a cost
// and a tokens chart with a line per key and a point per bucket. The
// navigation links to it; ?by= shows one breakdown, ?window= another
// window.
func TestUsagePageShowsSpendByTenantModelAndType(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			runUsage(t, ns.Store, []usageCall{
				{"acme", activities.Usage{Model: "small", InputTokens: 100, OutputTokens: 10, CostUSD: 0.25}},
				{"acme", activities.Usage{Model: "large", InputTokens: 1000, OutputTokens: 100, CostUSD: 2}},
				{"globex", activities.Usage{Model: "small", InputTokens: 200, OutputTokens: 20, CostUSD: 0.5}},
				{"", activities.Usage{Model: "large", InputTokens: 50, OutputTokens: 5, CostUSD: 1}},
			})
			h := testConsole(t, ns.Store)
			page := getPage(t, h, "/console/usage")
			require.Contains(t, page, `<a href="/console/usage?namespace=default" aria-current="page">Usage</a>`, "the navigation links to the page")

			client, err := sdk.NewClient(sdk.ClientConfig{Store: ns.Store})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			now := time.Now()
			want := map[string][]string{
				"tenant": {"acme", "(none)", "globex"},
				"model":  {"large", "small"},
				"type":   {"console.usage"},
			}
			for _, b := range usageBreakdowns {
				series, err := client.UsageSeries(context.Background(), sdk.UsageQuery{By: b.By, Since: now.Add(-24 * time.Hour), Until: now, Step: 30 * time.Minute})
				require.NoError(t, err)
				require.Equal(t, "$3.7500", fmt.Sprintf("$%.4f", series.Total.CostUSD), "the figures by hand: 0.25 + 2 + 0.5 + 1")
				rows, total := usageTable(t, page, b.ID)
				wantRows, wantTotal := wantUsageTable(series)
				require.Equal(t, wantRows, rows, b.ID)
				require.Equal(t, wantTotal, total, b.ID)
				var keys []string
				for _, r := range rows {
					keys = append(keys, r.Key)
				}
				require.Equal(t, want[b.ID], keys, b.ID)

				for _, what := range []string{"cost", "tokens"} {
					lines := chartLines(t, page, "usage-"+b.ID+"-"+what)
					require.Len(t, lines, len(want[b.ID]), "a line per key: %v", lines)
					for _, k := range want[b.ID] {
						require.Equal(t, series.Buckets(), lines[k], "%s %s: a point per bucket", what, k)
					}
				}
			}
			require.Contains(t, page, `Cost by tenant per 30 min bucket over the last 24h: $3.75 in all`)
			require.Contains(t, page, `Tokens by model per 30 min bucket over the last 24h: 1485 tokens in all`)
			require.Contains(t, page, `title="tasks started without a fairness key">(none)</em>`)

			one := getPage(t, h, "/console/usage?by=model&window=7d")
			require.Contains(t, one, `id="usage-model-totals"`)
			require.NotContains(t, one, `id="usage-tenant-totals"`, "?by= shows one breakdown")
			require.Contains(t, one, `<a href="/console/usage?by=model&amp;namespace=default&amp;window=30d">30d</a>`, "the window links keep ?by=")
			require.Contains(t, one, `Cost by model per 3 h bucket over the last 7d: $3.75 in all`)
			rows, _ := usageTable(t, one, "model")
			require.Equal(t, "$3.0000", rows[0].Cost, "large: 2 + 1")
		})
	}
}

// Tenant and model names are user input: one holding HTML is shown as
// text in the table, the legend and the charts' line titles, never as
// markup.
func TestUsagePageEscapesKeys(t *testing.T) {
	t.Parallel()
	st := servertest.LiteStore(t)
	tenant, model := `<script>alert("tenant")</script>`, `"><img src=x onerror=alert(1)>`
	runUsage(t, st, []usageCall{{tenant, activities.Usage{Model: model, InputTokens: 10, OutputTokens: 1, CostUSD: 0.5}}})
	page := getPage(t, testConsole(t, st), "/console/usage")
	require.NotContains(t, page, "<script>alert")
	require.NotContains(t, page, "<img src=x")
	require.Contains(t, page, `<td class="key">&lt;script&gt;alert(&#34;tenant&#34;)&lt;/script&gt;</td>`)
	require.Contains(t, page, `<title>&lt;script&gt;alert(&#34;tenant&#34;)&lt;/script&gt;</title>`)
	rows, _ := usageTable(t, page, "tenant")
	require.Equal(t, []usageTableRow{{Key: tenant, Cost: "$0.5000", In: "10", Out: "1", Reports: "1"}}, rows)
	rows, _ = usageTable(t, page, "model")
	require.Equal(t, model, rows[0].Key)
	require.Equal(t, map[string]int{model: chartLines(t, page, "usage-model-cost")[model]}, chartLines(t, page, "usage-model-cost"))
	require.Positive(t, chartLines(t, page, "usage-tenant-tokens")[tenant], "the line is named by the key, as text")
}

// A window or a breakdown the page does not have is a 400 page saying
// what was wrong and what there is.
func TestUsagePageRefusesBadParameters(t *testing.T) {
	t.Parallel()
	h := testConsole(t, servertest.LiteStore(t))
	for target, want := range map[string]string{
		"/console/usage?window=2d":           `window &#34;2d&#34; is not one of 1h, 24h, 7d, 30d`,
		"/console/usage?window=":             ``, // the default
		"/console/usage?by=tenants":          `usage: by &#34;tenants&#34; is not one of fairness_key (tenant), model or type`,
		"/console/usage?by=model&window=90d": `window &#34;90d&#34; is not one of 1h, 24h, 7d, 30d`,
	} {
		if want == "" {
			servertest.SendHTML(t, h, target, http.StatusOK)
			continue
		}
		page := servertest.SendHTML(t, h, target, http.StatusBadRequest)
		require.Contains(t, page, `<p class="notice error" role="alert">`+want+`</p>`, target)
	}
	for _, by := range []string{"tenant", "fairness_key", "model", "type", "TYPE"} {
		page := servertest.SendHTML(t, h, "/console/usage?by="+by, http.StatusOK)
		require.Contains(t, page, "Nothing reported in this window.", by)
		require.Equal(t, 1, strings.Count(page, `<section class="card usage"`), by)
	}
}

// Past cairntype.MaxUsageKeys tenants the series sums the rest into its
// (other) key: the table shows it last, marked as the page's (not a
// tenant of that name, which is shown as any other), with the sum; the
// charts draw the costliest keys and one line for the rest.
func TestUsagePageShowsTheOtherKeyAsSuch(t *testing.T) {
	t.Parallel()
	var cells []cairntype.UsageCell
	for i := range cairntype.MaxUsageKeys + 5 {
		cells = append(cells, cairntype.UsageCell{Key: fmt.Sprintf("t%02d", i), Bucket: i % 4,
			UsageTotal: cairntype.UsageTotal{InputTokens: 10, OutputTokens: 1, CostUSD: float64(100 - i), Reports: 1}})
	}
	cells = append(cells, cairntype.UsageCell{Key: "(other)", Bucket: 0, UsageTotal: cairntype.UsageTotal{InputTokens: 5, CostUSD: 1000, Reports: 1}},
		cairntype.UsageCell{Key: "", Bucket: 1, UsageTotal: cairntype.UsageTotal{InputTokens: 5, CostUSD: 500, Reports: 1}})
	series := cairntype.FoldUsageSeries(cairntype.UsageByFairnessKey, t0, time.Hour, 4, cells)
	other := series.Keys[len(series.Keys)-1]
	require.True(t, other.Other)

	srv, _ := consoleServer(t)
	w := httptest.NewRecorder()
	srv.render(w, http.StatusOK, "usage", &consolePage{Title: "Usage", Page: "usage", Namespace: "default", Data: usageData{
		Step: time.Hour, From: series.From, Until: series.Until, Sections: []usageSection{newUsageSection(usageBreakdowns[0], &series, "4h")}}})
	require.Equal(t, http.StatusOK, w.Code)
	page := w.Body.String()

	rows, total := usageTable(t, page, "tenant")
	require.Len(t, rows, cairntype.MaxUsageKeys)
	require.Equal(t, usageTableRow{Key: "(other)", Cost: "$1000.0000", In: "5", Out: "0", Reports: "1"}, rows[0],
		"a tenant named (other) is a tenant")
	require.Equal(t, usageTableRow{Key: "(none)", Marker: true, Cost: "$500.0000", In: "5", Out: "0", Reports: "1"}, rows[1])
	last := rows[len(rows)-1]
	require.Equal(t, usageTableRow{Key: "(other)", Marker: true, Cost: fmt.Sprintf("$%.4f", other.Total.CostUSD),
		In: strconv.FormatInt(other.Total.InputTokens, 10), Out: strconv.FormatInt(other.Total.OutputTokens, 10),
		Reports: strconv.Itoa(other.Total.Reports)}, last)
	require.Equal(t, 8, other.Total.Reports, "the 57 keys less the 49 named")
	require.Contains(t, page, `<em class="other" title="the keys past the 49 costliest, summed">(other)</em>`)
	_, wantTotal := wantUsageTable(&series)
	require.Equal(t, wantTotal, total)

	lines := chartLines(t, page, "usage-tenant-cost")
	require.Len(t, lines, usageChartKeys+1)
	require.Equal(t, 4, lines["43 more tenants"], "the rest, (other) among them, as one line of a point per bucket")
	require.Contains(t, lines, "(none)")

	// Each bucket's point is its cost over the chart's top, from the
	// bottom of the plot up: the rest's line sums the keys past the
	// seventh, the (other) key's points among them.
	rest, top := make([]float64, 4), 0.0
	for i, k := range series.Keys {
		for b, p := range k.Points {
			if i >= usageChartKeys {
				rest[b] += p.CostUSD
			} else {
				top = max(top, p.CostUSD)
			}
		}
	}
	for _, v := range rest {
		top = max(top, v)
	}
	ys := chartYs(t, page, "usage-tenant-cost", "43 more tenants")
	require.Len(t, ys, 4)
	for b, v := range rest {
		require.InDelta(t, float64(plotBottom)-float64(plotBottom-plotTop)*v/top, ys[b], 0.051, "bucket %d", b)
	}
}

// chartYs reads the y of each point of the line named name in the chart
// with id.
func chartYs(t *testing.T, page, id, name string) []float64 {
	t.Helper()
	start := strings.Index(page, `<svg id="`+id+`"`)
	require.Positive(t, start, "the page has chart %s", id)
	m := regexp.MustCompile(`<polyline class="line [^"]*" points="([^"]*)"><title>` + regexp.QuoteMeta(html.EscapeString(name)) + `</title>`).
		FindStringSubmatch(page[start:])
	require.NotNil(t, m, "chart %s has a line %s", id, name)
	var ys []float64
	for _, xy := range strings.Fields(m[1]) {
		_, y, ok := strings.Cut(xy, ",")
		require.True(t, ok, xy)
		f, err := strconv.ParseFloat(y, 64)
		require.NoError(t, err)
		ys = append(ys, f)
	}
	return ys
}
