// Package executor is cairn's attempt executor: the handler a worker hands
// to the engine's processor, behind the SDK's edge (sdk/internal/edge),
// which decodes the payloads it reads and encodes those it records (so it
// never holds the engine's attempt itself). For each claimed attempt it runs
// the workflow against the task's history (internal/interpreter), with an
// activity context per step, and turns how the run ended into the events
// that end the attempt:
//
//   - classification of a failure, in this order: rules that are always
//     permanent (non-determinism, bad input or step options, an
//     unstorable output, the task's deadline), marks set in Go code, the
//     CEL policy of the failed step, else of the workflow type, and the
//     default (transient for a step's error, permanent for the body's);
//   - the retry decision from the retry budget (attempts, elapsed time,
//     backoff with full jitter, a retry-after hint) and the task's
//     schedule-to-close deadline; giving up dead-letters the task, or
//     fails it where the type says so;
//   - compensation after a cancel, a compensation request or a permanent
//     failure: the completed compensable steps are undone in reverse
//     order, each recorded;
//   - an OpenTelemetry span per attempt and per step, when configured.
//
// It is internal to the sdk, whose Worker is its only user: the sdk's
// public face stays thin. It imports engine, engine/store, history,
// payload, activities, internal/activity (the activity context it sets up
// for each step), internal/interpreter and sdk/internal/edge, never
// workflow or the sdk.
package executor
