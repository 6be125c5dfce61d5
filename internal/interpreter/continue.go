package interpreter

import (
	"encoding/json"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
)

// ContinueAsNewRequest is the error a workflow body returns to continue as
// new ([ContinueAsNew]): the run ends, and a new run of the same type and
// version starts with Input and a history of its own. [Run] takes it off
// the result's Err into [Result.Continue].
type ContinueAsNewRequest struct {
	// Input is the next run's input, as JSON.
	Input json.RawMessage
}

func (r *ContinueAsNewRequest) Error() string {
	return "continue as new (the workflow must return this error, not handle it)"
}

// ErrBadContinueInput marks a continue-as-new whose input cannot be
// encoded (or stored). It is permanent: the body would build it again.
var ErrBadContinueInput = errors.New("cairn/workflow: bad continue-as-new input")

// ContinueAsNew returns the error that, returned by the workflow body,
// continues the workflow as a new run with input (encoded as JSON). An
// input that does not encode is an error marked [ErrBadContinueInput]
// instead, which fails the run.
func ContinueAsNew(ctx Context, input any) error {
	if ctx == nil || ctx.run() == nil {
		return errors.AssertionFailedf("continue as new outside a workflow run")
	}
	encoded, err := json.Marshal(input)
	if err == nil && HasNULEscape(encoded) {
		err = errors.New("input contains the character U+0000, which PostgreSQL cannot store in JSON")
	}
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "encode the continue-as-new input"), ErrBadContinueInput)
	}
	if string(encoded) == "null" {
		encoded = nil
	}
	return &ContinueAsNewRequest{Input: encoded}
}

// continueOf returns the continue-as-new request err is (or wraps), if any.
func continueOf(err error) *ContinueAsNewRequest {
	var req *ContinueAsNewRequest
	if errors.As(err, &req) {
		return req
	}
	return nil
}
