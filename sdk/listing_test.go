package sdk_test

import (
	"reflect"
	"testing"

	"github.com/cairnflow/cairn/sdk"
	"github.com/stretchr/testify/require"
)

// A lean listing evaluates task filters without reading payloads, which
// holds while a filter cannot see them. A filter over task.input or
// task.output would need ListPage to read the payloads of the tasks it
// scans (and not count them against the page's byte bound).
func TestTaskFiltersSeeNoPayloads(t *testing.T) {
	typ := reflect.TypeFor[sdk.FilterTask]()
	for i := range typ.NumField() {
		tag := typ.Field(i).Tag.Get("cel")
		require.NotContains(t, []string{"input", "output"}, tag,
			"task.%s: ListPage must read payloads for filters that use it", tag)
	}
}
