package payload

import (
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// OfEvent returns the payload event data d carries, of task in
// namespace, nil when its type carries none: task_scheduled's input,
// step_completed's output (or its OutputRef), task_completed's output,
// signal_received's payload, child_finished's output, which the
// child owns, update_accepted's args (as a signal's payload) and
// update_completed's output (as a workflow's). [Payload.Into] puts it back.
func OfEvent(namespace string, task uuid.UUID, d history.Payload) *Payload {
	p := &Payload{Namespace: namespace, Task: task}
	switch d := d.(type) {
	case history.TaskScheduledData:
		p.Kind, p.Data = Input, d.Input
	case history.StepCompletedData:
		p.Kind, p.Data, p.Ref = StepOutput, d.Output, d.OutputRef
	case history.TaskCompletedData:
		p.Kind, p.Data = Output, d.Output
	case history.SignalReceivedData:
		p.Kind, p.Data = Signal, d.Payload
	case history.ChildFinishedData:
		child, err := uuid.Parse(d.ChildID)
		if err != nil {
			child = uuid.Nil
		}
		p.Kind, p.Data, p.Task = Output, d.Output, child
	case history.UpdateAcceptedData:
		p.Kind, p.Data = Signal, d.Args
	case history.UpdateCompletedData:
		p.Kind, p.Data = Output, d.Output
	case history.RemoteStepDispatchedData:
		// Kept in place or by an envelope, as a signal's: the event has
		// no reference of its own.
		p.Kind, p.Data = Signal, d.Input
	case history.RemoteStepCompletedData:
		p.Kind, p.Data = Output, d.Output
	default:
		return nil
	}
	return p
}

// Into returns d, the event data p was taken from ([OfEvent]), with p's
// data in place of its payload.
func (p *Payload) Into(d history.Payload) history.Payload {
	if step, ok := d.(history.StepCompletedData); ok {
		step.Output, step.OutputRef = p.Data, p.Ref
		return step
	}
	return history.WithUserData(d, p.Data)
}
