package intake_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/cairnflow/cairn/engine/enginetest"
)

// TestMain fails the test binary if any test leaves a goroutine running:
// the example's worker, its notifier and rescuer, and the simulated
// reviewer's answers must all have stopped by the end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, enginetest.LeakOptions()...)
}
