package main

import (
	"context"
	"encoding/json"
	"github.com/cairnflow/cairn/sdk"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/s3test"
)

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "1d12h": 36 * time.Hour, "36h": 36 * time.Hour, "90s": 90 * time.Second, "0": 0, "0d": 0,
	} {
		got, err := parseRetention(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "d", "-1d", "1.5d", "30 days", "-5m", "1d-2h", "x", "65535d1000000h"} {
		_, err := parseRetention(bad)
		require.Error(t, err, "%q is refused", bad)
	}
	require.Equal(t, "30d", retentionText(30*24*time.Hour))
	require.Equal(t, "36h0m0s", retentionText(36*time.Hour))
	require.Equal(t, "default", retentionText(0))
}

// cairn namespace set and list, on both stores: settings round trip, bad
// values are refused with a message and change nothing.
func TestNamespaceCommands(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			out, _ := tg.mustRun(t, "namespace", "set", "tenant-a", "--retention", "30d", "--key-retention", "36h")
			require.Equal(t, "namespace tenant-a: retention 30d, key retention 36h0m0s, archive default\n", out)
			_, stderr, err := tg.run(t, "namespace", "set", "tenant-a", "--retention", "-2d")
			require.Error(t, err)
			require.Contains(t, stderr+err.Error(), "days are a whole number")
			_, _, err = tg.run(t, "namespace", "set", "bad name!", "--retention", "1d")
			require.Error(t, err, "a bad namespace name is refused")

			out, _ = tg.mustRun(t, "namespace", "list")
			require.Contains(t, out, "tenant-a   30d        36h0m0s        -                default")
			out, _ = tg.mustRun(t, "namespace", "set", "tenant-a", "--key-retention", "36h")
			require.Equal(t, "namespace tenant-a: retention 30d, key retention 36h0m0s, archive default\n", out,
				"a flag not given keeps its setting")
			out, _ = tg.mustRun(t, "namespace", "list", "-o", "json")
			var views []namespaceView
			require.NoError(t, json.Unmarshal([]byte(out), &views), out)
			require.Equal(t, []namespaceView{{Name: "tenant-a", RetentionSeconds: 30 * 86400, KeyRetentionSeconds: 36 * 3600}}, views)

			out, _ = tg.mustRun(t, "namespace", "set", "tenant-a", "--type-retention", "report.render=7d", "--type-retention", "ocr.page=90s")
			require.Equal(t, "namespace tenant-a: retention 30d, key retention 36h0m0s, archive default, types ocr.page=1m30s report.render=7d\n", out)
			out, _ = tg.mustRun(t, "namespace", "set", "tenant-a", "--type-retention", "ocr.page=default")
			require.Equal(t, "namespace tenant-a: retention 30d, key retention 36h0m0s, archive default, types report.render=7d\n", out,
				"TYPE=default removes one, the others stay")
			out, _ = tg.mustRun(t, "namespace", "list")
			require.Contains(t, out, "report.render=7d")
			_, stderr, err = tg.run(t, "namespace", "set", "tenant-a", "--type-retention", "report.render")
			require.Error(t, err)
			require.Contains(t, stderr+err.Error(), "use TYPE=DURATION")
			_, stderr, err = tg.run(t, "namespace", "set", "tenant-a", "--type-retention", "report.render=-1d")
			require.Error(t, err)
			require.Contains(t, stderr+err.Error(), "is not a positive duration")
		})
	}
}

// cairn task history reads a task retention archived and removed, the
// same JSON as before; cairn audit --archive searches the archive. On both
// stores, each with both kinds of archive: a namespace's own on an
// S3-protocol server, and the default directory (the embedded store's
// <db>.archive beside its file, --default-archive with PostgreSQL).
func TestArchivedTasksThroughTheCLI(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			if name == "postgres" {
				tg.flags = append(tg.flags, "--default-archive", t.TempDir())
			}
			s3 := s3test.Start(t, "archive", "cli")
			for _, own := range []string{"", s3} {
				id := seedTasks(t, tg, 1)[0]
				tg.withStore(t, func(s store.Store) { completeAll(t, s, "clitest") })
				before, _ := tg.mustRun(t, "task", "history", id.String(), "-o", "json")
				args := []string{"namespace", "set", "clitest", "--retention", "1ms"}
				if own != "" {
					args = append(args, "--archive", own)
				}
				out, _ := tg.mustRun(t, args...)
				require.Contains(t, out, "archive "+archiveText(own))
				defaultArchive := ""
				if name == "postgres" {
					defaultArchive = "file://" + filepath.ToSlash(tg.flags[len(tg.flags)-1])
				} else {
					defaultArchive = "file://" + filepath.ToSlash(tg.flags[2]) + ".archive"
				}
				tg.withStore(t, func(s store.Store) { runRetention(t, s, defaultArchive, id) })
				_, _, err := tg.run(t, "task", "show", id.String())
				require.Error(t, err, "the task is removed")
				after, _ := tg.mustRun(t, "task", "history", id.String(), "-o", "json")
				require.Equal(t, before, after, "the archived history, as it was")

				out, _ = tg.mustRun(t, "audit", "--archive", "--since", "1h", `event.type == "task_completed"`, "-o", "json")
				require.Contains(t, out, id.String())
				out, _ = tg.mustRun(t, "audit", "--since", "1h", `event.type == "task_completed"`, "-o", "json")
				require.NotContains(t, out, id.String(), "the database no longer has it")
			}
			_, _, err := tg.run(t, "namespace", "set", "clitest", "--archive", "s3://")
			require.ErrorContains(t, err, "s3://bucket/prefix")
		})
	}
}

// completeAll claims and completes every due task of namespace.
func completeAll(t *testing.T, s store.Store, namespace string) {
	t.Helper()
	ctx := context.Background()
	claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: namespace, Queues: []string{"default"},
		Types: []store.TypeKey{{Type: "cli.test", Version: 1}}, Owner: "w", Max: 100, LeaseTTL: time.Minute})
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	for _, c := range claimed {
		_, err := s.EventAppend(ctx, &store.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
			Attempt: c.State.Attempt, Payloads: []history.Payload{history.TaskCompletedData{Output: []byte(`{"ok":true}`)}}})
		require.NoError(t, err)
	}
}

// runRetention runs a leader pass until task id is removed.
func runRetention(t *testing.T, s store.Store, defaultArchive string, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	r, err := sdk.NewMaintainer(sdk.MaintainerConfig{Store: s, Owner: "leader", Interval: 20 * time.Millisecond,
		Logger: enginetest.Logger(t), DefaultArchive: defaultArchive})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	defer r.Stop()
	enginetest.WaitFor(t, "the task removed", func() bool {
		_, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "clitest", ID: id})
		return err != nil
	})
}
