package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/examples/intake"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// demoRun runs `demo run -o json` with args and decodes its summary.
func demoRun(t *testing.T, tg cliTarget, args ...string) (intake.Summary, string) {
	t.Helper()
	stdout, stderr := tg.mustRun(t, append([]string{"demo", "run", "-o", "json", "--latency", "2ms"}, args...)...)
	var s intake.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s), "stdout: %s", stdout)
	return s, stderr
}

// requireAccountedFor checks every document finished and the summary's
// counts add up.
func requireAccountedFor(t *testing.T, s intake.Summary, documents int) {
	t.Helper()
	require.Equal(t, documents, s.Documents)
	require.Zero(t, s.Unfinished)
	require.Equal(t, documents, s.Completed+s.Failed+s.DeadLettered, "%+v", s)
	outcomes := 0
	for _, n := range s.Outcomes {
		outcomes += n
	}
	require.Equal(t, s.Completed, outcomes, "every completed document has an outcome: %+v", s.Outcomes)
	a := s.Approvals
	require.Equal(t, a.Asked, a.Approved+a.Rejected+a.TimedOut, "every approval asked was decided: %+v", a)
	require.Equal(t, a.Approved, s.Outcomes[intake.OutcomeApproved])
	require.Equal(t, a.Rejected, s.Outcomes[intake.OutcomeRejected])
	require.Equal(t, a.TimedOut, s.Outcomes[intake.OutcomeManualReview])
	require.Equal(t, s.Completed-a.Asked, s.Outcomes[intake.OutcomeAccepted])
	require.LessOrEqual(t, a.TimedOut, a.Escalated)
	require.Positive(t, s.Pages)
	require.Positive(t, s.LLMTokens)
}

// demoTasks reads every task in the target's namespace with its history.
func demoTasks(t *testing.T, tg cliTarget) (infos []*sdk.TaskInfo, histories map[uuid.UUID][]history.Event) {
	t.Helper()
	tg.withStore(t, func(s store.Store) {
		c, err := sdk.NewClient(sdk.ClientConfig{Store: s, Namespace: "clitest"})
		require.NoError(t, err)
		defer c.Close()
		ctx := context.Background()
		infos, err = c.List(ctx, &sdk.ListOpts{Type: intake.DocumentType, Limit: sdk.MaxListLimit, IncludeOutput: true})
		require.NoError(t, err)
		ids := make([]uuid.UUID, len(infos))
		for i, info := range infos {
			ids[i] = info.ID
		}
		histories, err = s.EventList(ctx, store.EventListAll("", ids...))
		require.NoError(t, err)
	})
	return infos, histories
}

// reviewOf returns what the history says of a task's approval: the steps
// it ran, the decisions it received (their senders) and its waits that
// timed out.
func reviewOf(events []history.Event) (steps []string, senders []string, timeouts int) {
	for _, e := range events {
		switch p := e.Data.(type) {
		case history.StepCompletedData:
			if p.Name == "request_review" || p.Name == "escalate" {
				steps = append(steps, p.Name)
			}
		case history.SignalReceivedData:
			senders = append(senders, p.Sender)
		case history.WaitTimedOutData:
			timeouts++
		}
	}
	return steps, senders, timeouts
}

// `demo run` finishes unattended: the low-confidence documents wait for
// approvals, which the simulated reviewer answers (Client.Signal), and the
// summary counts them; what it says matches the histories. On both stores.
func TestDemoRunAnswersApprovals(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			s, stderr := demoRun(t, tg, "--documents", "40", "--low-confidence", "0.25", "--seed", "42")
			requireAccountedFor(t, s, 40)
			a := s.Approvals
			require.Equal(t, 10, a.Asked, "a quarter of 40 are poor scans, and none is corrupt: %+v", s)
			// How many the reviewer answered within the default 300ms (the
			// others escalated) depends on how fast the machine is, so it is
			// not counted here: TestDemoRunApproveChoices counts the answers,
			// with waits that do not expire; here each decision must agree
			// with its history.
			require.Equal(t, intake.ApproveAuto, s.Approve)
			require.NotContains(t, stderr, "approval needed", "nobody is asked to answer")
			require.Positive(t, s.Retried, "a 10%% failure rate retries some tasks")
			require.GreaterOrEqual(t, s.FailedAttempts, s.Retried)

			infos, histories := demoTasks(t, tg)
			require.Len(t, infos, 40)
			// The documents went in through one batch parent, a child each.
			require.Equal(t, 1, s.Batches.Parents, "%+v", s.Batches)
			require.Equal(t, s.Completed, s.Batches.Completed, "the batch's report agrees with its children")
			require.Equal(t, s.Failed+s.DeadLettered, s.Batches.NotCompleted)
			for _, info := range infos {
				require.NotNil(t, info.ParentID, "document task %s has no batch parent", info.ID)
				require.Equal(t, s.Batches.IDs[0], info.ParentID.String())
			}
			reviewed := 0
			for _, info := range infos {
				require.True(t, info.Status.Terminal(), "task %s is %s", info.ID, info.Status)
				require.Equal(t, intake.DocumentVersion, info.TypeVersion)
				steps, senders, timeouts := reviewOf(histories[info.ID])
				if info.Status != history.StatusCompleted {
					require.Empty(t, steps, "a failed document is not reviewed")
					continue
				}
				var out intake.Extraction
				require.NoError(t, json.Unmarshal(info.Output, &out))
				ocr := 0
				for _, e := range histories[info.ID] {
					if p, ok := e.Data.(history.StepCompletedData); ok && p.Name == "ocr" {
						ocr++
					}
				}
				require.Equal(t, out.Pages, ocr, "task %s: a step a page", info.ID)
				if out.Review == nil {
					require.Equal(t, intake.OutcomeAccepted, out.Outcome)
					require.GreaterOrEqual(t, out.Confidence, intake.ConfidenceThreshold)
					require.Empty(t, steps, "task %s: a confident document asks no one", info.ID)
					continue
				}
				reviewed++
				require.Less(t, out.Confidence, intake.ConfidenceThreshold)
				r := out.Review
				switch {
				case r.TimedOut:
					require.Equal(t, []string{"request_review", "escalate"}, steps)
					require.Equal(t, 2, timeouts, "task %s", info.ID)
					require.Equal(t, intake.OutcomeManualReview, out.Outcome)
					require.Equal(t, workflow.Decision{By: "default", Comment: "no decision"},
						workflow.Decision{Approved: r.Approved, By: r.By, Comment: r.Comment})
				case r.Escalated:
					require.Equal(t, []string{"request_review", "escalate"}, steps)
					require.Equal(t, 1, timeouts, "task %s", info.ID)
					require.Contains(t, senders, "supervisor (simulated)")
					require.Equal(t, "supervisor (simulated)", r.By, "task %s: the reviewer's late answer did not decide", info.ID)
				default:
					require.Equal(t, []string{"request_review"}, steps)
					require.Zero(t, timeouts, "task %s", info.ID)
					require.NotEmpty(t, senders, "task %s", info.ID)
					require.Equal(t, "reviewer (simulated)", senders[0])
					require.Equal(t, "reviewer (simulated)", r.By)
				}
			}
			require.Equal(t, a.Asked, reviewed)
			tg.withStore(t, func(s store.Store) {
				require.Equal(t, 41, enginetest.RequireProjectionsMatch(t, s), "40 documents and their batch")
			})
		})
	}
}

// The other --approve choices: every approval approved, every one
// rejected, or none answered (each escalates, then the default rejects it).
// The simulated reviewer's answers are waited for a minute: what the
// summary counts must not depend on how fast the machine is (a loaded one
// took seconds to send an answer, which then came after the default 300ms
// wait and escalated), only on what the reviewer decides. On both stores.
func TestDemoRunApproveChoices(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		approve string
		args    []string
		want    intake.ApprovalSummary
	}{
		{intake.ApproveAll, []string{"--approval-timeout", "1m"}, intake.ApprovalSummary{Asked: 6, Approved: 6}},
		{intake.ApproveReject, []string{"--approval-timeout", "1m"}, intake.ApprovalSummary{Asked: 6, Rejected: 6}},
		{intake.ApproveTimeout, []string{"--approval-timeout", "50ms"}, intake.ApprovalSummary{Asked: 6, Escalated: 6, TimedOut: 6}},
	} {
		for name, target := range cliTargets {
			t.Run(tc.approve+"/"+name, func(t *testing.T) {
				t.Parallel()
				tg := target(t)
				s, stderr := demoRun(t, tg, append([]string{"--documents", "12", "--low-confidence", "0.5", "--approve", tc.approve}, tc.args...)...)
				requireAccountedFor(t, s, 12)
				require.Equal(t, tc.want, s.Approvals)
				require.NotContains(t, stderr, "simulated reviewer:", "every answer was sent")
			})
		}
	}
	_, _, err := cliTarget{}.run(t, "demo", "run", "--approve", "maybe")
	require.ErrorContains(t, err, `--approve "maybe": use one of auto, approve, reject, timeout, manual`)
}

// waitingForApproval returns the tasks whose workflow waits for the
// approval signal now, and how many tasks have finished.
func waitingForApproval(t *testing.T, tg cliTarget) (waiting []uuid.UUID, finished int) {
	t.Helper()
	infos, histories := demoTasks(t, tg)
	for _, info := range infos {
		if info.Status.Terminal() {
			finished++
			continue
		}
		state, err := history.Replay(histories[info.ID])
		require.NoError(t, err)
		if state.Wait != nil && state.Wait.Name == intake.ApprovalSignal {
			waiting = append(waiting, info.ID)
		}
	}
	return waiting, finished
}

// With --approve manual nobody answers for the person: the low-confidence
// documents wait, and `demo run` with them, until they are answered (here
// with Client.Signal and with cairn task signal); then it finishes and
// counts the decisions. On both stores.
func TestDemoRunManualLeavesApprovalsWaiting(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			type result struct {
				stdout, stderr string
				err            error
			}
			done := make(chan result, 1)
			go func() {
				stdout, stderr, err := tg.run(t, "demo", "run", "-o", "json", "--documents", "6", "--low-confidence", "0.5",
					"--approve", "manual", "--latency", "1ms", "--failure-rate", "0", "--seed", "7")
				done <- result{stdout, stderr, err}
			}()
			var waiting []uuid.UUID
			deadline := time.Now().Add(time.Minute)
			for {
				var finished int
				waiting, finished = waitingForApproval(t, tg)
				if len(waiting) == 3 && finished == 3 {
					break
				}
				require.True(t, time.Now().Before(deadline), "3 documents wait for approval, 3 finished: %d waiting, %d finished", len(waiting), finished)
				time.Sleep(50 * time.Millisecond)
			}
			// Past the simulated reviewer's delay (100ms): nobody answered.
			time.Sleep(300 * time.Millisecond)
			still, _ := waitingForApproval(t, tg)
			require.ElementsMatch(t, waiting, still, "the approvals wait for a person")
			select {
			case r := <-done:
				require.Failf(t, "demo run finished with approvals waiting", "%v\n%s", r.err, r.stderr)
			default:
			}

			tg.withStore(t, func(s store.Store) {
				c, err := sdk.NewClient(sdk.ClientConfig{Store: s, Namespace: "clitest"})
				require.NoError(t, err)
				defer c.Close()
				// The approval is declared: a signal that is not a decision,
				// or of another name, is refused when sent, and the task
				// still waits at its first receive.
				before, err := store.TaskEvents(context.Background(), s, "", waiting[0])
				require.NoError(t, err)
				_, err = c.Signal(context.Background(), waiting[0], intake.ApprovalSignal, json.RawMessage(`{"comment":"which?"}`), nil)
				require.ErrorAs(t, err, new(*sdk.SignalPayloadError))
				_, err = c.Signal(context.Background(), waiting[0], "aproval", workflow.Decision{Approved: true}, nil)
				require.ErrorAs(t, err, new(*sdk.SignalNotDeclaredError))
				after, err := store.TaskEvents(context.Background(), s, "", waiting[0])
				require.NoError(t, err)
				require.Len(t, after, len(before), "refused signals write nothing")
				for _, id := range waiting[:2] {
					_, err := c.Signal(context.Background(), id, intake.ApprovalSignal, workflow.Decision{Approved: true, Comment: "fine"}, &sdk.SignalOpts{Sender: "alice"})
					require.NoError(t, err)
				}
			})
			out, _ := tg.mustRun(t, "task", "signal", waiting[2].String(), intake.ApprovalSignal, "--payload", `{"approved":false,"comment":"blurry"}`)
			require.Contains(t, out, "signal approval sent")

			var r result
			select {
			case r = <-done:
			case <-time.After(time.Minute):
				require.FailNow(t, "demo run did not finish once its approvals were answered")
			}
			require.NoError(t, r.err, "stderr: %s", r.stderr)
			var s intake.Summary
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), "stdout: %s", r.stdout)
			requireAccountedFor(t, s, 6)
			require.Equal(t, intake.ApprovalSummary{Asked: 3, Approved: 2, Rejected: 1}, s.Approvals)
			require.Equal(t, 3, s.Outcomes[intake.OutcomeAccepted])
			require.Equal(t, intake.ApproveManual, s.Approve)
			require.Equal(t, personApprovalTimeout.Seconds(), s.ApprovalTimeout)

			// The person was told, once, how to answer, and of each approval.
			require.Equal(t, 1, strings.Count(r.stderr, "approvals: --approve manual"), r.stderr)
			require.Equal(t, 3, strings.Count(r.stderr, "approval needed: document "), r.stderr)
			for _, id := range waiting {
				require.Contains(t, r.stderr, fmt.Sprintf("task signal %s approval --payload", id))
			}
			infos, _ := demoTasks(t, tg)
			by := map[string]int{}
			for _, info := range infos {
				var out intake.Extraction
				require.NoError(t, json.Unmarshal(info.Output, &out))
				if out.Review != nil {
					by[out.Review.By]++
				}
			}
			require.Equal(t, 2, by["alice"], "%v", by)
			require.Equal(t, 1, by[cliIdentity()], "cairn task signal sends as the CLI's identity: %v", by)
		})
	}
}

// TestDemoRunRemoteOCR: with --remote-ocr the demo's pages are read by
// the Python OCR worker it starts, over the HTTP worker protocol, and
// recorded as remote steps.
func TestDemoRunRemoteOCR(t *testing.T) {
	worker, err := filepath.Abs("../../clients/python/examples/ocr_worker.py")
	require.NoError(t, err)
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			s, stderr := demoRun(t, tg, "--documents", "4", "--low-confidence", "0", "--failure-rate", "0", "--seed", "7",
				"--remote-ocr", "--ocr-worker", worker)
			require.Contains(t, stderr, "started the Python worker")
			requireAccountedFor(t, s, 4)
			_, histories := demoTasks(t, tg)
			pages := 0
			for _, events := range histories {
				for _, e := range events {
					if d, ok := e.Data.(history.RemoteStepCompletedData); ok {
						require.Equal(t, "demo-py", d.Worker)
						require.Equal(t, intake.OCRStep, d.Name)
						pages++
					}
				}
			}
			require.Equal(t, s.Pages, pages, "every page was read by the remote worker")
		})
	}
}
