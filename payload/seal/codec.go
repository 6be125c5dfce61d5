package seal

import (
	"context"
	"crypto/cipher"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload"
)

// DataKeys is where a [Codec] keeps the tasks' wrapped data keys: on the
// tasks' rows. The SDK adapts its store to it. TaskDataKeys returns the
// wrapped keys of the tasks of ids that have one; TaskDataKeySet gives
// key to a task still to finish that has none (one a schedule started,
// or started before its namespace was encrypted) and returns the key the
// task holds then: key, the one it had, or nil (finished without one,
// erased, or gone).
type DataKeys interface {
	TaskDataKeys(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]byte, error)
	TaskDataKeySet(ctx context.Context, id uuid.UUID, key []byte) ([]byte, error)
}

// Codec is the [payload.Codec] that encrypts at rest, with AES-256-GCM,
// the payloads of the namespaces its [Keys] have keys for: inputs, step
// outputs, outputs, signal payloads, and the bytes of blobs. Each task
// gets its own random data key, kept on the task's row wrapped by the
// namespace's current key, whose id the wrapped key records; so a key
// rotation (a new current key) seals new tasks with the new key while old
// ones stay readable as long as their key is listed. Erasing a task
// destroys its data key (crypto-shredding): its payloads stay in the log,
// unreadable for good. A schedule's input, and a signal sent by
// idempotency key, belong to no task yet and are sealed with the
// namespace key itself (an erasure does not shred them).
//
// A payload it cannot open (its task was erased, or its key is not
// configured here) is left sealed: readers show the {"cairn_sealed": …}
// object, never garbage. Payloads of other namespaces pass as they are.
// Error messages, types, times, attempts, labels, idempotency keys and
// who did what are not payloads and are not encrypted: they are the audit
// trail an erasure keeps.
//
// It is safe for concurrent use.
type Codec struct {
	keys  *Keys
	store DataKeys
	cache keyCache
}

// New returns the codec of keys, keeping data keys in store.
func New(keys *Keys, store DataKeys) *Codec {
	return &Codec{keys: keys, store: store, cache: keyCache{m: map[uuid.UUID]cachedKey{}}}
}

var _ payload.Codec = (*Codec)(nil)

// Forget drops task id's data key from the codec's cache: after the task
// was erased. Another process may keep opening its payloads for up to a
// minute, its cache's lifetime (docs/guarantees.md).
func (c *Codec) Forget(id uuid.UUID) { c.cache.drop(id) }

// keyCache keeps opened data keys for a minute: a worker appends a
// task's outputs with the key it read at the claim.
type keyCache struct {
	mu sync.Mutex
	m  map[uuid.UUID]cachedKey
}

type cachedKey struct {
	aead cipher.AEAD
	at   time.Time
}

const (
	keyTTL      = time.Minute
	maxKeyCache = 20_000
)

func (k *keyCache) get(id uuid.UUID) cipher.AEAD {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[id]
	if !ok || time.Since(e.at) > keyTTL {
		return nil
	}
	return e.aead
}

func (k *keyCache) put(id uuid.UUID, aead cipher.AEAD) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) >= maxKeyCache {
		clear(k.m) // rare: refilled from the database as needed
	}
	k.m[id] = cachedKey{aead: aead, at: time.Now()}
}

func (k *keyCache) drop(id uuid.UUID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, id)
}

// Encode implements [payload.Codec]: it seals the payloads of the
// namespaces it has keys for. A new task's input is sealed under a new
// data key of its own (the start writes it); a task without a key (one a
// schedule started) gets one at its first payload. Whatever a payload
// looks like, it is sealed: a user's value shaped like a sealed one is
// never stored as it is.
func (c *Codec) Encode(ctx context.Context, ps []*payload.Payload) error {
	for _, p := range ps {
		if err := c.encode(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (c *Codec) encode(ctx context.Context, p *payload.Payload) error {
	ns := p.Namespace
	if !c.keys.Encrypts(ns) || (len(p.Data) == 0 && p.Kind != payload.BlobData) {
		return nil
	}
	switch {
	case p.Kind == payload.BlobData:
		aead, err := c.keyOf(ctx, p)
		if err != nil {
			return err
		}
		// The digest recorded with the blob stays the plaintext's.
		p.Data = sealInto(aead, []byte(sealedBlobMagic), p.Data, blobAD(p.BlobKey))
	case p.Task == uuid.Nil:
		p.Data = c.keys.sealWithNamespaceKey(ns, p.Data)
	default:
		aead, err := c.keyOf(ctx, p)
		if p.Start == nil && errors.Is(err, errNoDataKey) {
			// No key, and none can be given: the task has finished or is
			// gone, and the store refuses what carries the payload (a
			// signal, an append) as it would refuse it in clear, saying
			// which. It is sealed all the same, with the namespace key.
			p.Data = c.keys.sealWithNamespaceKey(ns, p.Data)
			return nil
		}
		if err != nil {
			return err
		}
		var digest []byte
		if p.Start != nil && p.Start.Keyed {
			digest = c.keys.digest(ns, p.Data)
		}
		p.Data = sealPayload(aead, p.Task, p.Data, digest)
	}
	return nil
}

// keyOf returns the data key p is sealed with: for a start, the new
// task's (made by the first of its payloads sealed); else the task's,
// made now if it has none.
func (c *Codec) keyOf(ctx context.Context, p *payload.Payload) (cipher.AEAD, error) {
	if p.Start == nil {
		return c.dataKey(ctx, p.Namespace, p.Task, true)
	}
	if p.Start.DataKey == nil {
		aead, wrapped, err := c.keys.newDataKey(p.Namespace, p.Task)
		if err != nil {
			return nil, err
		}
		p.Start.DataKey = wrapped
		c.cache.put(p.Task, aead)
		return aead, nil
	}
	if aead := c.cache.get(p.Task); aead != nil {
		return aead, nil
	}
	aead, err := c.keys.unwrap(p.Namespace, p.Task, p.Start.DataKey)
	if err == nil {
		c.cache.put(p.Task, aead)
	}
	return aead, err
}

// dataKey returns task id's data key: from the cache, else from its row;
// with create, a task without one gets one (a task a schedule started).
func (c *Codec) dataKey(ctx context.Context, ns string, id uuid.UUID, create bool) (cipher.AEAD, error) {
	if aead := c.cache.get(id); aead != nil {
		return aead, nil
	}
	keys, err := c.store.TaskDataKeys(ctx, []uuid.UUID{id})
	if err != nil {
		return nil, err
	}
	wrapped := keys[id]
	if wrapped == nil && create && c.keys.Encrypts(ns) {
		_, fresh, err := c.keys.newDataKey(ns, id)
		if err != nil {
			return nil, err
		}
		if wrapped, err = c.store.TaskDataKeySet(ctx, id, fresh); err != nil {
			return nil, err
		}
	}
	if wrapped == nil {
		return nil, errmark.Mark(errors.Wrapf(errNoDataKey, "task %s", id), payload.ErrSealed)
	}
	aead, err := c.keys.unwrap(ns, id, wrapped)
	if err != nil {
		return nil, err
	}
	c.cache.put(id, aead)
	return aead, nil
}

// errNoDataKey is dataKey's error for a task without a data key: erased,
// gone, or finished without one.
var errNoDataKey = errors.New("the task has no data key: it was erased, or finished without writing a payload under encryption")
