package main

import (
	"fmt"
	"strings"

	"github.com/cairnflow/cairn/history"
)

// describeSelectWait is the history listing's line for a select's wait
// (wait_started with select).
func describeSelectWait(v history.WaitStartedData) string {
	var on []string
	if len(v.Select.Signals) > 0 {
		on = append(on, "signals "+strings.Join(v.Select.Signals, ", "))
	}
	for _, c := range v.Select.Children {
		on = append(on, fmt.Sprintf("child %d", c))
	}
	until := "no timer"
	if !v.Deadline.Equal(history.Never) {
		until = "timer at " + formatTime(&v.Deadline)
	}
	return fmt.Sprintf("select %d waits for %s; %s", v.Position, strings.Join(on, ", "), until)
}

// describeSelectMatched is the history listing's line for select_matched.
func describeSelectMatched(v history.SelectMatchedData) string {
	s := fmt.Sprintf("select %d: case %d won, ", v.Position, v.Case)
	switch v.Kind {
	case history.SelectSignal:
		return s + fmt.Sprintf("signal %s (event %d)", v.Name, v.Seq)
	case history.SelectChild:
		return s + fmt.Sprintf("child %d (event %d)", v.Child, v.Seq)
	case history.SelectFuture:
		return s + fmt.Sprintf("step %d", v.Step)
	}
	return s + v.Kind
}
