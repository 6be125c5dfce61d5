package server_test

import (
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"go.uber.org/goleak"
)

// TestMain fails the test binary if any test leaves a goroutine running:
// a server's notifier, or a long poll's, after Stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, enginetest.LeakOptions()...)
}
