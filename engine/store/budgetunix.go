package store

import (
	"slices"
	"time"
)

// BudgetUnix is how a window start is kept by the drivers: Unix seconds,
// 0 for the zero time (a task budget's one window).
func BudgetUnix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// BudgetFromUnix is [BudgetUnix]'s inverse.
func BudgetFromUnix(u int64) time.Time {
	if u == 0 {
		return time.Time{}
	}
	return time.Unix(u, 0).UTC()
}

// SumDeltas merges deltas of the same window into one, in key order:
// what the drivers write, each window once.
func SumDeltas(ds []BudgetWindowDelta) []BudgetWindowDelta {
	byKey := map[BudgetWindowKey]int{}
	var out []BudgetWindowDelta
	for _, d := range ds {
		d.Key.Start = BudgetFromUnix(BudgetUnix(d.Key.Start))
		i, ok := byKey[d.Key]
		if !ok {
			byKey[d.Key] = len(out)
			out = append(out, d)
			continue
		}
		o := &out[i]
		o.SpentUSD += d.SpentUSD
		o.SpentTokens += d.SpentTokens
		o.ReservedUSD += d.ReservedUSD
		o.ReservedTokens += d.ReservedTokens
		o.RaisedUSD += d.RaisedUSD
		o.RaisedTokens += d.RaisedTokens
	}
	slices.SortFunc(out, func(a, b BudgetWindowDelta) int { return a.Key.Compare(b.Key) })
	return out
}
