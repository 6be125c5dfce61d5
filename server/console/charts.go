package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairnflow/cairn/cairntype"
)

// chartWindowOption is a window a page's charts may show (?window=):
// its name in the URL, its length and, for the usage page, its buckets'.
type chartWindowOption struct {
	Name   string
	Window time.Duration
	Step   time.Duration // zero: Window / chartBuckets (the queue charts)
}

// The windows a queue chart may show, and the default.
var chartWindows = []chartWindowOption{{"15m", 15 * time.Minute, 0}, {"1h", time.Hour, 0}, {"6h", 6 * time.Hour, 0}, {"24h", 24 * time.Hour, 0}}

const defaultChartWindow = "1h"

// chartBuckets is how many points each chart has: a 15-second bucket over
// 15 minutes, 24 minutes over a day.
const chartBuckets = 60

// chartWindow reads ?window=; an unknown one is an error naming the
// choices.
func chartWindow(r *http.Request) (string, time.Duration, error) {
	w, err := pickWindow(r, chartWindows, defaultChartWindow)
	return w.Name, w.Window, err
}

// pickWindow reads ?window= among windows (def when absent); an unknown
// one is an error naming the choices.
func pickWindow(r *http.Request, windows []chartWindowOption, def string) (chartWindowOption, error) {
	name := r.URL.Query().Get("window")
	if name == "" {
		name = def
	}
	var names []string
	for _, w := range windows {
		if w.Name == name {
			return w, nil
		}
		names = append(names, w.Name)
	}
	return chartWindowOption{}, fmt.Errorf("window %q is not one of %s", name, strings.Join(names, ", "))
}

// The size of a chart's drawing, in SVG units: the plot sits right of the
// y labels and above the x labels.
const (
	chartWidth, chartHeight = 270, 90
	plotLeft, plotRight     = 44, 266
	plotTop, plotBottom     = 18, 74
)

// chart is one small time series, drawn as inline SVG by the "chart"
// template: no script, so it shows without JavaScript.
type chart struct {
	ID, Title string
	Summary   string // what the chart shows and its latest value: the SVG's <title> and aria-label
	Latest    string // the latest value, written on the chart
	YMax      string // the top of the y axis
	From, To  string // the x axis' ends
	Lines     []chartLine
}

// chartLine is one series of a chart: an SVG polyline's points.
type chartLine struct {
	Name, Class, Points string
}

// Width and the rest give the template the chart's geometry.
func (chart) Width() int   { return chartWidth }
func (chart) Height() int  { return chartHeight }
func (chart) Left() int    { return plotLeft }
func (chart) Right() int   { return plotRight }
func (chart) Top() int     { return plotTop }
func (chart) Bottom() int  { return plotBottom }
func (chart) LabelY() int  { return chartHeight - 3 }
func (chart) MiddleY() int { return (plotTop + plotBottom) / 2 }

// queueCharts are the four charts of a queue's series: its load (waiting,
// due, running), throughput, error rate and schedule-to-start latency.
func queueCharts(q cairntype.QueueSeries, window string) []chart {
	id := "q-" + chartID(q.Queue)
	from := "−" + window
	pick := func(f func(cairntype.SeriesPoint) float64) []float64 {
		out := make([]float64, len(q.Points))
		for i, p := range q.Points {
			out[i] = f(p)
		}
		return out
	}
	waiting := pick(func(p cairntype.SeriesPoint) float64 { return float64(p.Waiting) })
	due := pick(func(p cairntype.SeriesPoint) float64 { return float64(p.Due) })
	running := pick(func(p cairntype.SeriesPoint) float64 { return float64(p.Running) })
	throughput := pick(func(p cairntype.SeriesPoint) float64 { return p.Throughput(q.Step) })
	errorRate := pick(func(p cairntype.SeriesPoint) float64 { return 100 * p.ErrorRate() })
	latency := pick(func(p cairntype.SeriesPoint) float64 { return p.MeanLatency().Seconds() })
	last := cairntype.SeriesPoint{}
	if len(q.Points) > 0 {
		last = q.Points[len(q.Points)-1]
	}
	// The charts' latest values are their last bucket's; the average is
	// over the window, as the overview's table has it.
	bucket, span := bucketSpan(q.Step), q.Step*time.Duration(max(len(q.Points), 1))
	average := 0.0
	for _, p := range q.Points {
		average += float64(p.Completed)
	}
	if span > 0 {
		average /= span.Minutes()
	}
	count := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	perMin := perMinute
	number := func(f float64) string { return strconv.FormatFloat(f, 'g', 3, 64) } // the axis' short form
	pct := func(f float64) string { return fmt.Sprintf("%.0f%%", f) }
	secs := func(f float64) string { return roundDuration(time.Duration(f * float64(time.Second))).String() }
	return []chart{
		newChart(id+"-load", "Tasks", q.Queue, from,
			fmt.Sprintf("%d waiting, %d due, %d running", last.Waiting, last.Due, last.Running),
			fmt.Sprintf("%d · %d · %d", last.Waiting, last.Due, last.Running), count,
			[]chartLine{{Name: "waiting", Class: "waiting"}, {Name: "due", Class: "due"}, {Name: "running", Class: "running"}},
			waiting, due, running),
		newChart(id+"-throughput", "Completed/min", q.Queue, from,
			fmt.Sprintf("%s in the last %s, %s on average", perMin(last.Throughput(q.Step)), bucket, perMin(average)),
			perMin(last.Throughput(q.Step))+" · last "+bucket, number, []chartLine{{Name: "completed tasks per minute", Class: "ok"}}, throughput),
		newChart(id+"-errors", "Failed attempts", q.Queue, from, pct(100*last.ErrorRate())+" of the attempts that ended in the last "+bucket+" failed",
			pct(100*last.ErrorRate())+" · last "+bucket, pct, []chartLine{{Name: "failed attempts, % of attempts ended", Class: "bad"}}, errorRate),
		newChart(id+"-latency", "Schedule to start", q.Queue, from, secs(last.MeanLatency().Seconds())+" mean wait from run time to start",
			secs(last.MeanLatency().Seconds()), secs, []chartLine{{Name: "mean latency", Class: "latency"}}, latency),
	}
}

// perMinute writes a rate per minute, the unit of every rate the
// console shows: one decimal, or two significant digits under 1/min, so
// 17 tasks an hour read 0.28/min, not 0.3 or 0.0.
func perMinute(f float64) string {
	if f == 0 || f >= 1 {
		return fmt.Sprintf("%.1f/min", f)
	}
	return strconv.FormatFloat(f, 'g', 2, 64) + "/min"
}

// bucketSpan names a chart's bucket: "1 min", "15 s", "24 min".
func bucketSpan(step time.Duration) string {
	if step >= time.Minute && step%time.Minute == 0 {
		return fmt.Sprintf("%d min", step/time.Minute)
	}
	return fmt.Sprintf("%d s", step/time.Second)
}

// newChart scales the series (one per line) into the plot: y from 0 to
// their maximum, x over the window, oldest at the left.
func newChart(id, title, queue, from, latest, short string, format func(float64) string, lines []chartLine, series ...[]float64) chart {
	top := plotLines(lines, series...)
	return chart{ID: id, Title: title, Latest: short, YMax: format(top), From: from, To: "now", Lines: lines,
		Summary: fmt.Sprintf("%s of queue %s over the last %s, now %s", title, queue, strings.TrimPrefix(from, "−"), latest)}
}

// plotLines sets each line's points from its series (one per line): y
// from 0 to their maximum, which it returns, x over the window, oldest
// at the left.
func plotLines(lines []chartLine, series ...[]float64) float64 {
	top := 0.0
	for _, s := range series {
		for _, v := range s {
			top = max(top, v)
		}
	}
	scale := top
	if scale == 0 {
		scale = 1 // a flat line at zero, not a division by zero
	}
	for i, s := range series {
		var b strings.Builder
		for j, v := range s {
			x := float64(plotLeft)
			if len(s) > 1 {
				x += float64(plotRight-plotLeft) * float64(j) / float64(len(s)-1)
			}
			y := float64(plotBottom) - float64(plotBottom-plotTop)*v/scale
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x, y)
		}
		lines[i].Points = b.String()
	}
	return top
}

// chartID keeps the letters and digits of a queue's name for element ids.
func chartID(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "_%x", r)
		}
	}
	return b.String()
}
