package history

import (
	"bytes"
	"encoding/json"
)

// BlobRef is a payload kept out of the history: the history holds this
// reference, the bytes are in a blob store (the database's blobs table).
// A reader checks the bytes against Size and SHA256 before using them.
type BlobRef struct {
	// Store names where the bytes are: "db", the database's blobs table.
	Store string `json:"store"`
	// Key names the blob in its store, within the task's namespace.
	Key string `json:"key"`
	// Size is the length of the bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 digest of the bytes.
	SHA256 string `json:"sha256"`
	// ContentType is the media type the writer gave, when it gave one.
	ContentType string `json:"content_type,omitempty"`
}

// BlobStoreDB is [BlobRef.Store] for the database's own blobs table.
const BlobStoreDB = "db"

// BlobMember is the one member of an output kept by reference: a
// workflow's output over the worker's blob threshold is recorded as the
// JSON object {"cairn_blob": <BlobRef>} in task_completed (and so in the
// task's output, and in a parent's child_finished); readers resolve it.
const BlobMember = "cairn_blob"

// BlobEnvelope returns the JSON that stands for a payload kept as ref.
func BlobEnvelope(ref BlobRef) json.RawMessage {
	out, err := json.Marshal(map[string]BlobRef{BlobMember: ref})
	if err != nil {
		panic(err) // strings and an integer always marshal
	}
	return out
}

// ParseBlobEnvelope reports whether raw stands for a payload kept by
// reference, and returns the reference.
func ParseBlobEnvelope(raw json.RawMessage) (BlobRef, bool) {
	if !MaybeBlobEnvelope(raw) {
		return BlobRef{}, false
	}
	var outer map[string]json.RawMessage
	if json.Unmarshal(raw, &outer) != nil || len(outer) > 2 {
		return BlobRef{}, false
	}
	if _, extra := outer[CanonicalMember]; len(outer) == 2 && !extra {
		return BlobRef{}, false
	}
	var ref BlobRef
	if json.Unmarshal(outer[BlobMember], &ref) != nil || ref.Key == "" || ref.Store == "" || ref.SHA256 == "" {
		return BlobRef{}, false
	}
	return ref, true
}

// MaybeBlobEnvelope is ParseBlobEnvelope's cheap first test: raw is an
// object whose first member is cairn_blob (however the store spaced it).
func MaybeBlobEnvelope(raw json.RawMessage) bool {
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{' &&
		bytes.HasPrefix(bytes.TrimLeft(trimmed[1:], " \t\r\n"), []byte(`"`+BlobMember+`"`))
}

// CanonicalMember is the optional second member of an input kept by
// reference: the hex SHA-256 of the input's canonical JSON (key order,
// spacing and number spelling aside), which identifies the start's input
// as an inline input's canonical form does (idempotency keys' reuse).
const CanonicalMember = "canonical_sha256"

// InputEnvelope is BlobEnvelope for a start's input, with its canonical
// digest.
func InputEnvelope(ref BlobRef, canonicalSHA256 string) json.RawMessage {
	out, err := json.Marshal(struct {
		Ref       BlobRef `json:"cairn_blob"`
		Canonical string  `json:"canonical_sha256"`
	}{ref, canonicalSHA256})
	if err != nil {
		panic(err) // strings and an integer always marshal
	}
	return out
}

// EnvelopeCanonical returns the canonical digest an input kept by
// reference carries, if it does.
func EnvelopeCanonical(raw json.RawMessage) (string, bool) {
	if _, ok := ParseBlobEnvelope(raw); !ok {
		return "", false
	}
	var outer struct {
		Canonical string `json:"canonical_sha256"`
	}
	if json.Unmarshal(raw, &outer) != nil || outer.Canonical == "" {
		return "", false
	}
	return outer.Canonical, true
}
