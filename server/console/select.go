package console

import (
	"fmt"
	"strings"

	"github.com/cairnflow/cairn/history"
)

// selectWaitText says what a select's wait (wait_started with select)
// waits for.
func selectWaitText(p history.WaitStartedData) string {
	var on []string
	if len(p.Select.Signals) > 0 {
		on = append(on, "signal "+strings.Join(p.Select.Signals, " or "))
	}
	for _, c := range p.Select.Children {
		on = append(on, fmt.Sprintf("child %d", c))
	}
	if !p.Deadline.Equal(history.Never) {
		on = append(on, "a timer at "+consoleTime(p.Deadline))
	}
	return strings.Join(on, ", ") + fmt.Sprintf(" (select %d)", p.Position)
}

// selectMatchedText says which case of a select won (select_matched).
func selectMatchedText(p history.SelectMatchedData) string {
	s := fmt.Sprintf("select %d: ", p.Position)
	switch p.Kind {
	case history.SelectSignal:
		return s + "signal " + p.Name + " won"
	case history.SelectChild:
		return s + fmt.Sprintf("child %d won", p.Child)
	case history.SelectFuture:
		return s + fmt.Sprintf("step %d won", p.Step)
	}
	return s + "the timer won"
}
