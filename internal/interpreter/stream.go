package interpreter

import (
	"encoding/json"
)

// Progress writes data (JSON) to the task's stream name from the
// workflow body, through RunParams.Stream, when the run is past what the
// history records (at its frontier): a replay writes nothing again. It
// returns the writer's error; without a writer (a replay, a test run) it
// does nothing.
func Progress(ctx Context, name string, data json.RawMessage) error {
	s := ctx.run()
	if err := s.enter("Progress"); err != nil {
		return err
	}
	if s.p.Stream == nil || s.p.CollectOnly || s.replaying() {
		return nil
	}
	return s.p.Stream(name, data)
}
