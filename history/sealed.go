package history

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
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
// payload/seal's.
type Sealed struct {
	V      int    `json:"v"`
	Task   string `json:"task,omitempty"`
	Key    string `json:"key,omitempty"`
	Digest []byte `json:"digest,omitempty"`
	Data   []byte `json:"data"`
}

// Encode returns the sealed payload's JSON, as encoding/json would write
// it, without its reflection (a worker seals every output it records).
func (s Sealed) Encode() json.RawMessage {
	b64 := base64.StdEncoding
	out := make([]byte, 0, 64+len(s.Task)+len(s.Key)+b64.EncodedLen(len(s.Digest))+b64.EncodedLen(len(s.Data)))
	out = append(out, `{"`+SealedMember+`":{"v":`...)
	out = strconv.AppendInt(out, int64(s.V), 10)
	if s.Task != "" {
		out = append(out, `,"task":`...)
		out = appendJSONString(out, s.Task)
	}
	if s.Key != "" {
		out = append(out, `,"key":`...)
		out = appendJSONString(out, s.Key)
	}
	if len(s.Digest) > 0 {
		out = append(out, `,"digest":"`...)
		out = b64.AppendEncode(out, s.Digest)
		out = append(out, '"')
	}
	out = append(out, `,"data":"`...)
	out = b64.AppendEncode(out, s.Data)
	return append(out, `"}}`...)
}

func appendJSONString(out []byte, v string) []byte {
	quoted, err := json.Marshal(v)
	if err != nil {
		panic(err) // a string always marshals
	}
	return append(out, quoted...)
}

// ParseSealed reports whether raw is a sealed payload, and returns it:
// an object whose first member is cairn_sealed, holding version 1, data,
// and one of task and key. (A user's object of that shape would not open:
// the codec authenticates what it sealed.)
func ParseSealed(raw json.RawMessage) (Sealed, bool) {
	if !MaybeSealed(raw) {
		return Sealed{}, false
	}
	var outer struct {
		S *Sealed `json:"cairn_sealed"`
	}
	if json.Unmarshal(raw, &outer) != nil || outer.S == nil {
		return Sealed{}, false
	}
	s := *outer.S
	if s.V != 1 || len(s.Data) == 0 || (s.Task == "") == (s.Key == "") {
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
