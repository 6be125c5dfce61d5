package executor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRemoteParent(t *testing.T) {
	t.Parallel()
	taskID := [16]byte{8: 1, 2, 3, 4, 5, 6, 7, 8}
	sc, ok := remoteParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", taskID)
	require.True(t, ok)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", sc.SpanID().String(), "a traceparent names the submitter's span")
	require.True(t, sc.IsSampled())
	require.True(t, sc.IsRemote())

	sc, ok = remoteParent("4bf92f3577b34da6a3ce929d0e0e4736", taskID)
	require.True(t, ok)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, "0102030405060708", sc.SpanID().String(), "a bare trace id gets a parent derived from the task id")

	for _, bad := range []string{
		"",
		"not a trace id",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // wrong separator
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x", // bad flags
		"4bf92f3577b34da6a3ce929d0e0e473g",                        // not hex
	} {
		_, ok := remoteParent(bad, taskID)
		require.False(t, ok, bad)
	}
	_, ok = remoteParent("4bf92f3577b34da6a3ce929d0e0e4736", [16]byte{})
	require.False(t, ok, "a task id whose low half is zero gives no valid parent span id")
}
