package sdk_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
)

// TestRemoteStepStreams: remote workers write their steps' streams under
// their claims, and each outcome closes them as a Go step's are: page 1's
// first claim vanishes (rewound when its lease ends, unrecorded) and its
// second attempt's chunks stand (ended, recorded with the step); page
// 2's first attempt fails (rewound, recorded with the failure) and its
// second writes anew; page 3's first claim is released (rewound) and its
// next claim, under the same attempt, completes (recorded: its chunks
// only). A reader that drops what rewinds void sees exactly the chunks
// of the claims that completed.
func TestRemoteStepStreams(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		sdk.Register(b.worker, remoteOCR)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, remoteOCR, []int{1, 2, 3}, nil)
		require.NoError(t, err)

		write := func(claim string, stream string, datas ...string) {
			t.Helper()
			chunks := make([]sdk.RemoteChunk, len(datas))
			for i, d := range datas {
				chunks[i] = sdk.RemoteChunk{Stream: stream, Data: json.RawMessage(d)}
			}
			_, err := b.client.StreamRemote(ctx, claim, chunks, nil)
			require.NoError(t, err)
		}
		released, vanished, done := false, "", 0
		for done < 3 {
			claims, err := b.client.ClaimRemote(ctx, sdk.RemoteClaimOpts{Queue: "ocr", Worker: "py-1", Max: 3, Wait: 5 * time.Second})
			require.NoError(t, err)
			for _, c := range claims {
				var in page
				require.NoError(t, json.Unmarshal(c.Input, &in))
				out := json.RawMessage(fmt.Sprintf(`{"text":"page %d"}`, in.N))
				switch {
				case in.N == 2 && c.Attempt == 1:
					write(c.Claim, "tokens", `"wrong"`)
					require.NoError(t, b.client.FailRemote(ctx, c.Claim, sdk.RemoteFailure{Message: "ocr backend unavailable", Class: "transient"}, nil))
				case in.N == 3 && !released:
					released = true
					write(c.Claim, "tokens", `"handed "`, `"back"`)
					require.NoError(t, b.client.ReleaseRemote(ctx, c.Claim, nil))
				case in.N == 1 && vanished == "":
					vanished = c.Claim
					write(c.Claim, "tokens", `"lost"`)
				default:
					write(c.Claim, "tokens", `"page "`, fmt.Sprintf(`"%d"`, in.N))
					write(c.Claim, "progress", `{"done":1,"total":1}`)
					require.NoError(t, b.client.CompleteRemote(ctx, c.Claim, out, nil))
					done++
				}
			}
		}
		_, err = run.Result(ctx)
		require.NoError(t, err)
		_, err = b.client.StreamRemote(ctx, vanished, []sdk.RemoteChunk{{Stream: "tokens", Data: json.RawMessage(`"late"`)}}, nil)
		require.ErrorIs(t, err, sdk.ErrClaimLost, "a claim whose lease ended writes no more")

		// What a reader shows: chunks by stream, attempt and position,
		// dropped at a rewind, kept at an end.
		type key struct {
			stream            string
			attempt, position int
		}
		shown, ended := map[key]string{}, map[key]bool{}
		for item, err := range b.client.Stream(ctx, run.ID, 0, nil) {
			require.NoError(t, err)
			k := key{item.Stream, item.Attempt, item.Position}
			switch item.Kind {
			case sdk.StreamChunk:
				require.False(t, ended[k], "no chunk after its stream ended")
				shown[k] += item.Text()
			case sdk.StreamRewind:
				delete(shown, k)
			case sdk.StreamEnd:
				ended[k] = true
			}
		}
		require.Equal(t, map[key]string{
			{"tokens", 2, 0}: "page 1", {"progress", 2, 0}: "",
			{"tokens", 2, 1}: "page 2", {"progress", 2, 1}: "",
			{"tokens", 1, 2}: "page 3", {"progress", 1, 2}: "",
		}, shown)
		require.Len(t, ended, 6)

		events, err := b.client.History(ctx, run.ID)
		require.NoError(t, err)
		digest := func(chunks ...string) string {
			h := sha256.New()
			for _, c := range chunks {
				h.Write([]byte(c + "\n"))
			}
			return hex.EncodeToString(h.Sum(nil))
		}
		var records []history.StreamClosedData
		for _, e := range events {
			switch d := e.Data.(type) {
			case history.RemoteStepCompletedData:
				records = append(records, d.Streams...)
			case history.RemoteStepFailedData:
				if d.Error.Kind == "heartbeat_timeout" {
					require.Empty(t, d.Streams, "a lost claim's streams are rewound unrecorded")
				}
				records = append(records, d.Streams...)
			}
		}
		require.ElementsMatch(t, []history.StreamClosedData{
			{Name: "tokens", Position: 0, Chunks: 2, Bytes: 10, Digest: digest(`"page "`, `"1"`), Outcome: history.StreamCompleted},
			{Name: "progress", Position: 0, Chunks: 1, Bytes: 20, Digest: digest(`{"done":1,"total":1}`), Outcome: history.StreamCompleted},
			{Name: "tokens", Position: 1, Chunks: 1, Bytes: 7, Digest: digest(`"wrong"`), Outcome: history.StreamRewound},
			{Name: "tokens", Position: 1, Chunks: 2, Bytes: 10, Digest: digest(`"page "`, `"2"`), Outcome: history.StreamCompleted},
			{Name: "progress", Position: 1, Chunks: 1, Bytes: 20, Digest: digest(`{"done":1,"total":1}`), Outcome: history.StreamCompleted},
			{Name: "tokens", Position: 2, Chunks: 2, Bytes: 10, Digest: digest(`"page "`, `"3"`), Outcome: history.StreamCompleted},
			{Name: "progress", Position: 2, Chunks: 1, Bytes: 20, Digest: digest(`{"done":1,"total":1}`), Outcome: history.StreamCompleted},
		}, records)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
