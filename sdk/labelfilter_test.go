package sdk_test

import (
	"testing"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// labelCases are filters over labels and what they give on a task labelled
// src=curl, one labelled src="" and one without the label: a missing label
// reads as "", so a comparison is false (or true for !=), never an error;
// has() and in tell a missing label from an empty one.
var labelCases = []struct {
	expr                 string
	curl, empty, missing bool
}{
	{`task.labels["src"] == "curl"`, true, false, false},
	{`task.labels.src == "curl"`, true, false, false},
	{`task.labels["src"] != "curl"`, false, true, true},
	{`task.labels["src"] == ""`, false, true, true},
	{`task.labels["src"].startsWith("c")`, true, false, false},
	{`has(task.labels.src)`, true, true, false},
	{`"src" in task.labels`, true, true, false},
	{`has(task.labels.src) && task.labels.src == ""`, false, true, false},
	{`task.labels.size() == 1`, true, true, false},
	{`task.labels.exists(k, k == "src")`, true, true, false},
	{`task.labels == {"src": "curl"}`, true, false, false},
}

// labelled returns the labels of the three tasks of labelCases.
func labelled() [3]map[string]string {
	return [3]map[string]string{{"src": "curl"}, {"src": ""}, nil}
}

func TestTaskFilterOnAMissingLabelIsFalseNotAnError(t *testing.T) {
	t.Parallel()
	for _, tc := range labelCases {
		f, err := sdk.CompileTaskFilter(tc.expr)
		require.NoError(t, err, tc.expr)
		for i, labels := range labelled() {
			got, err := f.Match(&sdk.TaskInfo{ID: uuid.New(), Type: "t", Status: history.StatusPending, Labels: labels})
			require.NoError(t, err, "%s on %v", tc.expr, labels)
			require.Equal(t, [3]bool{tc.curl, tc.empty, tc.missing}[i], got, "%s on %v", tc.expr, labels)
		}
	}
	// Error attributes are as lenient.
	f, err := sdk.CompileTaskFilter(`error.attrs["region"] == "eu"`)
	require.NoError(t, err)
	got, err := f.Match(&sdk.TaskInfo{ID: uuid.New(), LastError: &history.ErrorInfo{Class: history.Transient, Attrs: map[string]string{"other": "x"}}})
	require.NoError(t, err)
	require.False(t, got)
	got, err = f.Match(&sdk.TaskInfo{ID: uuid.New(), LastError: &history.ErrorInfo{Class: history.Transient, Attrs: map[string]string{"region": "eu"}}})
	require.NoError(t, err)
	require.True(t, got)
}

func TestEventFilterOnAMissingLabelIsFalseNotAnError(t *testing.T) {
	t.Parallel()
	for _, tc := range labelCases {
		f, err := sdk.CompileEventFilter(tc.expr)
		require.NoError(t, err, tc.expr)
		for i, labels := range labelled() {
			got, err := f.Match(&sdk.AuditRecord{
				Event: sdk.AuditEvent{Type: history.TaskScheduled, Seq: 1},
				Task:  sdk.AuditTask{ID: uuid.New(), Type: "t", Labels: labels},
			})
			require.NoError(t, err, "%s on %v", tc.expr, labels)
			require.Equal(t, [3]bool{tc.curl, tc.empty, tc.missing}[i], got, "%s on %v", tc.expr, labels)
		}
	}
}

// BenchmarkTaskFilterOnLabels is the cost of a label filter on a task
// with the label and on one without: go test -bench TaskFilterOnLabels ./sdk.
func BenchmarkTaskFilterOnLabels(b *testing.B) {
	f, err := sdk.CompileTaskFilter(`task.labels["src"] == "curl"`)
	require.NoError(b, err)
	for name, labels := range map[string]map[string]string{"present": {"src": "curl", "team": "ap"}, "missing": {"team": "ap"}} {
		task := &sdk.TaskInfo{ID: uuid.New(), Type: "t", Status: history.StatusPending, Labels: labels}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := f.Match(task); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
