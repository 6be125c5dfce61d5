package bucket

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// s3Bucket keeps objects in an S3-compatible object store, through
// minio-go (a maintained S3 client that speaks to AWS and to every
// S3-protocol server).
type s3Bucket struct {
	client         *minio.Client
	bucket, prefix string
	location       string
}

func openS3(u *url.URL) (*s3Bucket, error) {
	q := u.Query()
	endpoint, secure := q.Get("endpoint"), q.Get("secure") != "false"
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.EnvMinio{}})
	client, err := minio.New(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: q.Get("region")})
	if err != nil {
		return nil, errors.Wrapf(err, "archive %s", u.Redacted())
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &s3Bucket{client: client, bucket: u.Host, prefix: prefix, location: u.String()}, nil
}

func (s *s3Bucket) String() string { return s.location }

func (s *s3Bucket) Put(ctx context.Context, key string, body []byte) error {
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream"} // a blob's bytes, as they are
	if strings.HasSuffix(key, ".jsonl.gz") {
		opts = minio.PutObjectOptions{ContentType: "application/x-ndjson", ContentEncoding: "gzip"}
	}
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(body), int64(len(body)), opts)
	return err
}

func (s *s3Bucket) Delete(ctx context.Context, key string) error {
	return s.client.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
}

func (s *s3Bucket) Get(ctx context.Context, key string) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = obj.Close() }()
	return io.ReadAll(obj)
}

// Open asks for the object at once, so that an object not there is an
// error here rather than at the first read.
func (s *s3Bucket) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := obj.Stat(); err != nil {
		_ = obj.Close()
		return nil, err
	}
	return obj, nil
}

func (s *s3Bucket) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, obj.Err
		}
		keys = append(keys, strings.TrimPrefix(obj.Key, s.prefix))
	}
	return keys, nil // S3 lists keys in order
}
