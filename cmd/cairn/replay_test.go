package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/examples/intake"
	"github.com/cairnflow/cairn/history"
)

// seedReplay records two in-flight tasks the demo's code cannot replay:
// a document.process whose first step has another name, and a task of a
// type the binary does not know.
func seedReplay(t *testing.T, tg cliTarget) (diverging, unknown uuid.UUID) {
	t.Helper()
	tg.withStore(t, func(s store.Store) {
		ctx := context.Background()
		for _, typ := range []store.TypeKey{{Type: intake.DocumentType, Version: intake.DocumentVersion}, {Type: "cli.unknown", Version: 1}} {
			res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "clitest",
				Scheduled: history.TaskScheduledData{TaskType: typ.Type, TypeVersion: typ.Version, Queue: "default",
					Input: json.RawMessage(`{"id":"d1","pages":1}`)}})
			require.NoError(t, err)
			claimed, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "clitest", Queues: []string{"default"},
				Types: []store.TypeKey{typ}, Owner: "w1", Max: 1, LeaseTTL: time.Minute})
			require.NoError(t, err)
			require.Len(t, claimed.Tasks, 1)
			ct := claimed.Tasks[0]
			_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: res.ID, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt,
				Payloads: []history.Payload{history.StepCompletedData{Position: 0, Name: "not-in-the-demo", Output: json.RawMessage(`1`)},
					history.TaskReleasedData{WorkerID: "w1", LeaseEpoch: ct.State.Lease.Epoch}}})
			require.NoError(t, err)
			if typ.Type == intake.DocumentType {
				diverging = res.ID
			} else {
				unknown = res.ID
			}
		}
	})
	return diverging, unknown
}

func TestCLIReplay(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			diverging, unknown := seedReplay(t, tg)

			stdout, stderr, code := reported(t, tg, "replay")
			require.Equal(t, exitError, code, stderr)
			require.Contains(t, stdout, diverging.String()+" (document.process@")
			require.Contains(t, stdout, `step 0: recorded not-in-the-demo, called`)
			require.Contains(t, stdout, "1 histories replayed, 1 would not replay", "the demo's types only, unless --type")
			require.Contains(t, stderr, "1 of 1 histories would not replay")

			stdout, _, code = reported(t, tg, "replay", "--type", "cli.unknown", "-o", "json")
			require.Equal(t, exitError, code)
			var res struct {
				Replayed    int `json:"replayed"`
				Divergences []struct {
					TaskID string `json:"task_id"`
					Kind   string `json:"kind"`
				} `json:"divergences"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &res))
			require.Equal(t, 1, res.Replayed)
			require.Equal(t, unknown.String(), res.Divergences[0].TaskID)
			require.Equal(t, "unknown_type", res.Divergences[0].Kind)

			stdout, _, code = reported(t, tg, "replay", "--status", "completed")
			require.Equal(t, 0, code)
			require.Contains(t, stdout, "0 histories replayed, 0 would not replay")

			// The same from a folder of `task history -o json` files.
			dir := t.TempDir()
			out, _ := tg.mustRun(t, "task", "history", diverging.String(), "-o", "json")
			require.NoError(t, os.WriteFile(filepath.Join(dir, diverging.String()+".json"), []byte(out), 0o600))
			stdout, _, code = reported(t, tg, "replay", "--dir", dir)
			require.Equal(t, exitError, code)
			require.Contains(t, stdout, filepath.Join(dir, diverging.String()+".json"))

			for _, args := range [][]string{
				{"replay", "--status", "done"}, {"replay", "--limit", "0"}, {"replay", "--dir", dir, "--type", "x"},
				{"replay", "--dir", filepath.Join(dir, "missing")}, {"replay", "extra"},
			} {
				_, stderr, code := reported(t, tg, args...)
				require.Equal(t, exitConfig, code, "cairn %v: %s", args, stderr)
			}
		})
	}
}

// queue diagnose lists the tasks a worker's deploy check found stranded,
// with the first divergence, and the versions no worker runs.
func TestCLIQueueDiagnoseListsStrandedTasks(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			diverging, unknown := seedReplay(t, tg)
			tg.withStore(t, func(s store.Store) {
				require.NoError(t, s.StrandedReplace(context.Background(), &store.StrandedReplaceParams{Namespace: "clitest",
					Type: intake.DocumentType, Version: intake.DocumentVersion, WorkerID: "w-new",
					Tasks: []store.StrandedTask{{TaskID: diverging, Kind: "step", Position: 0, Recorded: "not-in-the-demo",
						Called: "ocr", Error: "step 0: ..."}}}))
				_, err := s.TaskStart(context.Background(), &store.TaskStartParams{Namespace: "clitest",
					Scheduled: history.TaskScheduledData{TaskType: "cli.orphan", TypeVersion: 3, Queue: "default"}})
				require.NoError(t, err)
			})
			_ = unknown
			out, _ := tg.mustRun(t, "queue", "diagnose", "default", "--window", "10s")
			require.Contains(t, out, "stranded: tasks no running worker will take")
			require.Regexp(t, `document\.process@\d+\s+1\s+\S+\s+the code of w-new cannot replay them: step 0 recorded not-in-the-demo, called ocr`, out)
			require.Regexp(t, `cli\.orphan@3\s+1\s+\S+\s+no worker runs this version`, out)
			out, _ = tg.mustRun(t, "queue", "diagnose", "default", "--window", "10s", "-o", "json")
			var d struct {
				Stranded []struct {
					Type    string   `json:"type"`
					Tasks   int      `json:"tasks"`
					Workers []string `json:"workers"`
				} `json:"stranded"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &d))
			require.Len(t, d.Stranded, 1)
			require.Equal(t, intake.DocumentType, d.Stranded[0].Type)
			require.Equal(t, []string{"w-new"}, d.Stranded[0].Workers)
		})
	}
}
