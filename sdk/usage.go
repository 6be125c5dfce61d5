package sdk

import "github.com/cairnflow/cairn/history"

// withStepUsage puts the AI usage of the step whose failure ended the run
// on the attempt_failed among payloads: a failed model call is paid for
// too, and the history and metrics should say so.
func withStepUsage(payloads []history.Payload, usage []history.Usage) []history.Payload {
	if len(usage) == 0 {
		return payloads
	}
	for i, p := range payloads {
		if failed, ok := p.(history.AttemptFailedData); ok {
			failed.Usage = usage
			payloads[i] = failed
		}
	}
	return payloads
}
