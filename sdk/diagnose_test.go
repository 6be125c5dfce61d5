package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// The diagnosis tests run a workload for one window of a few seconds and
// then diagnose that window: its first half ("then") against its second
// ("now").

// produce starts a task of wf every interval, from now until stop is
// called; stop returns how many it started.
func produce(t *testing.T, c *sdk.Client, wf sdk.WorkflowRef, every time.Duration) (stop func() int) {
	t.Helper()
	done, started := make(chan struct{}), make(chan int, 1)
	go func() {
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		n := 0
		for {
			if _, err := c.StartDynamic(context.Background(), wf, n, nil); err != nil {
				t.Errorf("start task %d: %v", n, err)
			}
			n++
			select {
			case <-done:
				started <- n
				return
			case <-ticker.C:
			}
		}
	}()
	return func() int {
		close(done)
		return <-started
	}
}

// sleepStep is a workflow of one step that takes d.
func sleepStep(name, queue string, d time.Duration) *sdk.Workflow[int, int] {
	return sdk.NewWorkflow(name, 1, func(ctx workflow.Context, in int) (int, error) {
		return workflow.Step(ctx, "work", func(context.Context) (int, error) {
			time.Sleep(d)
			return in, nil
		}, nil)
	}, &sdk.WorkflowOpts{Queue: queue})
}

func diagnose(t *testing.T, c *sdk.Client, queue string, window time.Duration) *store.QueueDiagnosis {
	t.Helper()
	d, err := c.DiagnoseQueue(context.Background(), queue, window)
	require.NoError(t, err)
	raw, err := json.MarshalIndent(d, "", "  ")
	require.NoError(t, err)
	t.Logf("diagnosis: %s", raw)
	return d
}

func causeCodes(d *store.QueueDiagnosis) []string {
	codes := make([]string, len(d.Causes))
	for i, c := range d.Causes {
		codes[i] = c.Code
	}
	return codes
}

// Tasks keep arriving after every worker has stopped: the diagnosis names
// lost consumers first, quoting how many workers there were and are.
func TestDiagnoseQueueNamesLostConsumers(t *testing.T) {
	t.Parallel()
	const window = 4 * time.Second
	// One slot each and tasks of 60ms arriving every 40ms: one worker
	// cannot keep up alone, so both take tasks while they run.
	b := setup(t, sdk.WorkerConfig{Queues: []string{"intake"}, Concurrency: 1})
	wf := sleepStep("intake.scan", "intake", 60*time.Millisecond)
	second := b.newWorker(t, sdk.WorkerConfig{Queues: []string{"intake"}, Concurrency: 1})
	workers := []*sdk.Worker{b.worker, second}
	for _, w := range workers {
		sdk.Register(w, wf)
		startWorker(t, w)
	}
	begin := time.Now()
	stop := produce(t, b.client, wf, 40*time.Millisecond)
	time.Sleep(time.Until(begin.Add(window / 3)))
	for _, w := range workers {
		stopWorker(t, w) // well before the second half begins
	}
	time.Sleep(time.Until(begin.Add(window)))
	stop()

	d := diagnose(t, b.client, "intake", window)
	require.NotEmpty(t, d.Causes, d.Summary)
	lost := d.Causes[0]
	require.Equal(t, store.CauseLostConsumers, lost.Code, "causes: %v", causeCodes(d))
	require.Equal(t, 2, d.Then.Workers, "both workers took tasks in the first half: %v", d.Then.WorkerIDs)
	require.ElementsMatch(t, []string{b.worker.WorkerID(), second.WorkerID()}, d.Then.WorkerIDs)
	require.Zero(t, d.Now.Workers)
	require.Contains(t, lost.Evidence, "live workers: 2 then, 0 now")
	require.Contains(t, lost.Summary, "no worker has taken a task")
	require.Positive(t, d.Now.Inflow, "tasks kept arriving")
	require.Zero(t, d.Now.AttemptsStarted)
	require.Positive(t, d.Depth.Due)
	require.Equal(t, 1.0, lost.Score)
	require.False(t, d.Healthy)
	enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
}

// A type whose every attempt fails transiently loops on retries beside a
// healthy type: the diagnosis names poison retries, the type and its error.
func TestDiagnoseQueueNamesPoisonRetries(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	b := setup(t, sdk.WorkerConfig{Queues: []string{"reports"}, Concurrency: 4})
	good := sleepStep("report.build", "reports", 5*time.Millisecond)
	poison := sdk.NewWorkflow("pdf.parse", 1, func(ctx workflow.Context, in int) (int, error) {
		return workflow.Step(ctx, "parse", func(context.Context) (int, error) {
			err := activities.WithKind(errors.New("pdf service answered 503"), "upstream_unavailable")
			return 0, activities.WithStatus(err, 503)
		}, nil)
	}, &sdk.WorkflowOpts{Queue: "reports", Retry: &activities.RetryPolicy{
		MaxAttempts: 100_000, InitialInterval: 20 * time.Millisecond, Multiplier: 1.5, MaxInterval: 50 * time.Millisecond,
	}})
	sdk.Register(b.worker, good)
	sdk.Register(b.worker, poison)
	startWorker(t, b.worker)
	begin := time.Now()
	for i := range 3 {
		_, err := sdk.Start(context.Background(), b.client, poison, i, nil)
		require.NoError(t, err)
	}
	stop := produce(t, b.client, good, 100*time.Millisecond)
	time.Sleep(time.Until(begin.Add(window)))
	stop()

	d := diagnose(t, b.client, "reports", window)
	require.NotEmpty(t, d.Causes, d.Summary)
	i := indexOfCause(d, store.CausePoisonRetries)
	require.GreaterOrEqual(t, i, 0, "causes: %v", causeCodes(d))
	require.Zero(t, i, "poison retries rank first: %v", causeCodes(d))
	c := d.Causes[i]
	require.Contains(t, c.Summary, "pdf.parse")
	evidence := strings.Join(c.Evidence, "\n")
	require.Contains(t, evidence, "most common failure of pdf.parse: transient kind upstream_unavailable status 503 in step parse")
	require.Contains(t, evidence, "pdf service answered 503")
	require.Greater(t, d.Now.RetryShare, 0.3)
	require.NotContains(t, causeCodes(d), store.CauseLostConsumers)
	stopWorker(t, b.worker)
}

func indexOfCause(d *store.QueueDiagnosis, code string) int {
	for i, c := range d.Causes {
		if c.Code == code {
			return i
		}
	}
	return -1
}

// A steady workload that the worker keeps up with: no cause, healthy.
func TestDiagnoseQueueOfASteadyWorkloadIsHealthy(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	b := setup(t, sdk.WorkerConfig{Queues: []string{"mail"}, Concurrency: 4})
	wf := sleepStep("mail.send", "mail", 5*time.Millisecond)
	sdk.Register(b.worker, wf)
	startWorker(t, b.worker)
	begin := time.Now()
	stop := produce(t, b.client, wf, 50*time.Millisecond)
	time.Sleep(time.Until(begin.Add(window)))
	stop()

	d := diagnose(t, b.client, "mail", window)
	require.Empty(t, d.Causes, "causes of a steady queue: %v", causeCodes(d))
	require.True(t, d.Healthy)
	require.True(t, strings.HasPrefix(d.Summary, "healthy: "), d.Summary)
	require.Equal(t, 1, d.Then.Workers)
	require.Equal(t, 1, d.Now.Workers)
	require.Positive(t, d.Now.Outflow)
	require.Zero(t, d.Now.Retries)
	require.Positive(t, d.Now.Attempts.Count)
	require.Len(t, d.Now.Steps, 1)
	require.Equal(t, "work", d.Now.Steps[0].Step)
	require.GreaterOrEqual(t, d.Now.Steps[0].Duration.P50.Duration(), 5*time.Millisecond, "the step sleeps 5ms")
	stopWorker(t, b.worker)
	enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
}

func TestDiagnoseQueueValidatesItsInputs(t *testing.T) {
	t.Parallel()
	b := setup(t, sdk.WorkerConfig{})
	ctx := context.Background()
	for _, tc := range []struct {
		queue  string
		window time.Duration
		want   string
	}{
		{"", time.Minute, `queue "": must be 1 to 200 characters`},
		{"two words", time.Minute, `queue "two words": use letters, digits`},
		{"q", time.Second, "window 1s must be between 2s and 24h0m0s"},
		{"q", 25 * time.Hour, "window 25h0m0s must be between"},
	} {
		_, err := b.client.DiagnoseQueue(ctx, tc.queue, tc.window)
		require.ErrorContains(t, err, tc.want, fmt.Sprintf("%q over %s", tc.queue, tc.window))
	}
	d, err := b.client.DiagnoseQueue(ctx, "q", sdk.MinDiagnoseWindow)
	require.NoError(t, err)
	require.True(t, d.Healthy, "an unused queue is healthy")
}
