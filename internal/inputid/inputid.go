// Package inputid identifies a start's input: [Digest] is the same for two
// starts of the same value, however each was written and whether the input
// is in place or kept by reference. The drivers compare starts by it when
// an idempotency key is reused (engine/internal/plan), and payload/seal
// takes a sealed input's keyed digest of it, so both agree by
// construction.
//
// It imports history (the blob envelope) and internal/jsoncheck (the
// canonical form) only.
package inputid

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/jsoncheck"
)

// Digest is the SHA-256 of input's canonical JSON form: for an input kept
// by reference, the digest its envelope carries (of the same canonical
// form), so an input in place and one by reference of the same value are
// the same start.
func Digest(input []byte) []byte {
	if canonical, ok := history.EnvelopeCanonical(input); ok {
		if sum, err := hex.DecodeString(canonical); err == nil && len(sum) == sha256.Size {
			return sum
		}
	}
	sum := sha256.Sum256(Canonical(input))
	return sum[:]
}

// Canonical is what identifies a start's input: its canonical JSON form
// (jsoncheck's), or input as it is when it is not JSON; for an input kept
// by reference ({"cairn_blob": …}, a new blob key each start), its
// content's digest and size. Two starts of the same value give the same
// bytes.
func Canonical(input []byte) []byte {
	if ref, ok := history.ParseBlobEnvelope(input); ok {
		return []byte(fmt.Sprintf("cairn_blob:%s:%d", ref.SHA256, ref.Size))
	}
	canonical, err := jsoncheck.Canonical(input)
	if err != nil {
		return input
	}
	return canonical
}
