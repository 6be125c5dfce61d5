package history

import (
	"bytes"
	"encoding/json"
)

// SealedMember is the one member of a sealed payload's JSON object.
const SealedMember = "cairn_sealed"

// Sealed is a payload encrypted at rest, as a history holds it in place of
// the payload's JSON: the object {"cairn_sealed": {...}}. Task names the
// task whose data key sealed it (a child's output copied into its parent's
// child_finished stays the child's); Key, instead, a namespace key that
// sealed it directly (a schedule's input, which belongs to no one task).
// Digest, on a keyed start's input, is a keyed digest of the plaintext:
// what an idempotency key's reuse is compared by. Data is the nonce and
// the ciphertext.
//
// The history package only recognises the shape; the cryptography is
// engine's (engine.Codec).
type Sealed struct {
	V      int    `json:"v"`
	Task   string `json:"task,omitempty"`
	Key    string `json:"key,omitempty"`
	Digest []byte `json:"digest,omitempty"`
	Data   []byte `json:"data"`
}

// Encode returns the sealed payload's JSON.
func (s Sealed) Encode() json.RawMessage {
	out, err := json.Marshal(map[string]Sealed{SealedMember: s})
	if err != nil {
		panic(err) // a struct of strings and byte slices always marshals
	}
	return out
}

// ParseSealed reports whether raw is a sealed payload, and returns it.
// Any other JSON, including an object that has other members beside
// cairn_sealed, is not one.
func ParseSealed(raw json.RawMessage) (Sealed, bool) {
	if !MaybeSealed(raw) {
		return Sealed{}, false
	}
	var outer map[string]json.RawMessage
	if json.Unmarshal(raw, &outer) != nil || len(outer) != 1 {
		return Sealed{}, false
	}
	inner, ok := outer[SealedMember]
	if !ok {
		return Sealed{}, false
	}
	var s Sealed
	if json.Unmarshal(inner, &s) != nil || s.V != 1 || len(s.Data) == 0 || (s.Task == "") == (s.Key == "") {
		return Sealed{}, false
	}
	return s, true
}

// MaybeSealed is ParseSealed's cheap first test: raw is an object whose
// first member is cairn_sealed (however the store spaced it).
func MaybeSealed(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	raw = bytes.TrimLeft(raw[1:], " \t\r\n")
	return bytes.HasPrefix(raw, []byte(`"`+SealedMember+`"`))
}
