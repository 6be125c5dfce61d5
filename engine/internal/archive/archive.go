// Package archive keeps the histories of tasks retention removes, as
// gzip-compressed JSON lines in objects sliced by the hour the tasks were
// created (their UUIDv7 ids say when), in a directory or an S3-compatible
// object store. It finds an archived task's history again by its id, and
// scans a namespace's records for audits.
//
// An object's key is <namespace>/<YYYY>/<MM>/<DD>/<HH>/<object id>.jsonl.gz
// under the location's prefix; each line is a [Record]. A task may be in
// more than one object (archived, then changed before its removal, then
// archived again): a read keeps the copy with the most events.
//
// A read trusts no object to be one Write wrote (read.go): it takes at
// most maxObjectBytes of an object, stored and decompressed, and
// maxRecordBytes of a line; it parses only the head of the lines of tasks
// it does not look for; and it refuses an object that is not as Write
// writes it with an error marked [ErrCorrupt] that names the object.
package archive

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/bucket"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Record is one task's history in an archive object.
type Record struct {
	Namespace string          `json:"namespace"`
	TaskID    uuid.UUID       `json:"task_id"`
	Events    []history.Event `json:"events"`
	// DataKey is the task's wrapped data key when its payloads are
	// encrypted (payload/seal): the events hold them sealed, and only the
	// namespace's key opens this. An erased task has none.
	DataKey []byte `json:"data_key,omitempty"`
}

// lastSeq is the seq of the record's last event.
func (r Record) lastSeq() int64 {
	if len(r.Events) == 0 {
		return 0
	}
	return r.Events[len(r.Events)-1].Seq
}

// ErrNotArchived marks a read of a task the archive does not hold.
var ErrNotArchived = errors.New("the task is not in the archive")

// Write archives records in one object per namespace and creation hour
// (more when one would pass maxObjectBytes decompressed).
func Write(ctx context.Context, b bucket.Bucket, records []Record) error {
	for _, r := range records {
		if err := bucket.CheckNamespace(r.Namespace); err != nil {
			return err
		}
	}
	type slice struct{ namespace, hour string }
	groups := map[slice][]Record{}
	var order []slice
	for _, r := range records {
		k := slice{r.Namespace, hourOf(r.TaskID)}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range order {
		bodies, err := encode(groups[k])
		if err != nil {
			return err
		}
		for _, body := range bodies {
			key := k.namespace + "/" + k.hour + "/" + uuid.Must(uuid.NewV7()).String() + ".jsonl.gz"
			if err := b.Put(ctx, key, body); err != nil {
				return errors.Wrapf(err, "archive %d tasks to %s", len(groups[k]), b)
			}
		}
	}
	return nil
}

// Find returns the archived history of task id of namespace: the copy
// with the most events. A task not archived is an error marked
// [ErrNotArchived].
func Find(ctx context.Context, b bucket.Bucket, namespace string, id uuid.UUID) ([]history.Event, error) {
	r, err := FindRecord(ctx, b, namespace, id)
	return r.Events, err
}

// FindRecord is [Find] returning the whole record.
func FindRecord(ctx context.Context, b bucket.Bucket, namespace string, id uuid.UUID) (Record, error) {
	if err := bucket.CheckNamespace(namespace); err != nil {
		return Record{}, err
	}
	prefix := namespace + "/" + hourOf(id) + "/" // one hour's objects (or those of ids without a time)
	var found *Record
	this := func(ns string, task uuid.UUID) bool { return task == id && ns == namespace }
	err := scan(ctx, b, prefix, this, func(r Record) error {
		if found == nil || r.lastSeq() > found.lastSeq() {
			found = &r
		}
		return nil
	})
	if err != nil {
		return Record{}, err
	}
	if found == nil {
		return Record{}, errmark.Mark(errors.Newf("task %s is not in the archive %s", id, b), ErrNotArchived)
	}
	return *found, nil
}

// Scan calls fn with every record of namespace, object by object in key
// order (the hour the tasks were created). A task archived twice is seen
// twice.
// Objects of tasks created at or after until (an hour's slice starting
// then or later) are skipped; a zero until skips none.
func Scan(ctx context.Context, b bucket.Bucket, namespace string, until time.Time, fn func(Record) error) error {
	if err := bucket.CheckNamespace(namespace); err != nil {
		return err
	}
	var last string // the last hour slice that may hold events before until
	if !until.IsZero() {
		last = namespace + "/" + until.UTC().Format("2006/01/02/15") + "/~"
	}
	// Records name their namespace: another's folder reached through a
	// shared root is not handed out.
	ours := func(ns string, _ uuid.UUID) bool { return ns == namespace }
	return scan(ctx, b, namespace+"/", ours, fn, last)
}

// scan reads every object under prefix (up to the key last, when set) and
// hands fn the records want selects.
func scan(ctx context.Context, b bucket.Bucket, prefix string, want func(string, uuid.UUID) bool, fn func(Record) error, last ...string) error {
	keys, err := b.List(ctx, prefix)
	if err != nil {
		return errors.Wrapf(err, "list the archive %s", b)
	}
	for _, key := range keys {
		if !strings.HasSuffix(key, ".jsonl.gz") {
			continue // not an archive object (a stray file)
		}
		if len(last) > 0 && last[0] != "" && key > last[0] && !strings.HasPrefix(key, prefix+unknownHour+"/") {
			continue
		}
		if err := readObject(ctx, b, key, want, fn); err != nil {
			return errors.Wrapf(err, "read archive object %s of %s", key, b)
		}
	}
	return nil
}

// unknownHour is the slice of tasks whose ids carry no time.
const unknownHour = "unknown"

// hourOf is the slice of a task: the UTC hour its UUIDv7 id was made.
func hourOf(id uuid.UUID) string {
	if id.Version() != 7 {
		return unknownHour
	}
	sec, nsec := id.Time().UnixTime()
	return time.Unix(sec, nsec).UTC().Format("2006/01/02/15")
}

// encode makes the objects of records: gzip-compressed JSON lines, in as
// many objects as keep each within maxObjectBytes decompressed.
func encode(records []Record) ([][]byte, error) {
	var objects [][]byte
	var buf *bytes.Buffer
	var zw *gzip.Writer
	var size int64 // decompressed, in the object being written
	closeObject := func() error {
		if err := zw.Close(); err != nil {
			return err
		}
		if int64(buf.Len()) > maxObjectBytes { // incompressible JSON: not met in practice
			return errors.Newf("an archive object of %d records would be %d bytes, over the archive's %d", len(records), buf.Len(), maxObjectBytes)
		}
		objects, zw = append(objects, buf.Bytes()), nil
		return nil
	}
	for _, r := range records {
		line, err := json.Marshal(r)
		if err != nil {
			return nil, errors.Wrapf(err, "encode the history of task %s", r.TaskID)
		}
		if len(line) >= maxRecordBytes {
			// It could not be read back: keep the task in the database.
			return nil, errors.Newf("the history of task %s is %d bytes of JSON, over the archive's %d per task", r.TaskID, len(line), maxRecordBytes)
		}
		if zw != nil && size+int64(len(line))+1 > maxObjectBytes {
			if err := closeObject(); err != nil {
				return nil, err
			}
		}
		if zw == nil {
			buf, size = new(bytes.Buffer), 0
			zw = gzip.NewWriter(buf)
		}
		if _, err := zw.Write(append(line, '\n')); err != nil {
			return nil, err
		}
		size += int64(len(line)) + 1
	}
	if zw != nil {
		if err := closeObject(); err != nil {
			return nil, err
		}
	}
	return objects, nil
}

// WriteBlob writes the bytes of blob key of task id of namespace (as the
// database holds them: sealed, when the task's payloads are encrypted).
func WriteBlob(ctx context.Context, b bucket.Bucket, namespace string, id uuid.UUID, key string, data []byte) error {
	name, err := BlobObject(namespace, id, key)
	if err != nil {
		return err
	}
	return errors.Wrapf(b.Put(ctx, name, data), "archive blob %s to %s", key, b)
}

// FindBlob reads blob key of namespace from the archive, with the task
// that wrote it. A blob not there is an error marked [ErrNotArchived].
func FindBlob(ctx context.Context, b bucket.Bucket, namespace, key string) (uuid.UUID, []byte, error) {
	if err := bucket.CheckNamespace(namespace); err != nil {
		return uuid.Nil, nil, err
	}
	if err := bucket.CheckBlobKey(key); err != nil {
		return uuid.Nil, nil, err
	}
	prefix := namespace + "/blobs/" + key + "/"
	keys, err := b.List(ctx, prefix)
	if err != nil {
		return uuid.Nil, nil, errors.Wrapf(err, "list the archive %s", b)
	}
	for _, k := range keys {
		name, ok := strings.CutSuffix(strings.TrimPrefix(k, prefix), bucket.BlobSuffix)
		id, err := uuid.Parse(name)
		if !ok || err != nil {
			continue // not a blob object
		}
		data, err := b.Get(ctx, k)
		return id, data, errors.Wrapf(err, "read blob %s from the archive %s", key, b)
	}
	return uuid.Nil, nil, errmark.Mark(errors.Newf("blob %s is not in the archive %s", key, b), ErrNotArchived)
}

// BlobObject is the name of blob key of task id of namespace in an
// archive, <namespace>/blobs/<key>/<task>.blob: where archival copies it
// (a blob store keeps its own apart: bucket.StoredBlob).
func BlobObject(namespace string, id uuid.UUID, key string) (string, error) {
	if err := bucket.CheckNamespace(namespace); err != nil {
		return "", err
	}
	if err := bucket.CheckBlobKey(key); err != nil {
		return "", err
	}
	return namespace + "/blobs/" + key + "/" + id.String() + bucket.BlobSuffix, nil
}
