package processor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/internal/processor"
	"github.com/cairnflow/cairn/engine/store"
)

// TestInquirerStartStopStress starts and stops inquirers over and over
// while inquiries come in: each is answered once, by one of them (a
// stopped one's hold ends with its lease); a notifier wakes the last,
// whose poll is an hour.
func TestInquirerStartStopStress(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	ctx := context.Background()
	task := enginetest.StartTasks(t, s, 1, nil)[0]
	doc := store.TypeKey{Type: "test", Version: 1}
	var mu sync.Mutex
	answered := map[uuid.UUID]int{}
	handler := func(ctx context.Context, in *store.Inquiry) error {
		err := s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: in.ID, Namespace: in.Namespace, Owner: "w", Answer: []byte(`1`)})
		if err == nil {
			mu.Lock()
			answered[in.ID]++
			mu.Unlock()
		}
		return err
	}
	ask := func(n int) []uuid.UUID {
		var ids []uuid.UUID
		for range n {
			id := uuid.New()
			require.NoError(t, s.InquiryCreate(ctx, &store.InquiryCreateParams{ID: id, Namespace: store.DefaultNamespace, TaskID: task,
				TaskType: doc.Type, TaskVersion: doc.Version, Kind: store.InquiryQuery, Name: "q", Timeout: time.Minute}))
			ids = append(ids, id)
		}
		return ids
	}
	var ids []uuid.UUID
	for i := range 10 {
		ids = append(ids, ask(3)...)
		q, err := processor.NewInquirer(processor.InquirerConfig{Store: s, Namespace: store.DefaultNamespace, Types: []store.TypeKey{doc},
			Handler: handler, WorkerID: fmt.Sprintf("w%d", i), Concurrency: 2, PollInterval: 10 * time.Millisecond, Lease: 50 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, q.Start(ctx))
		q.Stop()
		q.Stop() // idempotent
	}
	n := notifier.New(s, notifier.Opts{})
	require.NoError(t, n.Start(ctx))
	defer n.Stop()
	final, err := processor.NewInquirer(processor.InquirerConfig{Store: s, Notifier: n, Namespace: store.DefaultNamespace,
		Types: []store.TypeKey{doc}, Handler: handler, WorkerID: "final", PollInterval: time.Hour, Lease: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, final.Start(ctx))
	defer final.Stop()
	enginetest.WaitFor(t, "a notifier to listen", n.Listening)
	ids = append(ids, ask(5)...)
	enginetest.WaitFor(t, "every inquiry to be answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) == len(ids)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, answered[id], "inquiry %s answered once", id)
	}
}

// countingTakes counts a store's InquiryTake calls.
type countingTakes struct {
	store.Store
	takes atomic.Int64
}

func (c *countingTakes) InquiryTake(ctx context.Context, p *store.InquiryTakeParams) ([]*store.Inquiry, error) {
	c.takes.Add(1)
	return c.Store.InquiryTake(ctx, p)
}

// While its notifier is live, an inquirer takes when an inquiry is
// announced and otherwise polls no more than once a second, however short
// the worker's PollInterval (which is for its claims): an idle worker's
// takes were as many statements as its claims. It still answers at once.
func TestInquirerPollsSlowlyWhileNotified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	counted := &countingTakes{Store: s}
	task := enginetest.StartTasks(t, s, 1, nil)[0]
	doc := store.TypeKey{Type: "test", Version: 1}
	answered := make(chan uuid.UUID, 1)
	n := notifier.New(s, notifier.Opts{})
	require.NoError(t, n.Start(ctx))
	defer n.Stop()
	enginetest.WaitFor(t, "the notifier to listen", n.Live)
	q, err := processor.NewInquirer(processor.InquirerConfig{Store: counted, Notifier: n, Namespace: store.DefaultNamespace,
		Types: []store.TypeKey{doc}, WorkerID: "w", PollInterval: 5 * time.Millisecond,
		Handler: func(ctx context.Context, in *store.Inquiry) error {
			answered <- in.ID
			return s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: in.ID, Namespace: in.Namespace, Owner: "w", Answer: []byte(`1`)})
		}})
	require.NoError(t, err)
	require.NoError(t, q.Start(ctx))
	defer q.Stop()

	time.Sleep(500 * time.Millisecond) // a hundred polls at PollInterval
	require.LessOrEqual(t, counted.takes.Load(), int64(3), "takes while idle with the notifier live")
	id := uuid.New()
	require.NoError(t, s.InquiryCreate(ctx, &store.InquiryCreateParams{ID: id, Namespace: store.DefaultNamespace, TaskID: task,
		TaskType: doc.Type, TaskVersion: doc.Version, Kind: store.InquiryQuery, Name: "q", Timeout: time.Minute}))
	select {
	case got := <-answered:
		require.Equal(t, id, got)
	case <-time.After(10 * time.Second):
		t.Fatal("the announced inquiry was not taken")
	}
}
