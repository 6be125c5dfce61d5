package executor

import (
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// kindPayloadTooLarge is the error kind of an attempt whose step output or
// workflow output is over [HandlerConfig.MaxPayloadBytes]. It is always
// permanent: the same code on the same input makes the same output. The
// output is not recorded; a step's usage goes on the attempt_failed.
const kindPayloadTooLarge = "payload_too_large"

// errPayloadTooLarge marks the error of an output over the limit.
var errPayloadTooLarge = errors.New("output over MaxPayloadBytes")

// payloadTooLarge describes an output of size bytes over limit.
func payloadTooLarge(what string, size, limit int) error {
	return errmark.Mark(errors.Newf(
		"%s is %d bytes of JSON, over the limit of %d bytes (MaxPayloadBytes): return a reference to large data (a URL or an object key)",
		what, size, limit), errPayloadTooLarge)
}

// oversizedStep returns the error for p when it is a step's completion
// with an output over the handler's limit that stays in place, else nil.
func (h *Handler) oversizedStep(p history.Payload) error {
	step, ok := p.(history.StepCompletedData)
	if !ok || !h.overLimit(step.Output) {
		return nil
	}
	return payloadTooLarge(fmt.Sprintf("the output of step %d (%s)", step.Position, step.Name), len(step.Output), h.maxPayload)
}

// limitUpdate returns p, or, when p is an update's outcome whose result
// is over MaxPayloadBytes, the update failed for it: the handler ran, its
// result is not kept, the task goes on.
func (h *Handler) limitUpdate(p history.Payload) history.Payload {
	done, ok := p.(history.UpdateCompletedData)
	if !ok || !h.overLimit(done.Output) {
		return p
	}
	err := payloadTooLarge(fmt.Sprintf("the result of update %q", done.UpdateID), len(done.Output), h.maxPayload)
	done.Output, done.Error = nil, interpreter.UpdateErrorInfo(err)
	done.Error.Kind = kindPayloadTooLarge
	return done
}

// overLimit reports whether an output is over MaxPayloadBytes and stays
// in the history: one over the blob threshold is kept by reference when
// it is encoded (bounded by payload.MaxBlobBytes then).
func (h *Handler) overLimit(out []byte) bool {
	byReference := h.blobThreshold > 0 && len(out) > h.blobThreshold
	return h.maxPayload > 0 && len(out) > h.maxPayload && !byReference
}

// limitOutputs turns a run whose unrecorded last step (res.Pending) or
// whose workflow output is over the limit into a run that failed with
// errPayloadTooLarge: the output is dropped, never recorded. refused is
// the step whose output Record refused during the run, if one was. The
// failed step is named, and its usage kept for the attempt_failed.
func (h *Handler) limitOutputs(res interpreter.Result, refused *history.StepCompletedData) interpreter.Result {
	if refused != nil && errors.Is(res.Err, errPayloadTooLarge) {
		return failedOnOutput(res, res.Err, *refused)
	}
	if err := h.oversizedStep(res.Pending); err != nil {
		return failedOnOutput(res, err, res.Pending.(history.StepCompletedData))
	}
	if res.Err == nil && h.overLimit(res.Output) {
		res.Err, res.Output = payloadTooLarge("the workflow's output", len(res.Output), h.maxPayload), nil
	}
	return res
}

// failedOnOutput is res ended by err, step's output over the limit.
func failedOnOutput(res interpreter.Result, err error, step history.StepCompletedData) interpreter.Result {
	res.Err, res.Output, res.Pending = err, nil, nil
	res.Step, res.StepOptions = &interpreter.StepInfo{Position: step.Position, Name: step.Name}, nil
	res.StepUsage = step.Usage // spent even though the output cannot be kept
	return res
}
