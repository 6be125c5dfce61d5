package console

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// A task's page listens to its streams: the page holds the streams' box
// and its script, and the console's stream answers the task's chunks
// and events as Server-Sent Events, the finished status last.
func TestTaskPageStreamsLive(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			wf := sdk.NewWorkflow("console.stream", 1, func(ctx workflow.Context, _ int) (int, error) {
				return workflow.Step(ctx, "say", func(ctx context.Context) (int, error) {
					return 2, errorsJoin(activities.Stream(ctx, "tokens", "Hel"), activities.Stream(ctx, "tokens", "lo"))
				}, nil)
			}, nil)
			_, run := runToCompletion(t, ns.Store, wf, 0)
			h := testConsole(t, ns.Store)
			page := getPage(t, h, "/console/tasks/"+run.ID.String())
			require.Contains(t, page, `id="task-streams"`)
			require.Contains(t, page, `data-src="/console/tasks/`+run.ID.String()+`/stream?namespace=default"`)
			require.Contains(t, page, `/console/static/stream.js`)
			events := getPage(t, h, "/console/tasks/"+run.ID.String()+"/stream")
			require.Contains(t, events, "id: 1\nevent: chunk\ndata: {\"seq\":1,\"stream\":\"tokens\",\"attempt\":1,\"position\":0,\"data\":\"Hel\"")
			require.Contains(t, events, "event: end\n")
			require.Contains(t, events, "event: event\n")
			require.Contains(t, events, `event: status`+"\n"+`data: {"status":"completed","finished":true}`)
			require.Contains(t, getPage(t, h, "/console/static/stream.js"), "EventSource")
		})
	}
}

func errorsJoin(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
