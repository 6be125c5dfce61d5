package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/sdk"
)

// The windows of the usage page (?window=), each with its buckets' step:
// whole minutes or hours, aligned to the Unix epoch in UTC as
// Client.UsageSeries aligns them, at most 61 buckets (the window widened
// to whole steps), well inside its bounds (cairntype.MaxUsageBuckets over
// cairntype.MaxUsageWindow).
var usageWindows = []chartWindowOption{
	{"1h", time.Hour, time.Minute},
	{"24h", 24 * time.Hour, 30 * time.Minute},
	{"7d", 7 * 24 * time.Hour, 3 * time.Hour},
	{"30d", 30 * 24 * time.Hour, 12 * time.Hour},
}

const defaultUsageWindow = "24h"

// usageChartKeys is how many keys a usage chart draws a line for: the
// costliest; a last line sums the rest, the (other) key among them.
const usageChartKeys = 7

// usageBreakdown is one section of the usage page.
type usageBreakdown struct {
	By           cairntype.UsageBy
	ID           string // the section's id and its ?by= name
	Title        string
	Column       string // the table's key column
	NoneTitle    string // what the key "" stands for
	Chart        string // the charts' subject: "tenant"
	ChartPlurals string
}

var usageBreakdowns = []usageBreakdown{
	{By: cairntype.UsageByFairnessKey, ID: "tenant", Title: "By tenant (fairness key)", Column: "Tenant",
		NoneTitle: "tasks started without a fairness key", Chart: "tenant", ChartPlurals: "tenants"},
	{By: cairntype.UsageByModel, ID: "model", Title: "By model", Column: "Model",
		NoneTitle: "usage reported without a model", Chart: "model", ChartPlurals: "models"},
	{By: cairntype.UsageByType, ID: "type", Title: "By task type", Column: "Type",
		NoneTitle: "tasks without a type", Chart: "type", ChartPlurals: "types"},
}

type usageData struct {
	Windows     windowLinks
	Breakdowns  []usageLink
	Step        time.Duration
	From, Until time.Time
	Sections    []usageSection
}

// usageLink chooses the breakdowns shown (?by=).
type usageLink struct {
	Name, Href string
	Current    bool
}

// usageSection is one breakdown's charts and its table of totals.
type usageSection struct {
	usageBreakdown
	Charts []chart
	Rows   []usageRow
	Total  cairntype.UsageTotal
}

// usageRow is one key's totals over the window. Other marks the key that
// sums the keys past cairntype.MaxUsageKeys; None the key "".
type usageRow struct {
	Key         string
	Other, None bool
	cairntype.UsageTotal
}

// consoleUsage is what the namespace's steps reported spending over the
// chosen window (?window=, a day by default), by tenant, model and type
// (?by= one of them): a chart of cost and one of tokens per bucket, and
// a table of each key's totals, from Client.UsageSeries.
func (s *Console) consoleUsage(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	page.Title, page.Page = "Usage", "usage"
	win, err := pickWindow(r, usageWindows, defaultUsageWindow)
	if err != nil {
		s.consoleFail(w, r, page, http.StatusBadRequest, err.Error())
		return
	}
	breakdowns := usageBreakdowns
	by := r.URL.Query().Get("by")
	if by != "" {
		parsed, err := cairntype.ParseUsageBy(by)
		if err != nil {
			s.consoleFail(w, r, page, http.StatusBadRequest, err.Error())
			return
		}
		for _, b := range usageBreakdowns {
			if b.By == parsed {
				breakdowns, by = []usageBreakdown{b}, b.ID
			}
		}
	}
	query := url.Values{"namespace": {c.namespace}}
	if by != "" {
		query.Set("by", by)
	}
	data := usageData{Windows: s.windowLinksOf("/console/usage", query, win.Name, usageWindows), Step: win.Step}
	for _, b := range append([]usageBreakdown{{ID: ""}}, usageBreakdowns...) {
		q := url.Values{"namespace": {c.namespace}, "window": {win.Name}}
		name := "all"
		if b.ID != "" {
			q.Set("by", b.ID)
			name = b.ID
		}
		data.Breakdowns = append(data.Breakdowns, usageLink{Name: name, Href: s.path("/console/usage?" + q.Encode()), Current: b.ID == by})
	}
	now := time.Now()
	for _, b := range breakdowns {
		series, err := c.client.UsageSeries(r.Context(), sdk.UsageQuery{By: b.By, Since: now.Add(-win.Window), Until: now, Step: win.Step})
		if err != nil {
			if page.Error == "" {
				page.Error = s.consoleError(r, err)
			}
			continue
		}
		data.From, data.Until = series.From, series.Until
		data.Sections = append(data.Sections, newUsageSection(b, series, win.Name))
	}
	page.Data = data
	s.render(w, http.StatusOK, "usage", page)
}

// newUsageSection is a breakdown's charts and table from its series.
func newUsageSection(b usageBreakdown, series *cairntype.UsageSeries, window string) usageSection {
	sec := usageSection{usageBreakdown: b, Total: series.Total}
	for _, k := range series.Keys {
		sec.Rows = append(sec.Rows, usageRow{Key: k.Key, Other: k.Other, None: k.Key == "" && !k.Other, UsageTotal: k.Total})
	}
	sec.Charts = usageCharts(b, series, window)
	return sec
}

// usageCharts are a series' two charts, cost and tokens per bucket: a
// line for each of the usageChartKeys costliest keys, and one summing
// the rest when there are more.
func usageCharts(b usageBreakdown, series *cairntype.UsageSeries, window string) []chart {
	buckets := series.Buckets()
	var lines []chartLine
	var cost, tokens [][]float64
	add := func(name, class string) {
		lines = append(lines, chartLine{Name: name, Class: class})
		cost, tokens = append(cost, make([]float64, buckets)), append(tokens, make([]float64, buckets))
	}
	for i, k := range series.Keys {
		line := min(i, usageChartKeys)
		switch {
		case i < usageChartKeys:
			add(usageKeyName(k), "s"+strconv.Itoa(i))
		case i == usageChartKeys:
			add(fmt.Sprintf("%d more %s", len(series.Keys)-usageChartKeys, b.ChartPlurals), "rest")
		}
		for j, p := range k.Points {
			cost[line][j] += p.CostUSD
			tokens[line][j] += float64(p.Tokens())
		}
	}
	if len(lines) == 0 { // nothing reported: a flat line at zero
		add("no usage", "rest")
	}
	bucket := span(series.Step)
	costLines, tokenLines := lines, append([]chartLine(nil), lines...)
	costTop, tokenTop := plotLines(costLines, cost...), plotLines(tokenLines, tokens...)
	total := series.Total
	mk := func(what string, lines []chartLine, top, all string) chart {
		return chart{ID: "usage-" + b.ID + "-" + what, Title: usageTitle(what) + " by " + b.Chart, Latest: all + " · " + window,
			YMax: top, From: "−" + window, To: "now", Lines: lines,
			Summary: fmt.Sprintf("%s by %s per %s bucket over the last %s: %s in all", usageTitle(what), b.Chart, bucket, window, all)}
	}
	return []chart{
		mk("cost", costLines, usd(costTop), usd(total.CostUSD)),
		mk("tokens", tokenLines, compactCount(tokenTop), compactCount(float64(total.Tokens()))+" tokens"),
	}
}

func usageTitle(what string) string {
	if what == "cost" {
		return "Cost"
	}
	return "Tokens"
}

// usageKeyName is a key as a chart's legend names it.
func usageKeyName(k cairntype.UsageSeriesKey) string {
	switch {
	case k.Other:
		return cairntype.UsageOtherKeyMarker
	case k.Key == "":
		return "(none)"
	}
	return k.Key
}

// usd writes a chart's cost in US dollars: to the cent, or to 3
// significant digits under a cent. The tables write 4 decimals, as the
// task page and the CLI do.
func usd(f float64) string {
	if f == 0 || f >= 0.01 {
		return fmt.Sprintf("$%.2f", f)
	}
	return "$" + strconv.FormatFloat(f, 'g', 3, 64)
}

// compactCount writes a count short for a chart: 950, 12.5k, 3.2M.
func compactCount(f float64) string {
	short := func(v float64, unit string) string {
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + unit
	}
	switch {
	case f >= 1e9:
		return short(f/1e9, "G")
	case f >= 1e6:
		return short(f/1e6, "M")
	case f >= 1e4:
		return short(f/1e3, "k")
	}
	return strconv.FormatFloat(f, 'f', 0, 64)
}
