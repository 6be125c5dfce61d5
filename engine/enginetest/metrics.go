package enginetest

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
)

// Gathered is what a Prometheus registry held at one scrape, by metric
// name, for assertions on cairn's metrics.
type Gathered map[string]*dto.MetricFamily

// Gather scrapes g, failing the test if the scrape reports an error, and
// lints the exposition as `promtool check metrics` does, failing the test
// on any problem.
func Gather(tb testing.TB, g prometheus.Gatherer) Gathered {
	tb.Helper()
	families, err := g.Gather()
	require.NoError(tb, err)
	RequireLintClean(tb, families)
	out := make(Gathered, len(families))
	for _, f := range families {
		out[f.GetName()] = f
	}
	return out
}

// RequireLintClean encodes families in the text exposition format and
// runs promlint over it (what `promtool check metrics` runs), failing the
// test on any problem.
func RequireLintClean(tb testing.TB, families []*dto.MetricFamily) {
	tb.Helper()
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		require.NoError(tb, enc.Encode(f))
	}
	problems, err := promlint.New(&text).Lint()
	require.NoError(tb, err)
	require.Empty(tb, problems, "promlint problems in:\n%s", text.String())
}

// Value is the sum of the counter or gauge series of name whose labels
// include labels (name, value pairs): 0 when there is none.
func (g Gathered) Value(name string, labels ...string) float64 {
	var sum float64
	for _, m := range g.series(name, labels) {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		}
	}
	return sum
}

// SampleCount is the number of observations of the histogram series of
// name whose labels include labels, summed.
func (g Gathered) SampleCount(name string, labels ...string) uint64 {
	var n uint64
	for _, m := range g.series(name, labels) {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// Series is the number of series of name whose labels include labels.
func (g Gathered) Series(name string, labels ...string) int {
	return len(g.series(name, labels))
}

func (g Gathered) series(name string, labels []string) []*dto.Metric {
	f := g[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range f.GetMetric() {
		if hasLabels(m, labels) {
			out = append(out, m)
		}
	}
	return out
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	have := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if v, ok := have[pairs[i]]; !ok || v != pairs[i+1] {
			return false
		}
	}
	return true
}
