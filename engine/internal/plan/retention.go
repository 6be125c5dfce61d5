package plan

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
)

// RemovalCutoffs are a removal's times as both drivers' statements take
// them: Before for tasks of types without their own, Types and Cutoffs
// (in type order) for those with, and Scan, the latest of them all, for
// the range scan of tasks_finished_idx that the exact cutoffs then filter.
type RemovalCutoffs struct {
	Before  time.Time
	Types   []string
	Cutoffs []time.Time
	Scan    time.Time
}

// Cutoffs returns p's removal cutoffs.
func Cutoffs(p *store.TaskRemovableListParams) RemovalCutoffs {
	c := RemovalCutoffs{Before: p.Before, Scan: p.Before}
	for typ := range p.TypeBefore {
		c.Types = append(c.Types, typ)
	}
	sort.Strings(c.Types)
	for _, typ := range c.Types {
		at := p.TypeBefore[typ]
		c.Cutoffs = append(c.Cutoffs, at)
		if at.After(c.Scan) {
			c.Scan = at
		}
	}
	return c
}

// EncodeTypeRetention is a namespace's per-type retention as stored:
// {"<type>": <milliseconds>}, nil for none.
func EncodeTypeRetention(m map[string]time.Duration) ([]byte, error) {
	if len(m) == 0 {
		return nil, nil
	}
	ms := make(map[string]int64, len(m))
	for typ, d := range m {
		ms[typ] = d.Milliseconds()
	}
	out, err := json.Marshal(ms)
	return out, errors.Wrap(err, "encode type retention")
}

// DecodeTypeRetention reads what EncodeTypeRetention wrote.
func DecodeTypeRetention(data []byte) (map[string]time.Duration, error) {
	if len(data) == 0 {
		return nil, nil
	}
	var ms map[string]int64
	if err := json.Unmarshal(data, &ms); err != nil {
		return nil, errors.Wrap(err, "decode type retention")
	}
	out := make(map[string]time.Duration, len(ms))
	for typ, n := range ms {
		out[typ] = time.Duration(n) * time.Millisecond
	}
	return out, nil
}
