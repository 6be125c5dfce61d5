package seal

import (
	"context"
	"crypto/cipher"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload"
)

// Decode implements [payload.Codec]: it opens the sealed payloads of ps,
// reading the data keys they need in one read. A payload that does not
// open here stays sealed. A blob's bytes that do not open are an error
// on the payload ([payload.Payload.Err]) marked [payload.ErrSealed] (no
// key: the task was erased, or its namespace's key is not configured) or
// [payload.ErrCorrupt] (they were altered). The error is a failure to
// read the keys from the store: a read reports it rather than hand
// payloads on sealed as if erased.
func (c *Codec) Decode(ctx context.Context, ps []*payload.Payload) error {
	o := &opener{ctx: ctx, c: c, keys: map[uuid.UUID]cipher.AEAD{}, opened: map[string][]byte{}, parsed: map[string]history.Sealed{}}
	o.prefetch(ps)
	for _, p := range ps {
		if p.Kind == payload.BlobData {
			o.openBlob(p)
			continue
		}
		if history.MaybeSealed(p.Data) {
			p.Data = o.open(p.Namespace, p.Data)
		}
	}
	return o.err
}

// opener opens the sealed payloads of one read, fetching the data keys it
// needs once.
type opener struct {
	ctx     context.Context
	c       *Codec
	keys    map[uuid.UUID]cipher.AEAD // nil entry: no key (erased, or not configured here)
	pending map[uuid.UUID][]byte      // wrapped keys prefetched, not yet opened
	// opened memoizes open by the sealed bytes: a claimed task's input is
	// in its row, its first event and its state, the same bytes thrice.
	opened map[string][]byte
	parsed map[string]history.Sealed // the sealed payloads prefetch parsed, by their bytes
	// err is the first failure to read keys from the store.
	err error
}

// prefetch sets the data keys the archive kept for the archived tasks of
// ps, and reads the keys of the tasks whose payloads ps hold sealed, and
// are not cached, in one read.
func (o *opener) prefetch(ps []*payload.Payload) {
	for _, p := range ps {
		if a := p.Archived; a != nil {
			if _, seen := o.keys[a.Task]; !seen {
				o.keys[a.Task] = o.archivedKey(p.Namespace, a)
			}
		}
	}
	var missing []uuid.UUID
	want := func(id uuid.UUID) {
		if _, seen := o.keys[id]; seen {
			return
		}
		if aead := o.c.cache.get(id); aead != nil {
			o.keys[id] = aead
			return
		}
		missing = append(missing, id)
		o.keys[id] = nil // until the read says otherwise
	}
	for _, p := range ps {
		switch {
		case p.Kind == payload.BlobData:
			if BlobSealed(p.Data) {
				want(p.Task)
			}
		case o.c.keys.Encrypts(p.Namespace) && history.MaybeSealed(p.Data):
			sealed, ok := o.parse(p.Data)
			if !ok || sealed.Key != "" {
				continue
			}
			if owner, err := uuid.Parse(sealed.Task); err == nil {
				want(owner)
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	wrapped, err := o.c.store.TaskDataKeys(o.ctx, missing)
	if err != nil {
		for _, id := range missing {
			delete(o.keys, id) // looked up one by one, and failing so, later
		}
		o.fail(err)
		return
	}
	for id, w := range wrapped {
		if w != nil {
			delete(o.keys, id)
		}
	}
	o.pending = wrapped
}

// archivedKey opens the data key an archive kept: nil for an erased task
// (its payloads stay sealed, and are not looked up in the store either),
// or one that does not open here.
func (o *opener) archivedKey(ns string, a *payload.Archived) cipher.AEAD {
	if len(a.DataKey) == 0 {
		return nil
	}
	aead, err := o.c.keys.unwrap(ns, a.Task, a.DataKey)
	if err != nil {
		return nil
	}
	return aead
}

// parse parses a sealed payload, once per read.
func (o *opener) parse(raw []byte) (history.Sealed, bool) {
	if s, ok := o.parsed[string(raw)]; ok {
		return s, true
	}
	s, ok := history.ParseSealed(raw)
	if ok {
		o.parsed[string(raw)] = s
	}
	return s, ok
}

// key returns task id's data key in namespace ns, nil when there is none.
func (o *opener) key(ns string, id uuid.UUID) cipher.AEAD {
	aead, _ := o.keyErr(ns, id)
	return aead
}

// keyErr is key, with why there is none.
func (o *opener) keyErr(ns string, id uuid.UUID) (cipher.AEAD, error) {
	if wrapped, ok := o.pending[id]; ok {
		delete(o.pending, id)
		aead, err := o.c.keys.unwrap(ns, id, wrapped)
		if err == nil {
			o.c.cache.put(id, aead)
		}
		o.keys[id] = aead
		return aead, err
	}
	if aead, seen := o.keys[id]; seen {
		if aead == nil {
			return nil, errmark.Mark(errors.Wrapf(errNoDataKey, "task %s", id), payload.ErrSealed)
		}
		return aead, nil
	}
	aead, err := o.c.dataKey(o.ctx, ns, id, false)
	if err != nil {
		o.fail(err)
		aead = nil
	}
	o.keys[id] = aead
	return aead, err
}

// fail records err unless it only says a payload stays sealed (no key
// for it, or one that does not open it).
func (o *opener) fail(err error) {
	if o.err == nil && !errors.Is(err, payload.ErrSealed) && !errors.Is(err, payload.ErrCorrupt) {
		o.err = errors.Wrap(err, "read the data keys to open payloads")
	}
}

// open returns raw opened, or raw as it is when it is not sealed or does
// not open here.
func (o *opener) open(ns string, raw []byte) []byte {
	if plain, ok := o.opened[string(raw)]; ok {
		return plain
	}
	plain := o.openSealed(ns, raw)
	o.opened[string(raw)] = plain
	return plain
}

// openSealed is open without the memo.
func (o *opener) openSealed(ns string, raw []byte) []byte {
	sealed, ok := o.parse(raw)
	if !ok {
		return raw
	}
	var plain []byte
	var err error
	if sealed.Key != "" {
		plain, err = o.c.keys.openWithNamespaceKey(ns, sealed)
	} else {
		owner, perr := uuid.Parse(sealed.Task)
		if perr != nil {
			return raw
		}
		aead := o.key(ns, owner)
		if aead == nil {
			return raw
		}
		plain, err = openFrom(aead, sealed.Data, payloadAD(sealed.Task))
	}
	if err != nil {
		return raw
	}
	return plain
}

// openBlob opens a sealed blob's bytes with its task's data key (a blob
// written in clear is left as it is).
func (o *opener) openBlob(p *payload.Payload) {
	if !BlobSealed(p.Data) {
		return
	}
	var aead cipher.AEAD
	if a := p.Archived; a != nil && a.Task == p.Task {
		if len(a.DataKey) == 0 {
			p.Err = errmark.Mark(errors.Newf("blob %s of task %s: the task was erased", p.BlobKey, p.Task), payload.ErrSealed)
			return
		}
		var err error
		if aead, err = o.c.keys.unwrap(p.Namespace, p.Task, a.DataKey); err != nil {
			p.Err = errors.Wrapf(err, "blob %s", p.BlobKey)
			return
		}
	} else {
		var err error
		if aead, err = o.keyErr(p.Namespace, p.Task); aead == nil {
			p.Err = errors.Wrapf(err, "blob %s", p.BlobKey)
			return
		}
	}
	plain, err := openFrom(aead, p.Data[len(sealedBlobMagic):], blobAD(p.BlobKey))
	if err != nil {
		p.Err = errmark.Mark(errors.Newf("blob %s of task %s does not open with its task's key", p.BlobKey, p.Task), payload.ErrCorrupt)
		return
	}
	p.Data = plain
}
