package console

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cairnflow/cairn/history"
)

// The task page's time axis: every attempt, step, sleep, wait and signal
// of the task drawn at its place in time, one row each, so that steps run
// in parallel (workflow.Go, workflow.Map) show as overlapping bars and
// sequential ones one after the other. Like the queue charts
// (console_charts.go) the geometry is computed here and the template only
// prints it: positioned spans, no script.

// timeAxisRows bounds the rows drawn; a task with more (a large Map) says
// how many were left out.
const timeAxisRows = 300

// timeAxis is the drawing: Start to End is the width of every row's track.
type timeAxis struct {
	Start, End time.Time
	Span       time.Duration
	Ticks      []axisTick
	Rows       []*axisRow
	Hidden     int  // rows past timeAxisRows, not drawn
	Open       bool // the task has not finished: the axis ends now
}

// axisTick is a mark on the axis: Label is the time since Start.
type axisTick struct {
	Left  float64
	Label string
}

// The kinds of rows.
const (
	rowAttempt = "attempt"
	rowStep    = "step"
	rowSleep   = "sleep"
	rowWait    = "wait"
	rowSignal  = "signal"
	rowPatch   = "patch"    // a patch marker: the workflow took a patch's new branch
	rowChild   = "child"    // one child workflow, start to finish
	rowKids    = "children" // every child of a big fan-out, as start and finish ticks
)

// childAxisRows is how many children get a row each; a task with more
// gets one "children" row instead, its starts and finishes as ticks
// (childAxisBuckets of them at most per kind, each counting the children
// whose start or finish falls in its slice of the axis).
const (
	childAxisRows    = 8
	childAxisBuckets = 100
)

// The classes of rows beyond the attempts' (blockOK and the rest).
const (
	rowWaiting   = "waiting"   // a wait or sleep still under way
	rowSignalled = "signalled" // a wait its signal ended
	rowTimedOut  = "timed-out" // a wait that reached its deadline
	rowEnded     = "ended"     // a sleep that fired, or anything the task's end cut short
)

// axisRow is one bar: from Start to End, Left and Width in percent of
// the axis. Text says what it is, for its title and aria-label; Detail is
// printed after it.
type axisRow struct {
	Kind, Class  string
	Label        string
	Start, End   time.Time
	Left, Width  float64
	Text, Detail string
	Marks        []axisMark
	Open         bool      // still under way: its end is the axis' end
	deadline     time.Time // a wait's
}

// axisMark is a point on a row: a signal's arrival, a wait's deadline.
type axisMark struct {
	Class, Text string
	At          time.Time
	Left        float64
}

// buildTimeAxis lays out events on a time axis. A step ran from its
// step_completed's At less its DurationMillis to that At (its record);
// a failed step, which records no duration, from the attempt's previous
// event to the failure. A wait runs from its wait_started to the signal
// that ended it, its wait_timed_out, or the task's end; a sleep from its
// timer_started to its timer_fired. A task not finished (finished false)
// has its axis, and whatever is still under way, end at now.
func buildTimeAxis(events []history.Event, finished bool, now time.Time) *timeAxis {
	if len(events) == 0 {
		return nil
	}
	ax := &timeAxis{Start: events[0].At, End: events[len(events)-1].At, Open: !finished}
	var (
		attempt *axisRow // the attempt running
		last    time.Time
		wait    *axisRow // the wait under way
		waitFor string
		waitPos int
		sleep   *axisRow // the sleep under way
		// The wait for children under way: the positions it awaits, how
		// many must finish and how many have.
		childWait    *axisRow
		awaited      map[int]bool
		awaitN, gotN int
		kids         []*childSpan // by position
		kidsAt       = -1         // index in ax.Rows of the children's place
		labels       = newStepLabels(events)
	)
	add := func(r *axisRow) *axisRow {
		ax.Rows = append(ax.Rows, r)
		return r
	}
	endAttempt := func(at time.Time, class string) {
		if attempt != nil {
			attempt.End, attempt.Class, attempt.Open = at, class, false
			attempt = nil
		}
	}
	// ended closes what the task's end cut short.
	ended := func(at time.Time) {
		for _, r := range []*axisRow{wait, sleep, childWait} {
			if r != nil {
				r.End, r.Class, r.Open = at, rowEnded, false
				r.Detail += " · ended with the task"
			}
		}
		wait, sleep, childWait = nil, nil, nil
	}
	for _, e := range events {
		ax.Start, ax.End = minTime(ax.Start, e.At), maxTime(ax.End, e.At)
		switch p := e.Data.(type) {
		case history.AttemptStartedData:
			if childWait != nil {
				// Woken before its children finished: a cancel, its deadline.
				childWait.End, childWait.Class, childWait.Open = e.At, rowEnded, false
				childWait.Detail = fmt.Sprintf("woken after %s with %d of %d finished", roundDuration(e.At.Sub(childWait.Start)), gotN, awaitN)
				childWait = nil
			}
			endAttempt(e.At, blockOK) // an attempt left open by a history the console does not know
			attempt = add(&axisRow{Kind: rowAttempt, Class: blockOpen, Label: fmt.Sprintf("Attempt %d", e.Attempt), Start: e.At, Open: true})
			if p.WorkerID != "" {
				attempt.Detail = p.WorkerID
			}
		case history.StepCompletedData:
			d := time.Duration(p.DurationMillis) * time.Millisecond
			start := e.At.Add(-d)
			if p.DurationMillis == 0 && attempt != nil {
				start = last // written before durations were: since the previous event
			}
			ran, name := roundDuration(e.At.Sub(start)), labels.of(p.Position, p.Name)
			add(&axisRow{Kind: rowStep, Class: blockOK, Label: name, Start: start, End: e.At, Detail: ran.String(),
				Text: fmt.Sprintf("step %d %s ran %s, from %s to %s", p.Position, name, ran, consoleTime(start), consoleTime(e.At))})
		case history.TimerStartedData:
			sleep = add(&axisRow{Kind: rowSleep, Class: rowWaiting, Label: "sleep", Start: e.At, Open: true,
				Detail: "until " + consoleTime(p.FireAt)})
			endAttempt(e.At, blockOK)
		case history.TimerFiredData:
			if sleep != nil {
				sleep.End, sleep.Class, sleep.Open = e.At, rowEnded, false
				sleep = nil
			}
		case history.WaitStartedData:
			label := "wait " + p.Name
			if p.Select != nil {
				label = fmt.Sprintf("select %d", p.Position)
			}
			if wait != nil && waitFor == p.Name && waitPos == p.Position {
				// Woken with no signal, it waits again: one wait, a new deadline.
				wait.Marks = wait.Marks[:0]
			} else {
				wait = add(&axisRow{Kind: rowWait, Class: rowWaiting, Label: label, Start: e.At, Open: true})
				waitFor, waitPos = p.Name, p.Position
			}
			wait.deadline, wait.Detail = p.Deadline, "deadline "+consoleTime(p.Deadline)
			wait.Marks = append(wait.Marks, axisMark{Class: "deadline", At: p.Deadline,
				Text: "deadline of wait " + p.Name + ": " + consoleTime(p.Deadline)})
			endAttempt(e.At, blockOK)
		case history.SignalReceivedData:
			text := "signal " + p.Name
			if p.Sender != "" {
				text += " from " + p.Sender
			}
			text += " at " + consoleTime(e.At)
			mark := axisMark{Class: "signal", At: e.At, Text: text}
			if wait != nil && waitFor == p.Name {
				wait.End, wait.Class, wait.Open = e.At, rowSignalled, false
				wait.Marks = append(wait.Marks, mark)
				wait.Detail = fmt.Sprintf("signalled after %s", roundDuration(e.At.Sub(wait.Start)))
				if p.Sender != "" {
					wait.Detail += " by " + p.Sender
				}
				wait.Detail += " · deadline " + consoleTime(wait.deadline)
				wait = nil
				continue
			}
			// A signal no wait was waiting for: kept for a later receive.
			r := add(&axisRow{Kind: rowSignal, Class: rowSignal, Label: "signal " + p.Name, Start: e.At, End: e.At, Marks: []axisMark{mark}})
			if p.Sender != "" {
				r.Detail = "from " + p.Sender
			}
		case history.SelectMatchedData:
			// A select that waited ends here (a plain receive's wait has a
			// name, and ends at its signal).
			if wait != nil && waitFor == "" && waitPos == p.Position {
				wait.End, wait.Class, wait.Open = e.At, rowSignalled, false
				wait.Detail = fmt.Sprintf("%s after %s", selectMatchedText(p), roundDuration(e.At.Sub(wait.Start)))
				wait.Marks = append(wait.Marks, axisMark{Class: "signal", At: e.At, Text: selectMatchedText(p) + " at " + consoleTime(e.At)})
				wait = nil
			}
		case history.PatchRecordedData:
			text := fmt.Sprintf("patch %s taken at step %d, %s", p.PatchID, p.Position, consoleTime(e.At))
			add(&axisRow{Kind: rowPatch, Class: rowPatch, Label: "patch " + p.PatchID, Start: e.At, End: e.At,
				Detail: fmt.Sprintf("new branch from step %d", p.Position), Text: text,
				Marks: []axisMark{{Class: rowPatch, At: e.At, Text: text}}})
		case history.ChildStartedData:
			if kidsAt < 0 {
				kidsAt = len(ax.Rows)
				add(nil) // the children's place, filled in below
			}
			kids = append(kids, &childSpan{ChildStartedData: p, start: e.At})
		case history.ChildFinishedData:
			if p.Position >= 0 && p.Position < len(kids) && kids[p.Position].ChildID == p.ChildID {
				k := kids[p.Position]
				k.finished, k.end, k.status = true, e.At, p.Status
				if p.Error != nil {
					k.message = p.Error.Message
				}
			}
			if childWait != nil && awaited[p.Position] {
				gotN++
				if gotN >= awaitN {
					childWait.End, childWait.Class, childWait.Open = e.At, rowSignalled, false
					childWait.Marks = append(childWait.Marks, axisMark{Class: "signal", At: e.At,
						Text: fmt.Sprintf("child %d %s at %s", p.Position, p.Status, consoleTime(e.At))})
					childWait.Detail = fmt.Sprintf("%d of %d finished after %s", gotN, len(awaited), roundDuration(e.At.Sub(childWait.Start)))
					childWait = nil
				}
			}
		case history.ChildWaitStartedData:
			childWait = add(&axisRow{Kind: rowWait, Class: rowWaiting, Label: "wait " + childWaitText(p), Start: e.At, Open: true})
			awaited, awaitN, gotN = map[int]bool{}, max(p.Count, 1), 0
			for _, pos := range p.Positions {
				awaited[pos] = true
			}
			childWait.Detail = fmt.Sprintf("%d of %d to finish", awaitN, len(awaited))
			endAttempt(e.At, blockOK)
		case history.WaitTimedOutData:
			if wait != nil && waitFor == p.Name {
				wait.End, wait.Class, wait.Open = e.At, rowTimedOut, false
				wait.Detail = fmt.Sprintf("timed out after %s, no signal · deadline %s", roundDuration(e.At.Sub(wait.Start)), consoleTime(wait.deadline))
				wait = nil
			}
		case history.AttemptFailedData:
			failedStepRow(ax, attempt, last, e.At, p.Error, labels)
			endAttempt(e.At, blockFailed)
		case history.LeaseExpiredData:
			endAttempt(e.At, blockFailed)
		case history.TaskReleasedData:
			endAttempt(e.At, blockOK)
		case history.TaskCompletedData:
			endAttempt(e.At, blockOK)
			ended(e.At)
		case history.TaskFailedData:
			failedStepRow(ax, attempt, last, e.At, p.Error, labels)
			endAttempt(e.At, blockFailed)
			ended(e.At)
		case history.TaskDeadLetteredData:
			failedStepRow(ax, attempt, last, e.At, p.Error, labels)
			endAttempt(e.At, blockFailed)
			ended(e.At)
		case history.TaskCancelledData:
			endAttempt(e.At, blockCancelled)
			ended(e.At)
		case history.TaskExpiredData:
			ended(e.At)
		}
		last = e.At
	}
	if !finished {
		ax.End = maxTime(ax.End, now)
	}
	ax.Span = ax.End.Sub(ax.Start)
	if kidsAt >= 0 {
		ax.Rows = slices.Concat(ax.Rows[:kidsAt], childRows(ax, kids), ax.Rows[kidsAt+1:])
	}
	for _, r := range ax.Rows {
		if r.Open {
			r.End = ax.End
		}
		r.Start, r.End = maxTime(r.Start, ax.Start), minTime(maxTime(r.End, r.Start), ax.End)
		r.Left, r.Width = ax.place(r.Start), thousandth(ax.place(r.End)-ax.place(r.Start))
		if r.Text == "" {
			r.Text = r.describe()
		}
		kept := r.Marks[:0]
		for _, m := range r.Marks {
			if m.At.Before(ax.Start) || m.At.After(ax.End) {
				continue // a deadline past the axis is in the row's detail
			}
			m.Left = ax.place(m.At)
			kept = append(kept, m)
		}
		r.Marks = kept
	}
	if len(ax.Rows) > timeAxisRows {
		ax.Hidden, ax.Rows = len(ax.Rows)-timeAxisRows, ax.Rows[:timeAxisRows]
	}
	ax.Ticks = axisTicks(ax.Span)
	return ax
}

// failedStepRow adds the bar of the step an attempt failed in, as the
// attempt list does (failedStep): from the attempt's previous event to
// the failure.
func failedStepRow(ax *timeAxis, attempt *axisRow, last, at time.Time, info history.ErrorInfo, labels stepLabels) {
	if attempt == nil || info.Step == "" {
		return
	}
	ran, name := roundDuration(at.Sub(last)), labels.of(info.Position, info.Step)
	ax.Rows = append(ax.Rows, &axisRow{Kind: rowStep, Class: blockFailed, Label: name, Start: last, End: at, Detail: "failed · " + ran.String(),
		Text: fmt.Sprintf("step %d %s failed after %s, from %s to %s", info.Position, name, ran, consoleTime(last), consoleTime(at))})
}

// describe is a row's text when it has none of its own.
func (r *axisRow) describe() string {
	d := roundDuration(r.End.Sub(r.Start))
	switch {
	case r.Kind == rowSignal || r.Kind == rowPatch:
		if len(r.Marks) > 0 {
			return r.Marks[0].Text
		}
		return r.Label
	case r.Open && r.Detail != "" && r.Kind != rowAttempt:
		return fmt.Sprintf("%s, under way for %s, %s", r.Label, d, r.Detail)
	case r.Open:
		return fmt.Sprintf("%s, under way for %s", r.Label, d)
	case r.Detail != "" && r.Kind != rowAttempt:
		return fmt.Sprintf("%s, %s", r.Label, r.Detail)
	}
	return fmt.Sprintf("%s, %s", r.Label, d)
}

// place is t's position on the axis, in percent, to a thousandth.
func (ax *timeAxis) place(t time.Time) float64 {
	if ax.Span <= 0 {
		return 0
	}
	return thousandth(min(100, max(0, 100*float64(t.Sub(ax.Start))/float64(ax.Span))))
}

// thousandth rounds a percentage for the page.
func thousandth(f float64) float64 { return math.Round(f*1000) / 1000 }

// axisSteps are the round steps ticks may take, smallest first.
var axisSteps = func() []time.Duration {
	var steps []time.Duration
	for unit := time.Millisecond; unit <= 10*time.Second; unit *= 10 {
		steps = append(steps, unit, 2*unit, 5*unit)
	}
	return append(steps, 15*time.Second, 30*time.Second, time.Minute, 2*time.Minute, 5*time.Minute, 10*time.Minute,
		15*time.Minute, 30*time.Minute, time.Hour, 2*time.Hour, 3*time.Hour, 6*time.Hour, 12*time.Hour, 24*time.Hour,
		48*time.Hour, 7*24*time.Hour, 14*24*time.Hour, 28*24*time.Hour)
}()

// axisMaxTicks bounds the ticks past the axis' start.
const axisMaxTicks = 8

// axisTicks marks the axis at the smallest round step that gives at most
// axisMaxTicks ticks past its start, each labelled with the time since
// the start.
func axisTicks(span time.Duration) []axisTick {
	ticks := []axisTick{{Left: 0, Label: "0"}}
	if span <= 0 {
		return ticks
	}
	step := axisSteps[len(axisSteps)-1]
	for _, s := range axisSteps {
		if span/s <= axisMaxTicks {
			step = s
			break
		}
	}
	for t := step; t <= span; t += step {
		ticks = append(ticks, axisTick{Left: thousandth(100 * float64(t) / float64(span)), Label: "+" + tickLabel(t)})
	}
	return ticks
}

// tickLabel is a round duration in its largest whole unit: "2h", "15m",
// "30s", "500ms", "1.5s".
func tickLabel(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// childWaitText says what a wait for children awaits: "child 3", "2 of
// 5 children".
func childWaitText(p history.ChildWaitStartedData) string {
	if len(p.Positions) == 1 {
		return fmt.Sprintf("child %d", p.Positions[0])
	}
	return fmt.Sprintf("%d of %d children", max(p.Count, 1), len(p.Positions))
}

// childSpan is a child on the axis: from its child_started to its
// child_finished, if any.
type childSpan struct {
	history.ChildStartedData
	start, end time.Time
	finished   bool
	status     history.Status
	message    string
}

// childClass is the class of a finished child's bar: how it ended.
func childClass(st history.Status) string {
	switch st {
	case history.StatusCompleted:
		return blockOK
	case history.StatusCancelled, history.StatusExpired:
		return blockCancelled
	}
	return blockFailed
}

// childRows are the children's rows: one each up to childAxisRows, else
// one row from the first start to the last finish (to the axis' end
// while any runs) with the starts and finishes as ticks, bucketed.
func childRows(ax *timeAxis, kids []*childSpan) []*axisRow {
	if len(kids) <= childAxisRows {
		rows := make([]*axisRow, 0, len(kids))
		for _, k := range kids {
			r := &axisRow{Kind: rowChild, Label: fmt.Sprintf("child %d %s", k.Position, k.TaskType), Start: k.start}
			if !k.finished {
				r.Class, r.Open, r.Detail = rowWaiting, true, "under way"
			} else {
				r.Class, r.End = childClass(k.status), k.end
				r.Detail = fmt.Sprintf("%s after %s", k.status, roundDuration(k.end.Sub(k.start)))
				if k.message != "" {
					r.Detail += ": " + k.message
				}
			}
			rows = append(rows, r)
		}
		return rows
	}
	r := &axisRow{Kind: rowKids, Class: blockOK, Label: fmt.Sprintf("children (%s)", thousands(len(kids))), Start: kids[0].start, End: kids[0].start}
	type bucket struct {
		n           int
		first, last time.Time
	}
	buckets := map[string]map[int]*bucket{}
	tick := func(class string, at time.Time) {
		b := 0
		if ax.Span > 0 {
			b = min(childAxisBuckets-1, int(float64(childAxisBuckets)*float64(at.Sub(ax.Start))/float64(ax.Span)))
		}
		if buckets[class] == nil {
			buckets[class] = map[int]*bucket{}
		}
		k := buckets[class][b]
		if k == nil {
			k = &bucket{first: at, last: at}
			buckets[class][b] = k
		}
		k.n++
		k.first, k.last = minTime(k.first, at), maxTime(k.last, at)
	}
	counts := map[history.Status]int{}
	running, failed := 0, false
	for _, k := range kids {
		r.Start = minTime(r.Start, k.start)
		tick("child-start", k.start)
		if !k.finished {
			running++
			continue
		}
		counts[k.status]++
		r.End = maxTime(r.End, k.end)
		class := "child-done"
		if k.status != history.StatusCompleted {
			class, failed = "child-failed", true
		}
		tick(class, k.end)
	}
	words := map[string]string{"child-start": "started", "child-done": "completed", "child-failed": "ended otherwise"}
	for _, class := range []string{"child-start", "child-done", "child-failed"} {
		for b := range childAxisBuckets {
			k := buckets[class][b]
			if k == nil {
				continue
			}
			text := fmt.Sprintf("%d %s at %s", k.n, words[class], consoleTime(k.first))
			if !k.first.Equal(k.last) {
				text = fmt.Sprintf("%d %s from %s to %s", k.n, words[class], consoleTime(k.first), consoleTime(k.last))
			}
			r.Marks = append(r.Marks, axisMark{Class: class, At: k.first, Text: text})
		}
	}
	parts := []string{thousands(len(kids)) + " started"}
	for _, st := range childSummaryOrder {
		if n := counts[st]; n > 0 {
			parts = append(parts, thousands(n)+" "+strings.ReplaceAll(string(st), "_", "-"))
		}
	}
	if running > 0 {
		parts = append(parts, thousands(running)+" under way")
		r.Open, r.Class = true, rowWaiting
	}
	if failed {
		r.Class = blockFailed
	}
	r.Detail = strings.Join(parts, ", ")
	return []*axisRow{r}
}
