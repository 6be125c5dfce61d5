package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload"
)

// sealPayload seals plaintext with task owner's data key.
func sealPayload(dk cipher.AEAD, owner uuid.UUID, plaintext, digest []byte) json.RawMessage {
	return history.Sealed{V: 1, Task: owner.String(), Digest: digest, Data: sealInto(dk, nil, plaintext, payloadAD(owner.String()))}.Encode()
}

// sealWithNamespaceKey seals plaintext with namespace's current key
// itself: a payload of no one task (a schedule's input).
func (k *Keys) sealWithNamespaceKey(namespace string, plaintext []byte) json.RawMessage {
	nk := k.namespaces[namespace]
	return history.Sealed{V: 1, Key: nk.current, Data: sealInto(nk.keks[nk.current], nil, plaintext, payloadAD("key:"+nk.current))}.Encode()
}

// openWithNamespaceKey opens what sealWithNamespaceKey sealed.
func (k *Keys) openWithNamespaceKey(namespace string, s history.Sealed) ([]byte, error) {
	nk := k.namespaces[namespace]
	if nk == nil || nk.keks[s.Key] == nil {
		return nil, errmark.Mark(errors.Newf("sealed with key %q of namespace %q, which is not configured", s.Key, namespace), payload.ErrSealed)
	}
	out, err := openFrom(nk.keks[s.Key], s.Data, payloadAD("key:"+s.Key))
	if err != nil {
		return nil, errmark.Mark(errors.Newf("sealed with key %q: does not open", s.Key), payload.ErrCorrupt)
	}
	return out, nil
}

func payloadAD(owner string) []byte { return []byte("cairn payload " + owner) }

func blobAD(key string) []byte { return []byte("cairn blob " + key) }

// sealedBlobMagic begins a sealed blob's bytes: a blob written before its
// namespace was encrypted has none, and is read as it is.
const sealedBlobMagic = "\x00cairn-sealed-blob-v1\x00"

// BlobSealed reports whether blob bytes, as a database, a bucket or an
// archive holds them, are sealed (encrypted with their task's data key).
func BlobSealed(data []byte) bool {
	return len(data) >= len(sealedBlobMagic) && string(data[:len(sealedBlobMagic)]) == sealedBlobMagic
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, errors.Wrap(err, "aes")
	}
	return cipher.NewGCM(block)
}

// randRead fills b from crypto/rand, which does not fail (Go 1.24 and
// later).
func randRead(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
}

// sealInto appends a random nonce and the sealed plaintext to dst.
func sealInto(aead cipher.AEAD, dst, plaintext, ad []byte) []byte {
	nonce := make([]byte, aead.NonceSize())
	randRead(nonce)
	dst = append(dst, nonce...)
	return aead.Seal(dst, nonce, plaintext, ad)
}

// openFrom opens what sealInto wrote.
func openFrom(aead cipher.AEAD, data, ad []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(data) < n+aead.Overhead() {
		return nil, errors.New("too short")
	}
	return aead.Open(nil, data[:n], data[n:], ad)
}
