package history

import "encoding/json"

// UserData returns the user's JSON an event payload carries in place, if
// its type carries any: task_scheduled's input, step_completed's,
// task_completed's and child_finished's output, signal_received's
// payload. What encryption seals and references stand in for.
func UserData(p Payload) (json.RawMessage, bool) {
	switch d := p.(type) {
	case TaskScheduledData:
		return d.Input, true
	case StepCompletedData:
		return d.Output, true
	case TaskCompletedData:
		return d.Output, true
	case SignalReceivedData:
		return d.Payload, true
	case ChildFinishedData:
		return d.Output, true
	case UpdateAcceptedData:
		return d.Args, true
	case UpdateCompletedData:
		return d.Output, true
	case RemoteStepDispatchedData:
		return d.Input, true
	case RemoteStepCompletedData:
		return d.Output, true
	}
	return nil, false
}

// WithUserData returns p with the user's JSON it carries replaced by data;
// p itself when its type carries none (see [UserData]).
func WithUserData(p Payload, data json.RawMessage) Payload {
	switch d := p.(type) {
	case TaskScheduledData:
		d.Input = data
		return d
	case StepCompletedData:
		d.Output = data
		return d
	case TaskCompletedData:
		d.Output = data
		return d
	case SignalReceivedData:
		d.Payload = data
		return d
	case ChildFinishedData:
		d.Output = data
		return d
	case UpdateAcceptedData:
		d.Args = data
		return d
	case UpdateCompletedData:
		d.Output = data
		return d
	case RemoteStepDispatchedData:
		d.Input = data
		return d
	case RemoteStepCompletedData:
		d.Output = data
		return d
	}
	return p
}
