package server_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/server"
	"go.uber.org/goleak"
)

// TestMain fails the test binary if any test leaves a goroutine running
// (a server's notifier, or a long poll's, after Stop), or if any answer a
// test got from a server is not one openapi.yaml describes
// (openapi_check_test.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(described{m}, enginetest.LeakOptions()...)
}

// described runs the tests, then fails the run if the answers of any
// did not match the API's description.
type described struct{ m *testing.M }

func (d described) Run() int {
	code := d.m.Run()
	if violations := server.OpenAPIViolations(); len(violations) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d requests and answers do not match server/openapi.yaml:\n", len(violations))
		for _, v := range violations {
			fmt.Fprintln(os.Stderr, v)
		}
		code = 1
	}
	return code
}
