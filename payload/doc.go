// Package payload is the codec stage at cairn's edge: every payload a task
// carries (its input, its steps' outputs, its output, the signals sent to
// it, a schedule's input, the bytes of its blobs) passes through a [Stage]
// on its way to a store and back, in the SDK's client and in its worker's
// attempt executor. A store, and the engine's runtime over it, only ever
// hold payloads as the stage encoded them; they never see plaintext.
//
// A [Codec] encodes and decodes a batch of [Payload]s, each with what a
// codec needs to know of it: its namespace, the task that owns it, what
// it is ([Kind]). A stage chains codecs: [Stage.Encode] runs them in the
// order given, [Stage.Decode] in reverse, so the first codec is the
// innermost. cairn's own are payload/offload (a payload over a threshold
// kept as a blob of its task, the history holding a reference) and
// payload/seal (encryption at rest with a data key per task, wrapped by
// the namespace's key); the SDK chains them in that order, so a
// reference is sealed like any payload and a blob's bytes are sealed
// before they are stored.
//
// Only [Stage.Encode] makes an [Encoded], which is what the SDK's writes
// take: a payload cannot reach a store unencoded.
//
// The shapes a history holds in a payload's place (history.Sealed,
// history.BlobRef and its envelopes) are part of the stored history, read
// by the drivers (an idempotency key's reuse compares sealed inputs by
// their digests) and by the interpreter: they stay in package history.
// This package makes and opens them.
//
// Codecs that need storage (data keys, blobs) take small interfaces
// declared here and in their packages ([Blobs], seal.DataKeys); the
// SDK adapts its store to them.
//
// It imports history and leaf helpers only.
package payload
