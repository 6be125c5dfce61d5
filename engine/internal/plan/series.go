package plan

import (
	"sort"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// SeriesWindow is the window a series read covers, as both drivers cut
// it: Buckets buckets of Step, the last ending at Now.
type SeriesWindow struct {
	From, Now time.Time
	Step      time.Duration
	Buckets   int
}

// NewSeriesWindow cuts the window of p ending at now (p validated).
func NewSeriesWindow(p *store.QueueSeriesParams, now time.Time) SeriesWindow {
	n := p.BucketCount()
	step := p.Window / time.Duration(n)
	return SeriesWindow{From: now.Add(-step * time.Duration(n)), Now: now, Step: step, Buckets: n}
}

// end is the end of bucket i.
func (w SeriesWindow) end(i int) time.Time { return w.From.Add(w.Step * time.Duration(i+1)) }

// bucketOf is the bucket (End-Step, End] holding t, clamped to the window.
func (w SeriesWindow) bucketOf(t time.Time) int {
	return min(w.Buckets-1, max(0, w.firstEdgeAtOrAfter(t)))
}

// firstEdgeAtOrAfter is the first bucket whose end is at or after t: 0
// for t before the window, Buckets for t past its last end. The drivers'
// SQL computes the same for [SeriesLive.DueFrom].
func (w SeriesWindow) firstEdgeAtOrAfter(t time.Time) int {
	d := t.Sub(w.From)
	if d <= 0 {
		return 0
	}
	i := int((d+w.Step-1)/w.Step) - 1 // ceil(d/step) - 1
	return min(w.Buckets, i)
}

// SeriesEvent is one event a series is folded from, with the task's
// queue. When is the time its payload names (run_at, next_run_at,
// fire_at, a wait's deadline), nil where it names none. Before marks the
// task's last event ahead of the window (cancel_requested,
// signal_received, child_finished, task_forked and patch_recorded skipped,
// since they keep the status): the state the task entered the window in.
// The drivers leave a fork's copied steps (step_completed of attempt 0)
// out: they ran in the original, and do not make the fork running.
type SeriesEvent struct {
	TaskID string
	Queue  string
	Seq    int64
	Type   history.Type
	At     time.Time
	When   *time.Time
	Before bool
}

// SeriesLive counts unfinished tasks no event of the window touched: they
// stood as they stand now through the whole window. A waiting group is due
// from bucket DueFrom on (Buckets: not within the window).
type SeriesLive struct {
	Queue   string
	Running bool
	DueFrom int
	Count   int
}

// seriesState is what one task is at a moment of the fold.
type seriesState struct {
	status int // seriesNone, seriesWaiting, seriesRunning
	runAt  time.Time
	failed bool // the running attempt has failed (attempt_failed without a retry, a terminal event follows)
}

const (
	seriesNone = iota
	seriesWaiting
	seriesRunning
)

// next is the state after e.
func (s seriesState) next(e SeriesEvent) seriesState {
	when := e.At
	if e.When != nil {
		when = *e.When
	}
	out := s
	switch e.Type {
	case history.TaskScheduled, history.LeaseExpired, history.TimerStarted, history.WaitStarted:
		out.status, out.runAt = seriesWaiting, when
	case history.ChildWaitStarted, history.RemoteWaitStarted:
		out.status, out.runAt = seriesWaiting, history.Never // due when a child finishes, or a remote step
	case history.TaskReleased, history.TaskRequeued, history.CompensationRequested:
		out.status, out.runAt = seriesWaiting, e.At // due now
	case history.ChildFinished, history.RemoteStepCompleted, history.RemoteStepFailed:
		if s.status == seriesWaiting && s.runAt.Equal(history.Never) {
			out.runAt = e.At // the child it awaited, most likely: due now
		}
	case history.AttemptStarted:
		out.status, out.failed = seriesRunning, false
	case history.StepCompleted, history.CompensationStarted, history.StepCompensated, history.CompensationFailed, history.TimerFired, history.SelectMatched:
		out.status = seriesRunning
	case history.AttemptFailed:
		if e.When != nil {
			out.status, out.runAt = seriesWaiting, *e.When
		} else {
			out.status, out.failed = seriesRunning, true
		}
	case history.CancelRequested:
		if s.status == seriesWaiting && e.At.Before(s.runAt) {
			out.runAt = e.At // a cancel makes a waiting task due now
		}
	case history.TaskCompleted, history.TaskFailed, history.TaskDeadLettered, history.TaskCancelled, history.TaskExpired, history.TaskContinued:
		out.status = seriesNone
	case history.TaskForked, history.PatchRecorded:
		// Keep the status: a fork made of the task, a marker recorded
		// as it runs (the drivers skip both as a Before event).
	}
	return out
}

// seriesAcc accumulates one queue: flows per bucket, and the gauges as
// difference arrays (an interval adds one from its first edge to its last).
type seriesAcc struct {
	points                []store.SeriesPoint
	waiting, due, running []int
}

func newSeriesAcc(w SeriesWindow) *seriesAcc {
	a := &seriesAcc{points: make([]store.SeriesPoint, w.Buckets),
		waiting: make([]int, w.Buckets+1), due: make([]int, w.Buckets+1), running: make([]int, w.Buckets+1)}
	for i := range a.points {
		a.points[i].End = w.end(i)
	}
	return a
}

// span adds n to the edges in [from, to).
func span(diff []int, from, to, n int) {
	if from < to {
		diff[from] += n
		diff[to] -= n
	}
}

// hold counts s at every edge in [from, until): the edges whose end is at
// or after from and before until (an event at an edge belongs to the
// bucket that edge ends, so the edge sees the state after it).
func (a *seriesAcc) hold(w SeriesWindow, s seriesState, from, until time.Time) {
	first, last := w.firstEdgeAtOrAfter(from), w.firstEdgeAtOrAfter(until)
	switch s.status {
	case seriesRunning:
		span(a.running, first, last, 1)
	case seriesWaiting:
		span(a.waiting, first, last, 1)
		span(a.due, max(first, w.firstEdgeAtOrAfter(s.runAt)), last, 1)
	}
}

// FoldSeries folds a window's events (ordered by task, then seq) and the
// untouched unfinished tasks into one series per queue, by queue name.
// Both drivers read the same rows and call it, so they agree by
// construction.
func FoldSeries(w SeriesWindow, events []SeriesEvent, live []SeriesLive) []store.QueueSeries {
	f := NewSeriesFolder(w)
	for _, e := range events {
		f.AddEvent(e)
	}
	for _, l := range live {
		f.AddLive(l)
	}
	return f.Series()
}

// SeriesFolder is [FoldSeries] a row at a time, so a driver streams the
// window's events into it rather than holding them all: it keeps one
// task's events at a time (events come in task, then seq, order) and the
// buckets of each queue.
type SeriesFolder struct {
	w    SeriesWindow
	accs map[string]*seriesAcc
	task []SeriesEvent // the current task's events, not yet folded
}

// NewSeriesFolder returns an empty folder over w.
func NewSeriesFolder(w SeriesWindow) *SeriesFolder {
	return &SeriesFolder{w: w, accs: map[string]*seriesAcc{}}
}

func (f *SeriesFolder) acc(queue string) *seriesAcc {
	if a, ok := f.accs[queue]; ok {
		return a
	}
	a := newSeriesAcc(f.w)
	f.accs[queue] = a
	return a
}

// AddEvent adds the next event, in task then seq order.
func (f *SeriesFolder) AddEvent(e SeriesEvent) {
	if len(f.task) > 0 && f.task[0].TaskID != e.TaskID {
		f.flush()
	}
	f.task = append(f.task, e)
}

func (f *SeriesFolder) flush() {
	if len(f.task) > 0 {
		foldTask(f.w, f.acc(f.task[0].Queue), f.task)
		f.task = f.task[:0]
	}
}

// AddLive adds a group of unfinished tasks the window did not touch.
func (f *SeriesFolder) AddLive(l SeriesLive) {
	a := f.acc(l.Queue)
	if l.Running {
		span(a.running, 0, f.w.Buckets, l.Count)
		return
	}
	span(a.waiting, 0, f.w.Buckets, l.Count)
	span(a.due, min(max(l.DueFrom, 0), f.w.Buckets), f.w.Buckets, l.Count)
}

// Series returns the folded series, by queue name.
func (f *SeriesFolder) Series() []store.QueueSeries {
	f.flush()
	out := make([]store.QueueSeries, 0, len(f.accs))
	for queue, a := range f.accs {
		var waiting, due, running int
		for i := range a.points {
			waiting, due, running = waiting+a.waiting[i], due+a.due[i], running+a.running[i]
			a.points[i].Waiting, a.points[i].Due, a.points[i].Running = waiting, due, running
		}
		out = append(out, store.QueueSeries{Queue: queue, From: f.w.From, Step: f.w.Step, Points: a.points})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out
}

// foldTask replays one task's events through the window: each state it
// held counts at the edges it held over, and each event in the window
// counts in its bucket.
func foldTask(w SeriesWindow, a *seriesAcc, events []SeriesEvent) {
	var s seriesState
	since := w.From
	for _, e := range events {
		if e.Before {
			s = s.next(e)
			continue
		}
		a.hold(w, s, since, e.At)
		n := s.next(e)
		countFlow(w, a, e, s, n)
		s, since = n, e.At
	}
	a.hold(w, s, since, w.Now.Add(time.Nanosecond)) // through the last edge, which is now
}

// countFlow counts event e, which took the task from s to n, in its bucket.
func countFlow(w SeriesWindow, a *seriesAcc, e SeriesEvent, s, n seriesState) {
	p := &a.points[w.bucketOf(e.At)]
	switch e.Type {
	case history.TaskCompleted:
		p.Completed++
	case history.TaskFailed, history.TaskDeadLettered, history.TaskExpired:
		p.Failed++
	case history.AttemptStarted:
		p.Started++
		if s.status == seriesWaiting {
			latency := max(0, e.At.Sub(s.runAt))
			p.LatencyTotal += latency
			p.LatencyMax = max(p.LatencyMax, latency)
		}
	}
	if s.status == seriesRunning && n.status != seriesRunning {
		p.AttemptsEnded++
		switch {
		case s.failed, e.Type == history.AttemptFailed, e.Type == history.LeaseExpired,
			e.Type == history.TaskFailed, e.Type == history.TaskDeadLettered:
			p.AttemptsFailed++
		}
	}
}

// SeriesWhen parses the time an event's payload names, as a driver reads
// it from the JSON (RFC 3339); nil stays nil.
func SeriesWhen(text *string) (*time.Time, error) {
	if text == nil || *text == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *text)
	if err != nil {
		return nil, errors.Wrapf(err, "read the time in an event's payload")
	}
	t = NormalizeTime(t)
	return &t, nil
}
