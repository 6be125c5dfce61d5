// Package bucket keeps objects in a directory or an S3-compatible object
// store, named by a location: file:///absolute/dir, or
// s3://bucket/prefix?endpoint=host:port&secure=false&region=r. Archives
// (engine/internal/archive) and blob stores (payload/offload, and
// retention, which deletes a removed task's objects) both keep their
// objects in buckets, so the code is here, in a leaf both may import: it
// imports no cairn package.
package bucket

import (
	"context"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// Bucket is where objects are kept: a directory or an S3 bucket's prefix.
type Bucket interface {
	// Put writes an object whole (a reader never sees a part of it).
	Put(ctx context.Context, key string, body []byte) error
	// Get reads an object.
	Get(ctx context.Context, key string) ([]byte, error)
	// Open reads an object as it comes.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys under prefix, in order.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes an object (one not there is no error).
	Delete(ctx context.Context, key string) error
	// String names the location, for messages.
	String() string
}

// Open returns the bucket a location names: file:///absolute/dir, or
// s3://bucket/prefix?endpoint=host:port&secure=false&region=r (the
// endpoint defaults to AWS's; credentials come from the environment,
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, never from the location).
func Open(location string) (Bucket, error) {
	u, err := Parse(location)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "file" {
		return &dirBucket{root: filepath.FromSlash(u.Path)}, nil
	}
	return openS3(u)
}

// Parse checks a location (see [Open]) and returns it as a URL. Its
// messages name the location without its query or credentials.
func Parse(location string) (*url.URL, error) {
	u, err := url.Parse(location)
	if err != nil {
		return nil, errors.Newf("archive: %q is not a URL", redact(location))
	}
	shown := redact(location)
	switch u.Scheme {
	case "file":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") || u.RawQuery != "" || u.Fragment != "" || strings.Contains(location, "#") {
			return nil, errors.Newf("archive %q: a directory is file:///absolute/path, with no host, query or fragment", shown)
		}
	case "s3":
		if u.Host == "" {
			return nil, errors.Newf("archive %q: an S3 location is s3://bucket/prefix", shown)
		}
		if u.User != nil {
			return nil, errors.Newf("archive %q: credentials do not belong in the location; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", shown)
		}
		if u.Fragment != "" {
			return nil, errors.Newf("archive %q: no fragment", shown)
		}
		for k, v := range u.Query() {
			if k != "endpoint" && k != "secure" && k != "region" {
				return nil, errors.Newf("archive %q: unknown setting %q (endpoint, secure, region)", shown, k)
			}
			if k == "endpoint" && strings.Contains(strings.Join(v, ""), "/") {
				return nil, errors.Newf("archive %q: endpoint is host:port, without a scheme or path (secure=false for plain HTTP)", shown)
			}
		}
	default:
		return nil, errors.Newf("archive %q: use file:///absolute/dir or s3://bucket/prefix", shown)
	}
	return u, nil
}

// redact is a location for messages: without its query, fragment and
// user information.
func redact(location string) string {
	if i := strings.IndexAny(location, "?#"); i >= 0 {
		location = location[:i]
	}
	if i := strings.Index(location, "://"); i >= 0 {
		if at := strings.LastIndex(location[i+3:], "@"); at >= 0 {
			location = location[:i+3] + location[i+3+at+1:]
		}
	}
	return location
}

// Set opens locations once each and keeps them, so that the writes and
// reads of one process share connections. The zero value is ready; it is
// safe for concurrent use.
type Set struct {
	mu     sync.Mutex
	opened map[string]Bucket
}

// Open returns the bucket of location, opening it on first use.
func (s *Set) Open(location string) (Bucket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.opened[location]; ok {
		return b, nil
	}
	b, err := Open(location)
	if err != nil {
		return nil, err
	}
	if s.opened == nil {
		s.opened = map[string]Bucket{}
	}
	s.opened[location] = b
	return b, nil
}

// CheckNamespace refuses a namespace that is not one path segment: it
// names a folder of a bucket.
func CheckNamespace(namespace string) error {
	if namespace == "" || namespace == "." || namespace == ".." || strings.ContainsAny(namespace, "/\\") {
		return errors.Newf("archive: namespace %q cannot name a folder", namespace)
	}
	return nil
}

// CheckBlobKey refuses a blob key that is not one path segment.
func CheckBlobKey(key string) error {
	if key == "" || key == "." || key == ".." || strings.ContainsAny(key, "/\\\x00") || len(key) > 200 {
		return errors.Newf("blob key %q is not one folder name", key)
	}
	return nil
}

// BlobSuffix ends a blob's object name.
const BlobSuffix = ".blob"

// StoredBlob is the name of blob key of task id of namespace in a blob
// store, <namespace>/blobstore/<key>/<task>.blob: apart from an
// archive's copies (<namespace>/blobs/…), so one bucket can be both and a
// removal's delete never takes an archived copy.
func StoredBlob(namespace string, id uuid.UUID, key string) (string, error) {
	if err := CheckNamespace(namespace); err != nil {
		return "", err
	}
	if err := CheckBlobKey(key); err != nil {
		return "", err
	}
	return namespace + "/blobstore/" + key + "/" + id.String() + BlobSuffix, nil
}
