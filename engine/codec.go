package engine

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"sort"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Codec encrypts payloads at rest with AES-256-GCM: the inputs, step
// outputs, outputs and signal payloads of the tasks of the namespaces it
// has keys for, and their blobs. Each task gets its own random data key,
// kept on the task's row wrapped (encrypted) by the namespace's current
// key, whose id the wrapped key records; so a key rotation (a new current
// key) seals new tasks with the new key while old ones stay readable as
// long as their key is listed. Erasing a task destroys its data key
// (crypto-shredding): its payloads stay in the log, unreadable for good.
//
// A Codec is configured from a keys file or the environment
// ([LoadCodec], [CodecFromEnv]), never from the database, and installed
// as a store decorator ([SealStore]) in every process that reads or
// writes those namespaces. It is safe for concurrent use.
type Codec struct {
	namespaces map[string]*namespaceKeys
}

// CodecConfig is what a keys file holds (JSON):
//
//	{"namespaces": {"default": {"current": "2026-12",
//	    "keys": [{"id": "2026-11", "key": "<base64 of 32 bytes>"},
//	             {"id": "2026-12", "key": "<base64 of 32 bytes>"}]}}}
//
// The first key of a namespace also keys the digests that idempotency
// keys' reuse is compared by (RefuseKeyReuse): keep it listed.
type CodecConfig struct {
	Namespaces map[string]NamespaceKeys `json:"namespaces"`
}

// NamespaceKeys are one namespace's keys: Current seals new tasks; every
// key listed opens the tasks sealed with it.
type NamespaceKeys struct {
	Current string     `json:"current"`
	Keys    []KeyEntry `json:"keys"`
}

// KeyEntry is one namespace key: its id (recorded in every data key it
// wraps) and its 32 bytes, base64-encoded.
type KeyEntry struct {
	ID  string `json:"id"`
	Key string `json:"key"`
}

type namespaceKeys struct {
	current string
	keks    map[string]cipher.AEAD // key id → the namespace key's AEAD
	digest  []byte                 // the HMAC key of input digests
}

// Codec key environment variables: CAIRN_KEYS holds a keys file's JSON,
// CAIRN_KEYS_FILE names one.
const (
	EnvKeys     = "CAIRN_KEYS"
	EnvKeysFile = "CAIRN_KEYS_FILE"
)

// NewCodec checks cfg and returns its codec: every namespace needs at
// least one key, ids unique and without ':' , each key 32 bytes of
// base64, and Current one of them.
func NewCodec(cfg CodecConfig) (*Codec, error) {
	c := &Codec{namespaces: map[string]*namespaceKeys{}}
	names := make([]string, 0, len(cfg.Namespaces))
	for name := range cfg.Namespaces {
		names = append(names, name)
	}
	sort.Strings(names) // the first error found is the same every time
	for _, name := range names {
		nk, err := newNamespaceKeys(cfg.Namespaces[name])
		if err != nil {
			return nil, errors.Wrapf(err, "keys of namespace %q", name)
		}
		c.namespaces[name] = nk
	}
	return c, nil
}

func newNamespaceKeys(cfg NamespaceKeys) (*namespaceKeys, error) {
	if len(cfg.Keys) == 0 {
		return nil, errors.New("no keys")
	}
	nk := &namespaceKeys{current: cfg.Current, keks: map[string]cipher.AEAD{}}
	for i, k := range cfg.Keys {
		if k.ID == "" || len(k.ID) > 64 || strings.ContainsAny(k.ID, ":\x00") {
			return nil, errors.Newf("key %d: id %q must be 1-64 characters without ':'", i, k.ID)
		}
		if _, dup := nk.keks[k.ID]; dup {
			return nil, errors.Newf("key id %q is listed twice", k.ID)
		}
		raw, err := base64.StdEncoding.DecodeString(k.Key)
		if err != nil || len(raw) != 32 {
			return nil, errors.Newf("key %q: must be 32 bytes of base64 (AES-256), got %d bytes", k.ID, len(raw))
		}
		if nk.keks[k.ID], err = newAEAD(raw); err != nil {
			return nil, err
		}
		if i == 0 {
			mac := hmac.New(sha256.New, raw)
			mac.Write([]byte("cairn input digest v1"))
			nk.digest = mac.Sum(nil)
		}
	}
	if _, ok := nk.keks[cfg.Current]; !ok {
		return nil, errors.Newf("current key %q is not among the keys listed", cfg.Current)
	}
	return nk, nil
}

// ParseCodec reads a keys file's JSON (see [CodecConfig]); unknown fields
// are refused, so a misspelt one is not silently ignored.
func ParseCodec(data []byte) (*Codec, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var cfg CodecConfig
	if err := dec.Decode(&cfg); err != nil {
		return nil, errors.Wrap(err, "parse keys")
	}
	return NewCodec(cfg)
}

// LoadCodec reads the keys file at path.
func LoadCodec(path string) (*Codec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.Wrap(err, "read keys file")
	}
	c, err := ParseCodec(data)
	return c, errors.Wrapf(err, "keys file %s", path)
}

// CodecFromEnv returns the codec of CAIRN_KEYS (the JSON) or
// CAIRN_KEYS_FILE (a path), or nil when neither is set.
func CodecFromEnv() (*Codec, error) {
	if v := os.Getenv(EnvKeys); v != "" {
		c, err := ParseCodec([]byte(v))
		return c, errors.Wrap(err, EnvKeys)
	}
	if path := os.Getenv(EnvKeysFile); path != "" {
		return LoadCodec(path)
	}
	return nil, nil
}

// Encrypts reports whether the codec seals namespace's payloads.
func (c *Codec) Encrypts(namespace string) bool {
	if c == nil {
		return false
	}
	_, ok := c.namespaces[namespace]
	return ok
}

// ErrPayloadSealed marks a read of a payload that stays sealed: its task
// was erased, or this process has no key for it.
var ErrPayloadSealed = errors.New("payload is encrypted")

// ErrPayloadCorrupt marks a sealed payload that does not open with its
// key: it was altered, or sealed for another task.
var ErrPayloadCorrupt = errors.New("encrypted payload is damaged")

const wrappedVersion = "ck1:"

// newDataKey makes task id's data key in namespace and returns it with
// its wrapped form: "ck1:" + the namespace key's id + ":" + nonce and
// ciphertext, the task's id as additional data (a key copied to another
// task's row does not open).
func (c *Codec) newDataKey(namespace string, id uuid.UUID) (cipher.AEAD, []byte, error) {
	nk := c.namespaces[namespace]
	if nk == nil {
		return nil, nil, errors.AssertionFailedf("no keys for namespace %q", namespace)
	}
	dk := make([]byte, 32)
	if _, err := rand.Read(dk); err != nil {
		return nil, nil, errors.Wrap(err, "new data key")
	}
	aead, err := newAEAD(dk)
	if err != nil {
		return nil, nil, err
	}
	kek := nk.keks[nk.current]
	out := make([]byte, 0, len(wrappedVersion)+len(nk.current)+1+kek.NonceSize()+len(dk)+kek.Overhead())
	out = append(out, wrappedVersion...)
	out = append(out, nk.current...)
	out = append(out, ':')
	return aead, sealInto(kek, out, dk, id[:]), nil
}

// unwrap opens task id's wrapped data key with the namespace key it names.
func (c *Codec) unwrap(namespace string, id uuid.UUID, wrapped []byte) (cipher.AEAD, error) {
	nk := c.namespaces[namespace]
	if nk == nil {
		return nil, errmark.Mark(errors.Newf("task %s: no keys for namespace %q", id, namespace), ErrPayloadSealed)
	}
	rest, ok := strings.CutPrefix(string(wrapped), wrappedVersion)
	keyID, body, found := strings.Cut(rest, ":")
	if !ok || !found {
		return nil, errmark.Mark(errors.Newf("task %s: data key of unknown form", id), ErrPayloadCorrupt)
	}
	kek := nk.keks[keyID]
	if kek == nil {
		return nil, errmark.Mark(errors.Newf("task %s: its data key is wrapped by key %q of namespace %q, which is not among the keys configured", id, keyID, namespace), ErrPayloadSealed)
	}
	dk, err := openFrom(kek, []byte(body), id[:])
	if err != nil {
		return nil, errmark.Mark(errors.Newf("task %s: its data key does not open with key %q", id, keyID), ErrPayloadCorrupt)
	}
	return newAEAD(dk)
}

// digest is the keyed digest of input's canonical JSON: what a keyed
// start's sealed input carries so that RefuseKeyReuse compares starts
// without their plaintexts.
func (c *Codec) digest(namespace string, input []byte) []byte {
	mac := hmac.New(sha256.New, c.namespaces[namespace].digest)
	mac.Write(plan.InputIdentity(input)) // the same for an input in place and by reference
	return mac.Sum(nil)
}

// seal seals plaintext with task owner's data key.
func sealPayload(dk cipher.AEAD, owner uuid.UUID, plaintext, digest []byte) json.RawMessage {
	return history.Sealed{V: 1, Task: owner.String(), Digest: digest, Data: sealInto(dk, nil, plaintext, payloadAD(owner.String()))}.Encode()
}

// sealWithNamespaceKey seals plaintext with namespace's current key
// itself: a payload of no one task (a schedule's input).
func (c *Codec) sealWithNamespaceKey(namespace string, plaintext []byte) json.RawMessage {
	nk := c.namespaces[namespace]
	return history.Sealed{V: 1, Key: nk.current, Data: sealInto(nk.keks[nk.current], nil, plaintext, payloadAD("key:"+nk.current))}.Encode()
}

// openWithNamespaceKey opens what sealWithNamespaceKey sealed.
func (c *Codec) openWithNamespaceKey(namespace string, s history.Sealed) ([]byte, error) {
	nk := c.namespaces[namespace]
	if nk == nil || nk.keks[s.Key] == nil {
		return nil, errmark.Mark(errors.Newf("sealed with key %q of namespace %q, which is not configured", s.Key, namespace), ErrPayloadSealed)
	}
	out, err := openFrom(nk.keks[s.Key], s.Data, payloadAD("key:"+s.Key))
	if err != nil {
		return nil, errmark.Mark(errors.Newf("sealed with key %q: does not open", s.Key), ErrPayloadCorrupt)
	}
	return out, nil
}

func payloadAD(owner string) []byte { return []byte("cairn payload " + owner) }

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, errors.Wrap(err, "aes")
	}
	return cipher.NewGCM(block)
}

// sealInto appends a random nonce and the sealed plaintext to dst.
func sealInto(aead cipher.AEAD, dst, plaintext, ad []byte) []byte {
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail (Go 1.24 and later)
	}
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
