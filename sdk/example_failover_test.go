package sdk_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/sdk"
)

// Leases sized to a Patroni cluster whose leader key lives 10 s: a node
// lost takes about ttl + loop_wait to fail over, and the worker must ride
// that out with its attempts intact. Start warns when RideOut falls
// short of ExpectedFailover.
func ExampleWorkerConfig_RideOut() {
	cfg := sdk.WorkerConfig{
		LeaseTTL:          30 * time.Second,
		HeartbeatInterval: 5 * time.Second,
		ExpectedFailover:  12 * time.Second, // ttl 10 + loop_wait 2
	}
	fmt.Println("rides out", cfg.RideOut(), "of an expected", cfg.ExpectedFailover)
	fmt.Println("with the defaults:", sdk.WorkerConfig{}.RideOut())
	// Output:
	// rides out 20s of an expected 12s
	// with the defaults: 10s
}

// docs/patroni.md shows lines of the example, in order.
func TestPatroniPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/patroni.md", ".."); err != nil {
		t.Fatal(err)
	}
}
