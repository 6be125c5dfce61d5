package intake

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/sdk"
)

// A signed callback URL is printed for each approval with
// --callback-secret, and it is one the server accepts: sdk.ParseCallbackToken
// reads the task and the signal back.
func TestDemoManualPrintsSignedCallbackURLs(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef-secret")
	var b strings.Builder
	id := uuid.New()
	p := &PersonNotifier{Out: &b, HowTo: "how\n", Signal: "cairn task signal", Namespace: "ns",
		CallbackSecret: secret, CallbackBase: "http://127.0.0.1:7233/"}
	req := ReviewRequest{TaskID: id, DocumentID: "d-1", Kind: "invoice", Reason: "confidence 0.61 below 0.80", Wait: 1, Timeout: time.Minute}
	require.NoError(t, p.Notify(context.Background(), req))
	req.Stage = 1
	require.NoError(t, p.Notify(context.Background(), req))
	out := b.String()
	require.Equal(t, 1, strings.Count(out, "how\n"))
	require.Contains(t, out, "approval needed: document d-1 (invoice), confidence 0.61 below 0.80; task "+id.String()+" waits 1m0s")
	require.Contains(t, out, "escalated: no decision on document d-1")
	// Papercut: the line failed as pasted (415: no Content-Type).
	require.Contains(t, out, "curl -X POST -H 'Content-Type: application/json' 'http://127.0.0.1:7233/v1/callbacks/")
	i := strings.Index(out, "http://127.0.0.1:7233/v1/callbacks/")
	require.Positive(t, i, out)
	token := strings.TrimPrefix(strings.Fields(out[i:])[0], "http://127.0.0.1:7233/v1/callbacks/")
	token = strings.TrimSuffix(token, "?decision=approve'")
	cb, err := sdk.ParseCallbackToken(secret, token, time.Now())
	require.NoError(t, err, "token %q", token)
	require.Equal(t, sdk.Callback{Namespace: "ns", TaskID: id, Name: ApprovalSignal, Wait: 1, Expires: cb.Expires}, cb)
	require.WithinDuration(t, time.Now().Add(2*time.Minute), cb.Expires, 5*time.Second)
}

// An answer the simulated reviewer gives up on, because the task never
// reached the wait it is for, is reported (onError), not dropped: the task
// would still take it. An answer for a wait that has ended (here: the task
// was cancelled) is not reported: the task takes no more.
func TestSimulatedReviewerReportsAnAnswerItGivesUpOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "intake.db"))
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	c, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	defer c.Close()
	// No worker runs: the tasks never reach their wait for approval.
	ids, err := Submit(ctx, c, GenerateDocuments(2, 1, "b", 0))
	require.NoError(t, err)
	require.NoError(t, c.Cancel(ctx, ids[1], "no longer needed"))

	var mu sync.Mutex
	reported := map[uuid.UUID]error{}
	r := NewSimulatedReviewer(c, ApproveAll, 0, func(task uuid.UUID, err error) {
		mu.Lock()
		defer mu.Unlock()
		reported[task] = err
	})
	r.tries, r.retryEvery = 3, time.Millisecond
	for _, id := range ids {
		require.NoError(t, r.Notify(ctx, ReviewRequest{TaskID: id, DocumentID: "b-0001", Stage: 0, Wait: 0}))
	}
	r.wg.Wait() // the answers were sent, or given up on
	r.Stop()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, reported, 1, "%v", reported)
	require.True(t, errors.Is(reported[ids[0]], sdk.ErrWaitNotReached), "%v", reported[ids[0]])
}
