package cairntype

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// UsageTotal is usage summed: the tokens and the cost of the usage
// reports (a step's [history.Usage] of one model, on its step_completed
// or attempt_failed) that went into it, and how many there were.
type UsageTotal struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	Reports      int     `json:"reports"`
}

// Tokens is the input and output tokens together.
func (u UsageTotal) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// Add adds one usage report. Figures a report cannot hold (negative or
// not finite: the history refuses them, but a hand-written event may)
// count as zero, as the metrics count them.
func (u *UsageTotal) Add(x history.Usage) {
	u.InputTokens += max(0, x.InputTokens)
	u.OutputTokens += max(0, x.OutputTokens)
	if x.CostUSD > 0 && !math.IsInf(x.CostUSD, 0) {
		u.CostUSD += x.CostUSD
	}
	u.Reports++
}

// Merge adds another total.
func (u *UsageTotal) Merge(o UsageTotal) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CostUSD += o.CostUSD
	u.Reports += o.Reports
}

// ModelUsage is a total of one model's reports.
type ModelUsage struct {
	Model string `json:"model"`
	UsageTotal
}

// TaskUsage is what a task spent, from its history alone: the usage its
// steps reported on step_completed and attempt_failed (a failed call is
// paid for too; a fork's copied steps carry none, the original paid),
// and, when its children were asked for, theirs, recursively: a batch's
// cost.
type TaskUsage struct {
	TaskID      uuid.UUID      `json:"task_id"`
	Type        string         `json:"type"`
	FairnessKey string         `json:"fairness_key,omitempty"`
	Status      history.Status `json:"status"`
	// Own is what the task's own steps spent, OwnByModel the same by
	// model (by name).
	Own        UsageTotal   `json:"own"`
	OwnByModel []ModelUsage `json:"own_by_model"`
	// Total is Own plus the Total of each child, recursively, when the
	// children were asked for; Own otherwise. ByModel is Total by model.
	Total   UsageTotal   `json:"total"`
	ByModel []ModelUsage `json:"by_model"`
	// WithChildren says the children were asked for (Total includes
	// them, Children lists them).
	WithChildren bool `json:"with_children"`
	// Tasks counts the task runs Total sums: 1, plus every run of every
	// descendant. Missing counts the descendants the histories name but
	// the store no longer holds (retention removed them): their usage is
	// not in Total.
	Tasks   int `json:"tasks"`
	Missing int `json:"missing,omitempty"`
	// Children are the task's direct children, by position, each rolled
	// up with its own descendants.
	Children []ChildUsage `json:"children,omitempty"`
}

// ChildUsage is one child of a [TaskUsage], rolled up: the child and its
// descendants. A child that continued as new counts every run of its
// chain (the parent started the chain); Status is its last run's.
type ChildUsage struct {
	Position int            `json:"position"`
	TaskID   uuid.UUID      `json:"task_id"`
	Type     string         `json:"type,omitempty"`
	Status   history.Status `json:"status,omitempty"`
	Runs     int            `json:"runs"`
	Total    UsageTotal     `json:"total"`
	Tasks    int            `json:"tasks"`
	Missing  int            `json:"missing,omitempty"`
}

// The bounds of a task's roll-up with its children: it reads at most
// MaxTaskUsageTasks task runs (the task, its children, theirs, and every
// run of a chain that continued as new); a larger tree is refused, and
// its children can be asked for one by one.
const MaxTaskUsageTasks = 100_000

// UsageBy is what a usage series is broken down by.
type UsageBy string

// The breakdowns of a usage series.
const (
	// UsageByFairnessKey breaks usage down by the task's fairness key
	// (the tenant); tasks without one have the key "".
	UsageByFairnessKey UsageBy = "fairness_key"
	// UsageByModel breaks usage down by the model a step reported.
	UsageByModel UsageBy = "model"
	// UsageByType breaks usage down by task type.
	UsageByType UsageBy = "type"
)

// ParseUsageBy reads a breakdown's name: fairness_key (or tenant), model
// or type.
func ParseUsageBy(s string) (UsageBy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fairness_key", "fairness-key", "tenant":
		return UsageByFairnessKey, nil
	case "model":
		return UsageByModel, nil
	case "type":
		return UsageByType, nil
	}
	return "", errors.Newf("usage: by %q is not one of fairness_key (tenant), model or type", s)
}

// The bounds of a usage series: steps of a minute or more, a window of
// at most MaxUsageWindow cut into at most MaxUsageBuckets buckets, and
// at most MaxUsageKeys keys (the rest summed into one key marked Other).
// The defaults, when a query gives none: a step of an hour over the last
// day.
const (
	MinUsageStep        = time.Minute
	MaxUsageWindow      = 31 * 24 * time.Hour
	MaxUsageBuckets     = 744 // an hour's buckets over 31 days
	MaxUsageKeys        = 50
	DefaultUsageStep    = time.Hour
	DefaultUsageWindow  = 24 * time.Hour
	UsageOtherKeyMarker = "(other)"
)

// UsageSeries is a namespace's usage over a window, broken down by By
// into keys, each a series of equal buckets aligned to the Unix epoch in
// UTC (a step of an hour starts on the hour), oldest first. A report
// counts in the bucket of its event's time.
type UsageSeries struct {
	By    UsageBy       `json:"by"`
	From  time.Time     `json:"from"`  // the first bucket's start
	Until time.Time     `json:"until"` // the last bucket's end
	Step  time.Duration `json:"step"`
	// Keys are ordered by total cost, highest first (then tokens, then
	// key). Past MaxUsageKeys the rest are summed into one last key,
	// UsageOtherKeyMarker, with Other set.
	Keys  []UsageSeriesKey `json:"keys"`
	Total UsageTotal       `json:"total"`
}

// Buckets is the number of buckets.
func (s UsageSeries) Buckets() int {
	if s.Step <= 0 {
		return 0
	}
	return int(s.Until.Sub(s.From) / s.Step)
}

// UsageSeriesKey is one key's series.
type UsageSeriesKey struct {
	Key    string       `json:"key"`
	Other  bool         `json:"other,omitempty"`
	Total  UsageTotal   `json:"total"`
	Points []UsageTotal `json:"points"` // one per bucket, oldest first
}

// UsageCell is one key's total in one bucket: what the store's series
// statement returns, folded by [FoldUsageSeries].
type UsageCell struct {
	Key    string
	Bucket int
	UsageTotal
}

// FoldUsageSeries builds the series of cells over buckets buckets: keys
// ordered by cost, tokens and name, those past MaxUsageKeys summed into
// one. A cell outside the buckets is left out.
func FoldUsageSeries(by UsageBy, from time.Time, step time.Duration, buckets int, cells []UsageCell) UsageSeries {
	out := UsageSeries{By: by, From: from, Until: from.Add(time.Duration(buckets) * step), Step: step, Keys: []UsageSeriesKey{}}
	index := map[string]int{}
	for _, c := range cells {
		if c.Bucket < 0 || c.Bucket >= buckets {
			continue
		}
		i, ok := index[c.Key]
		if !ok {
			i = len(out.Keys)
			index[c.Key] = i
			out.Keys = append(out.Keys, UsageSeriesKey{Key: c.Key, Points: make([]UsageTotal, buckets)})
		}
		out.Keys[i].Points[c.Bucket].Merge(c.UsageTotal)
	}
	for i := range out.Keys {
		for _, p := range out.Keys[i].Points {
			out.Keys[i].Total.Merge(p)
		}
	}
	slices.SortFunc(out.Keys, func(a, b UsageSeriesKey) int {
		switch {
		case a.Total.CostUSD != b.Total.CostUSD:
			if a.Total.CostUSD > b.Total.CostUSD {
				return -1
			}
			return 1
		case a.Total.Tokens() != b.Total.Tokens():
			if a.Total.Tokens() > b.Total.Tokens() {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(out.Keys) > MaxUsageKeys {
		other := UsageSeriesKey{Key: UsageOtherKeyMarker, Other: true, Points: make([]UsageTotal, buckets)}
		for _, k := range out.Keys[MaxUsageKeys-1:] {
			for b, p := range k.Points {
				other.Points[b].Merge(p)
			}
			other.Total.Merge(k.Total)
		}
		out.Keys = append(out.Keys[:MaxUsageKeys-1], other)
	}
	for _, k := range out.Keys {
		out.Total.Merge(k.Total)
	}
	return out
}

// UsageWindow aligns a query's window to its step: from is since rounded
// down to a multiple of step since the Unix epoch, until rounded up; it
// returns the number of buckets between them. A zero step is
// DefaultUsageStep, a zero until is now, a zero since is until less
// DefaultUsageWindow. It refuses a step under MinUsageStep or over
// MaxUsageWindow, since not
// before until, a window over MaxUsageWindow and more than
// MaxUsageBuckets buckets, saying which.
func UsageWindow(since, until time.Time, step time.Duration, now time.Time) (from, to time.Time, buckets int, err error) {
	if step == 0 {
		step = DefaultUsageStep
	}
	if until.IsZero() {
		until = now
	}
	if since.IsZero() {
		since = until.Add(-DefaultUsageWindow)
	}
	switch {
	case step < MinUsageStep || step > MaxUsageWindow:
		return from, to, 0, errors.Newf("usage series: step %s must be between %s and %s", step, MinUsageStep, MaxUsageWindow)
	case !since.Before(until):
		return from, to, 0, errors.Newf("usage series: since %s is not before until %s", since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	case until.Sub(since) > MaxUsageWindow:
		return from, to, 0, errors.Newf("usage series: a window of %s is over %s; ask for a shorter one", until.Sub(since), MaxUsageWindow)
	}
	us := step.Microseconds()
	floor := func(t time.Time) int64 {
		v := t.UnixMicro()
		q := v / us
		if v%us != 0 && v < 0 {
			q--
		}
		return q
	}
	lo, hi := floor(since), floor(until)
	if hi*us != until.UnixMicro() {
		hi++
	}
	if n := hi - lo; n > MaxUsageBuckets {
		return from, to, 0, errors.Newf("usage series: %d buckets of %s; ask for %d at most (a longer step or a shorter window)", n, step, MaxUsageBuckets)
	}
	return time.UnixMicro(lo * us).UTC(), time.UnixMicro(hi * us).UTC(), int(hi - lo), nil
}
