// Package s3test starts an S3-protocol server on loopback for tests: the
// gofakes3 server (an implementation of S3's HTTP API in Go, objects kept in
// memory) behind a real HTTP listener, spoken to through a real S3 client.
package s3test

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"
)

// Start serves an S3 API on 127.0.0.1 with bucket created, until the test
// ends, and returns the archive location of prefix in it
// (s3://bucket/prefix?endpoint=127.0.0.1:port&secure=false). The server
// checks no signature: the credentials the client sends are not verified.
func Start(tb testing.TB, bucket, prefix string) string {
	tb.Helper()
	backend := s3mem.New()
	require.NoError(tb, backend.CreateBucket(bucket))
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	tb.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(tb, err)
	return "s3://" + bucket + "/" + prefix + "?endpoint=" + u.Host + "&secure=false&region=us-east-1"
}
