package engine_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the test binary if any test leaves a goroutine running:
// every service a test starts must have stopped by the end. The shared test
// pool lives as long as the binary, and testcontainers (used when no
// CAIRN_TEST_DATABASE_URL is set) keeps its reaper connection and Docker
// client connections open.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}
