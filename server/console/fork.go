package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// The task page's branch: a fork links to the task it was forked from
// and compares its steps' outputs with that task's; a task forked from
// links to its forks.

// forkLink is a task on the other side of a fork, and the step position
// it was forked at.
type forkLink struct {
	ID       uuid.UUID
	Position int
}

// forkDiff compares a fork's steps with its original's, by position.
type forkDiff struct {
	Rows []forkDiffRow
	// Differ counts the rows whose outputs differ.
	Differ int
	// Cut says the diff stops short: positions past the first
	// consoleDiffPositions, or the original's history read only to its
	// first consoleDiffEvents events.
	Cut bool
	// Positions is consoleDiffPositions, for the page to say so.
	Positions int
}

// forkDiffRow is one step position: its name in each run (they may
// differ past the fork), and its output in each, "" where the run has no
// step there.
type forkDiffRow struct {
	Position          int
	Step              string
	Here, There       string
	HasHere, HasThere bool
	Copied            bool // the fork copied this step
	Differs           bool
}

// consoleDiffCell bounds an output shown in the diff table.
const consoleDiffCell = 300

// consoleDiffPositions bounds the positions the diff shows (the first),
// and consoleDiffEvents the events of the original's history read for it
// (its first): a fork's page reads no more than that of the original
// however long it ran.
const (
	consoleDiffPositions = 200
	consoleDiffEvents    = 5000
)

// forksOf returns the forks a task's history names (task_forked).
func forksOf(events []history.Event) []forkLink {
	var out []forkLink
	for _, e := range events {
		if f, ok := e.Data.(history.TaskForkedData); ok {
			if id, err := uuid.Parse(f.ForkTaskID); err == nil {
				out = append(out, forkLink{ID: id, Position: f.Position})
			}
		}
	}
	return out
}

// buildForkDiff compares the steps of a fork (events) with those of its
// original (theirs), position by position, outputs as stored (a blob
// shows as its reference, compared by its digest).
func buildForkDiff(events, theirs []history.Event, at int) *forkDiff {
	here, errHere := history.Replay(events)
	there, errThere := history.Replay(theirs)
	if errHere != nil || errThere != nil {
		return nil
	}
	byPos := func(steps []history.Step) map[int]history.Step {
		m := make(map[int]history.Step, len(steps))
		for _, st := range steps {
			m[st.Position] = st
		}
		return m
	}
	a, b := byPos(here.CompletedSteps()), byPos(there.CompletedSteps())
	last := -1
	for p := range a {
		last = max(last, p)
	}
	for p := range b {
		last = max(last, p)
	}
	d := &forkDiff{Positions: consoleDiffPositions}
	if last >= consoleDiffPositions {
		last, d.Cut = consoleDiffPositions-1, true
	}
	for pos := 0; pos <= last; pos++ {
		h, okH := a[pos]
		t, okT := b[pos]
		if !okH && !okT {
			continue
		}
		row := forkDiffRow{Position: pos, HasHere: okH, HasThere: okT, Copied: pos <= at}
		row.Step = h.Name
		if !okH {
			row.Step = t.Name
		} else if okT && t.Name != h.Name {
			row.Step = h.Name + " / " + t.Name
		}
		hereOut, thereOut := stepOutput(h), stepOutput(t)
		if okH {
			row.Here = prettyJSON(hereOut, consoleDiffCell)
		}
		if okT {
			row.There = prettyJSON(thereOut, consoleDiffCell)
		}
		row.Differs = okH != okT || h.Name != t.Name || !sameOutput(h, t)
		if row.Differs {
			d.Differ++
		}
		d.Rows = append(d.Rows, row)
	}
	return d
}

// stepOutput is a step's output as stored: its reference when it is kept
// by one.
func stepOutput(st history.Step) json.RawMessage {
	if st.OutputRef != nil {
		ref, err := json.Marshal(st.OutputRef)
		if err == nil {
			return ref
		}
	}
	return st.Output
}

// sameOutput reports whether two steps' outputs are the same content:
// kept by reference (a blob; a fork re-encodes its copies, so a copy over
// the blob threshold is a blob of its own, its key another), by the
// digest the reference carries; in place, as JSON text.
func sameOutput(a, b history.Step) bool {
	digest := func(st history.Step) string {
		if st.OutputRef != nil {
			return st.OutputRef.SHA256
		}
		sum := sha256.Sum256(st.Output)
		return hex.EncodeToString(sum[:])
	}
	if a.OutputRef != nil || b.OutputRef != nil {
		da, db := digest(a), digest(b)
		return da != "" && da == db
	}
	return sameJSON(a.Output, b.Output)
}

// sameJSON reports whether a and b are the same JSON text, white space
// aside.
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// consoleFork fills the task page's branch: the task it was forked from
// (with the diff of the two runs' steps) and the tasks forked from it.
func (s *Console) consoleFork(ctx context.Context, c *call, events []history.Event, data *taskData) {
	data.Forks = forksOf(events)
	f := data.Task.ForkedFrom
	if f == nil {
		return
	}
	id, err := uuid.Parse(f.TaskID)
	if err != nil {
		return
	}
	data.ForkedFrom = &forkLink{ID: id, Position: f.Position}
	// The original may have been removed (retention): then no diff. Its
	// history is read up to consoleDiffEvents events: a prefix of a
	// history replays.
	var theirs []history.Event
	errEnough := errors.New("enough of the original's history")
	err = c.client.RawHistoryPages(ctx, id, 0, func(page []history.Event) error {
		theirs = append(theirs, page...)
		if len(theirs) >= consoleDiffEvents {
			theirs = theirs[:consoleDiffEvents]
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return
	}
	data.ForkDiff = buildForkDiff(events, theirs, f.Position)
	if data.ForkDiff != nil && errors.Is(err, errEnough) {
		data.ForkDiff.Cut = true
	}
}
