package console

import (
	"slices"
	"strconv"

	"github.com/cairnflow/cairn/history"
)

// stepLabels names the steps of a history on the task page, numbering
// the items of a workflow.Map: "embed [0]", "embed [1]", … .
//
// The history records no item index: Map gives every item the step name
// it was called with, and renaming them now would make the histories
// already written non-deterministic on replay (a step's name is checked
// against the one recorded). The index is derived instead. Map starts its
// items in order, each taking the next position, with nothing in between
// (the workflow is blocked in Map meanwhile), so the items of one call are
// the steps of one name at consecutive positions; a run of two or more
// such steps is numbered from 0. A Step called in a loop under one name
// makes the same run and is numbered the same way, which reads as meant
// there too. A position between them taken by a sleep or a wait, which
// records no step, ends a run.
type stepLabels map[int]runItem // by position, the steps of a run only

// runItem is a step of a run: its name and its index in the run.
type runItem struct {
	name  string
	index int
}

// newStepLabels reads the names of the steps of events: recorded
// (step_completed) and failed (the evidence's step and position).
func newStepLabels(events []history.Event) stepLabels {
	names := map[int]string{}
	for _, e := range events {
		switch p := e.Data.(type) {
		case history.StepCompletedData:
			names[p.Position] = p.Name
		case history.AttemptFailedData:
			failedStepName(names, p.Error)
		case history.TaskFailedData:
			failedStepName(names, p.Error)
		case history.TaskDeadLetteredData:
			failedStepName(names, p.Error)
		}
	}
	positions := make([]int, 0, len(names))
	for pos := range names {
		positions = append(positions, pos)
	}
	slices.Sort(positions)
	index := make(map[int]int, len(names))
	labels := stepLabels{}
	for _, pos := range positions {
		name := names[pos]
		prev, inRun := names[pos-1]
		if inRun && prev == name {
			index[pos] = index[pos-1] + 1
		} else if next, ok := names[pos+1]; !ok || next != name {
			continue // a step of its own: no index
		}
		labels[pos] = runItem{name, index[pos]}
	}
	return labels
}

func failedStepName(names map[int]string, info history.ErrorInfo) {
	if info.Step != "" {
		if _, ok := names[info.Position]; !ok {
			names[info.Position] = info.Step
		}
	}
}

// of is the label of the step name at pos: with its index when it is an
// item of a run, else its name.
func (l stepLabels) of(pos int, name string) string {
	if item, ok := l[pos]; ok && item.name == name {
		return name + " [" + strconv.Itoa(item.index) + "]"
	}
	return name
}
