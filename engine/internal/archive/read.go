package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/internal/bucket"
	"github.com/cairnflow/cairn/internal/errmark"
)

// An object in the archive's bucket is not trusted to be one Write wrote:
// whoever can write to the bucket, or a damaged disk, can put another
// there, and every lookup of its hour reads it. These bound what a read
// takes from one object, so a small object that decompresses to a huge
// one (a gzip bomb) costs a lookup little.
var (
	// maxRecordBytes bounds one record's line of JSON: a history of the
	// API's limits fits. Write refuses a longer one (the task stays in
	// the database); a read stops at one as corrupt.
	maxRecordBytes = 256 << 20
	// maxObjectBytes bounds one object, as stored and decompressed: Write
	// starts another object before a batch's lines would pass it; a read
	// stops there as corrupt.
	maxObjectBytes int64 = 512 << 20
)

// headBytes bounds the beginning of a line that names its record's
// namespace and task ({"namespace":…,"task_id":"…", the first fields of
// [Record], in their order). A lookup reads no more of another task's
// line than that into memory: the rest is decompressed and dropped.
const headBytes = 64 << 10

// ErrCorrupt marks an object that is not what Write writes: not gzip, a
// line that is not a record, a line or an object over the bounds.
var ErrCorrupt = errors.New("the archive object is corrupt or was not written by cairn")

// objectRead is what reading one object took: its bytes as stored and
// decompressed, and the most held in memory for one line.
type objectRead struct {
	Key                      string
	Compressed, Decompressed int64
	Held                     int64
}

// readStats, when set (by tests), learns what each object's read took.
var readStats func(objectRead)

// readObject reads the object at key and hands fn the records that want
// selects by the namespace and task at the head of their lines; the
// others' lines are skipped without being parsed or held. The whole
// object is read (its gzip checksum checked) unless fn fails.
func readObject(ctx context.Context, b bucket.Bucket, key string, want func(namespace string, id uuid.UUID) bool, fn func(Record) error) error {
	read := objectRead{Key: key}
	if readStats != nil {
		defer func() { readStats(read) }()
	}
	body, err := b.Open(ctx, key)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	stored := &bounded{r: body, n: &read.Compressed, what: "stored"}
	// bad is an error the object's content caused (marked ErrCorrupt), or
	// one of reading it from the bucket (as it is).
	bad := func(err error, format string, args ...any) error {
		if stored.failed != nil {
			return errors.Wrapf(stored.failed, format, args...)
		}
		return errmark.Mark(errors.Wrapf(err, "the object is corrupt or not cairn's: "+format, args...), ErrCorrupt)
	}
	zr, err := gzip.NewReader(stored)
	if err != nil {
		return bad(err, "not gzip")
	}
	lines := bufio.NewReaderSize(&bounded{r: zr, n: &read.Decompressed, what: "decompressed"}, headBytes)
	for line := 1; ; line++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		head, err := nextHead(lines)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return bad(err, "line %d", line)
		}
		namespace, id, err := parseHead(head)
		if err != nil {
			return bad(err, "line %d is not a record (it begins %q)", line, clip(head))
		}
		if !want(namespace, id) {
			if err := skipLine(lines); err != nil {
				return bad(err, "line %d (task %s)", line, id)
			}
			continue
		}
		raw, err := readLine(lines, &read.Held)
		if err != nil {
			return bad(err, "line %d (task %s)", line, id)
		}
		var r Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return bad(err, "line %d (task %s)", line, id)
		}
		if r.Namespace != namespace || r.TaskID != id {
			return bad(errors.Newf("it begins with task %s of %q and holds task %s of %q", id, namespace, r.TaskID, r.Namespace), "line %d", line)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
}

// bounded counts the bytes read through it and fails a read past
// maxObjectBytes; failed keeps an error of the reader below (not its end).
type bounded struct {
	r      io.Reader
	n      *int64
	what   string // stored or decompressed, for the message
	failed error
}

func (b *bounded) Read(p []byte) (int, error) {
	if room := maxObjectBytes - *b.n + 1; int64(len(p)) > room {
		p = p[:room] // one byte past the bound says the object goes on
	}
	n, err := b.r.Read(p)
	*b.n += int64(n)
	if *b.n > maxObjectBytes {
		return 0, errors.Newf("the object is over %d bytes %s", maxObjectBytes, b.what)
	}
	if err != nil && err != io.EOF {
		b.failed = err
	}
	return n, err
}

// nextHead returns the beginning of the next line, up to headBytes and
// without its newline, leaving it unread; io.EOF when no line is left.
func nextHead(r *bufio.Reader) ([]byte, error) {
	p, err := r.Peek(headBytes)
	if err != nil && (err != io.EOF || len(p) == 0) {
		return nil, err
	}
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		p = p[:i]
	}
	return p, nil
}

// parseHead reads the namespace and task a line's head names.
func parseHead(head []byte) (string, uuid.UUID, error) {
	d := json.NewDecoder(bytes.NewReader(head))
	var values []string
	for _, want := range []any{json.Delim('{'), "namespace", nil, "task_id", nil} {
		tok, err := d.Token()
		if err != nil {
			return "", uuid.Nil, err
		}
		if want == nil { // a value: a string
			s, ok := tok.(string)
			if !ok {
				return "", uuid.Nil, errors.Newf("%v is not a string", tok)
			}
			values = append(values, s)
		} else if tok != want {
			return "", uuid.Nil, errors.Newf("%v where %v belongs", tok, want)
		}
	}
	id, err := uuid.Parse(values[1])
	return values[0], id, err
}

// clip is the beginning of a line, for a message.
func clip(head []byte) []byte {
	return head[:min(len(head), 40)]
}

// errLineTooLong is a line over maxRecordBytes.
func errLineTooLong() error {
	return errors.Newf("the line is over %d bytes", maxRecordBytes)
}

// skipLine reads past the rest of a line, holding none of it.
func skipLine(r *bufio.Reader) error {
	for n := 0; ; {
		chunk, err := r.ReadSlice('\n')
		n += len(chunk)
		if err == nil {
			n-- // the newline
		}
		if n >= maxRecordBytes {
			return errLineTooLong()
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			return nil // the last line, without its newline
		default:
			return err
		}
	}
}

// readLine reads the rest of a line, without its newline; held learns
// the bytes it took.
func readLine(r *bufio.Reader, held *int64) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if err == nil {
			chunk = chunk[:len(chunk)-1]
		}
		if len(line)+len(chunk) >= maxRecordBytes {
			return nil, errLineTooLong()
		}
		line = append(line, chunk...)
		*held = max(*held, int64(cap(line)))
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil, io.EOF:
			return line, nil
		default:
			return nil, err
		}
	}
}
