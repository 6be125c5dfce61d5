package leadership_test

import (
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"go.uber.org/goleak"
)

// TestMain fails the test binary if any test leaves a goroutine running:
// every service a test starts must have stopped by the end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, enginetest.LeakOptions()...)
}
