package history

import (
	"bytes"
	"encoding/json"

	"github.com/cockroachdb/errors"
)

// SchemaVersion is the version written into every encoded payload, in the
// JSON field "v". A decoder refuses versions it does not know rather than
// guessing at their meaning.
const SchemaVersion = 1

// Encode returns the versioned JSON encoding of p: a JSON object whose first
// field is "v".
func Encode(p Payload) ([]byte, error) {
	if p == nil {
		return nil, errors.AssertionFailedf("encode nil payload")
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, errors.Wrapf(err, "encode %s payload", p.EventType())
	}
	// A nil pointer to a payload struct marshals as null, a foreign payload
	// as anything: splicing into those would return malformed JSON.
	if len(body) < 2 || body[0] != '{' {
		return nil, errors.AssertionFailedf("encode %T payload: not a JSON object", p)
	}
	// body is a JSON object: splice the version in as its first field.
	out := make([]byte, 0, len(body)+8)
	out = append(out, `{"v":1`...)
	if len(body) > 2 {
		out = append(out, ',')
	}
	out = append(out, body[1:]...)
	return out, nil
}

// Decode parses the versioned JSON encoding of a payload of type typ. It
// returns an error marked [ErrInvalidHistory] for an unknown type, an unknown
// or missing version, or a body that does not parse; it never panics.
func Decode(typ Type, data []byte) (Payload, error) {
	if !versionOneFirst(data) {
		// Not the shape Encode (or PostgreSQL's jsonb output) writes: read
		// the version the slow way, to say what is wrong with it.
		var head struct {
			V *int `json:"v"`
		}
		if err := json.Unmarshal(data, &head); err != nil {
			return nil, invalidf(err, "decode %s payload", typ)
		}
		if head.V == nil {
			return nil, invalidf(nil, "decode %s payload: no schema version", typ)
		}
		if *head.V != SchemaVersion {
			return nil, invalidf(nil, "decode %s payload: unknown schema version %d", typ, *head.V)
		}
	}
	switch typ {
	case TaskScheduled:
		return decodeAs[TaskScheduledData](typ, data)
	case AttemptStarted:
		return decodeAs[AttemptStartedData](typ, data)
	case StepCompleted:
		return decodeAs[StepCompletedData](typ, data)
	case AttemptFailed:
		return decodeAs[AttemptFailedData](typ, data)
	case LeaseExpired:
		return decodeAs[LeaseExpiredData](typ, data)
	case TaskReleased:
		return decodeAs[TaskReleasedData](typ, data)
	case TaskCompleted:
		return decodeAs[TaskCompletedData](typ, data)
	case TaskFailed:
		return decodeAs[TaskFailedData](typ, data)
	case TaskDeadLettered:
		return decodeAs[TaskDeadLetteredData](typ, data)
	case TaskRequeued:
		return decodeAs[TaskRequeuedData](typ, data)
	case CancelRequested:
		return decodeAs[CancelRequestedData](typ, data)
	case CompensationRequested:
		return decodeAs[CompensationRequestedData](typ, data)
	case CompensationStarted:
		return decodeAs[CompensationStartedData](typ, data)
	case StepCompensated:
		return decodeAs[StepCompensatedData](typ, data)
	case CompensationFailed:
		return decodeAs[CompensationFailedData](typ, data)
	case TaskCancelled:
		return decodeAs[TaskCancelledData](typ, data)
	case TaskExpired:
		return decodeAs[TaskExpiredData](typ, data)
	case TimerStarted:
		return decodeAs[TimerStartedData](typ, data)
	case TimerFired:
		return decodeAs[TimerFiredData](typ, data)
	case SignalReceived:
		return decodeAs[SignalReceivedData](typ, data)
	case WaitStarted:
		return decodeAs[WaitStartedData](typ, data)
	case WaitTimedOut:
		return decodeAs[WaitTimedOutData](typ, data)
	case ChildStarted:
		return decodeAs[ChildStartedData](typ, data)
	case ChildWaitStarted:
		return decodeAs[ChildWaitStartedData](typ, data)
	case ChildFinished:
		return decodeAs[ChildFinishedData](typ, data)
	case TaskErased:
		return decodeAs[TaskErasedData](typ, data)
	case PatchRecorded:
		return decodeAs[PatchRecordedData](typ, data)
	case StreamClosed:
		return decodeAs[StreamClosedData](typ, data)
	case ModelLimitWaited:
		return decodeAs[ModelLimitWaitedData](typ, data)
	case TaskContinued:
		return decodeAs[TaskContinuedData](typ, data)
	case TaskForked:
		return decodeAs[TaskForkedData](typ, data)
	case SelectMatched:
		return decodeAs[SelectMatchedData](typ, data)
	case UpdateAccepted:
		return decodeAs[UpdateAcceptedData](typ, data)
	case UpdateCompleted:
		return decodeAs[UpdateCompletedData](typ, data)
	case BudgetReserved:
		return decodeAs[BudgetReservedData](typ, data)
	case BudgetSettled:
		return decodeAs[BudgetSettledData](typ, data)
	case BudgetRefused:
		return decodeAs[BudgetRefusedData](typ, data)
	case BudgetRaised:
		return decodeAs[BudgetRaisedData](typ, data)
	case RemoteStepDispatched:
		return decodeAs[RemoteStepDispatchedData](typ, data)
	case RemoteStepCompleted:
		return decodeAs[RemoteStepCompletedData](typ, data)
	case RemoteStepFailed:
		return decodeAs[RemoteStepFailedData](typ, data)
	case RemoteWaitStarted:
		return decodeAs[RemoteWaitStartedData](typ, data)
	default:
		return nil, invalidf(nil, "decode payload: unknown event type %q", string(typ))
	}
}

func decodeAs[T Payload](typ Type, data []byte) (Payload, error) {
	var p T
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, invalidf(err, "decode %s payload", typ)
	}
	return p, nil
}

// versionOneFirst reports whether data opens with the version field set to
// 1, as Encode writes it ({"v":1) and as PostgreSQL's jsonb prints it
// ({"v": 1, shortest key first). Decoding then needs one pass, not two.
// A later duplicate "v" key is not looked for: Encode never writes one.
func versionOneFirst(data []byte) bool {
	for _, prefix := range [][]byte{[]byte(`{"v":1,`), []byte(`{"v": 1,`), []byte(`{"v":1}`), []byte(`{"v": 1}`)} {
		if bytes.HasPrefix(data, prefix) {
			return true
		}
	}
	return false
}
