package seal

import (
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"sort"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/inputid"
	"github.com/cairnflow/cairn/payload"
)

// Keys are the namespace keys a [Codec] encrypts with: AES-256-GCM keys,
// each namespace's current one wrapping the data keys of its new tasks,
// every one listed opening the tasks it wrapped (a rotation lists the old
// key beside the new current one). They are configured from a keys file
// or the environment ([LoadKeys], [KeysFromEnv]), never from the
// database, and given to every process that reads or writes those
// namespaces (the SDK's ClientConfig.Keys and WorkerConfig.Keys). Keys
// are safe for concurrent use.
type Keys struct {
	namespaces map[string]*namespaceKeys
}

// Config is what a keys file holds (JSON):
//
//	{"namespaces": {"default": {"current": "2026-12",
//	    "keys": [{"id": "2026-11", "key": "<base64 of 32 bytes>"},
//	             {"id": "2026-12", "key": "<base64 of 32 bytes>"}]}}}
//
// The first key of a namespace also keys the digests that idempotency
// keys' reuse is compared by (RefuseKeyReuse): keep it listed.
type Config struct {
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

// Key environment variables: CAIRN_KEYS holds a keys file's JSON,
// CAIRN_KEYS_FILE names one.
const (
	EnvKeys     = "CAIRN_KEYS"
	EnvKeysFile = "CAIRN_KEYS_FILE"
)

// NewKeys checks cfg and returns its keys: every namespace needs at least
// one key, ids unique and without ':' , each key 32 bytes of base64, and
// Current one of them.
func NewKeys(cfg Config) (*Keys, error) {
	k := &Keys{namespaces: map[string]*namespaceKeys{}}
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
		k.namespaces[name] = nk
	}
	return k, nil
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

// ParseKeys reads a keys file's JSON (see [Config]); unknown fields are
// refused, so a misspelt one is not silently ignored.
func ParseKeys(data []byte) (*Keys, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return nil, errors.Wrap(err, "parse keys")
	}
	return NewKeys(cfg)
}

// LoadKeys reads the keys file at path.
func LoadKeys(path string) (*Keys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.Wrap(err, "read keys file")
	}
	k, err := ParseKeys(data)
	return k, errors.Wrapf(err, "keys file %s", path)
}

// KeysFromEnv returns the keys of CAIRN_KEYS (the JSON) or
// CAIRN_KEYS_FILE (a path), or nil when neither is set.
func KeysFromEnv() (*Keys, error) {
	if v := os.Getenv(EnvKeys); v != "" {
		k, err := ParseKeys([]byte(v))
		return k, errors.Wrap(err, EnvKeys)
	}
	if path := os.Getenv(EnvKeysFile); path != "" {
		return LoadKeys(path)
	}
	return nil, nil
}

// Encrypts reports whether the keys seal namespace's payloads.
func (k *Keys) Encrypts(namespace string) bool {
	if k == nil {
		return false
	}
	_, ok := k.namespaces[namespace]
	return ok
}

const wrappedVersion = "ck1:"

// newDataKey makes task id's data key in namespace and returns it with
// its wrapped form: "ck1:" + the namespace key's id + ":" + nonce and
// ciphertext, the task's id as additional data (a key copied to another
// task's row does not open).
func (k *Keys) newDataKey(namespace string, id uuid.UUID) (cipher.AEAD, []byte, error) {
	nk := k.namespaces[namespace]
	if nk == nil {
		return nil, nil, errors.AssertionFailedf("no keys for namespace %q", namespace)
	}
	dk := make([]byte, 32)
	randRead(dk)
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
func (k *Keys) unwrap(namespace string, id uuid.UUID, wrapped []byte) (cipher.AEAD, error) {
	nk := k.namespaces[namespace]
	if nk == nil {
		return nil, errmark.Mark(errors.Newf("task %s: no keys for namespace %q", id, namespace), payload.ErrSealed)
	}
	rest, ok := strings.CutPrefix(string(wrapped), wrappedVersion)
	keyID, body, found := strings.Cut(rest, ":")
	if !ok || !found {
		return nil, errmark.Mark(errors.Newf("task %s: data key of unknown form", id), payload.ErrCorrupt)
	}
	kek := nk.keks[keyID]
	if kek == nil {
		return nil, errmark.Mark(errors.Newf("task %s: its data key is wrapped by key %q of namespace %q, which is not among the keys configured", id, keyID, namespace), payload.ErrSealed)
	}
	dk, err := openFrom(kek, []byte(body), id[:])
	if err != nil {
		return nil, errmark.Mark(errors.Newf("task %s: its data key does not open with key %q", id, keyID), payload.ErrCorrupt)
	}
	return newAEAD(dk)
}

// digest is the keyed digest of input's canonical JSON: what a keyed
// start's sealed input carries so that RefuseKeyReuse compares starts
// without their plaintexts.
func (k *Keys) digest(namespace string, input []byte) []byte {
	mac := hmac.New(sha256.New, k.namespaces[namespace].digest)
	mac.Write(inputid.Digest(input)) // the same for an input in place and by reference
	return mac.Sum(nil)
}
