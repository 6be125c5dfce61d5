package sdk_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/stretchr/testify/require"
)

// ValidateName accepts exactly what NamePattern matches.
func TestValidateNameIsNamePattern(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(sdk.NamePattern)
	for _, name := range []string{"default", "doc.process", "tenant-a", "e2e_echo:v2", "A", "9", strings.Repeat("n", 200),
		"", strings.Repeat("n", 201), "a b", "a/b", "../tasks/x/cancel?x=", "a?b", "a#b", "a%2Fb", "a@1", ".", "..", ".hidden",
		"-x", "_x", ":x", "résumé", "a\x00", "a\x7f", "a\n", "*"} {
		err := sdk.ValidateName("queue", name)
		require.Equal(t, re.MatchString(name), err == nil, "%q: %v", name, err)
	}
}

// Finding 6: a schedule named like a relative path would have redirected
// the console's pause button to another task's cancel; the sdk refuses
// the name, on either store, and nothing is stored. A namespace is held
// to the same pattern.
func TestScheduleAndNamespaceNamesArePathSafe(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		wf := sdk.NewWorkflow("report.tick", 1, func(ctx workflow.Context, in string) (string, error) { return in, nil }, nil)
		for _, name := range []string{"../tasks/0b6c2f5e-3f1e-4d59-9d7e-6f0a3b1c2d4e/cancel?x=", "a/b", "a#b", ".."} {
			err := b.client.CreateSchedule(ctx, sdk.ScheduleParams{Name: name, Cron: "@daily", Workflow: wf})
			require.ErrorContains(t, err, "schedule name", name)
		}
		schedules, err := b.client.Schedules(ctx)
		require.NoError(t, err)
		require.Empty(t, schedules, "nothing stored")

		_, err = sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), Namespace: "a/b"})
		require.ErrorContains(t, err, "namespace")
	})
}
