package pgstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
)

// BenchmarkTaskStartBoundedKeyed measures a keyed start into a bounded
// queue: the queue's row locked, the key looked up, the waiting tasks
// counted, the insert, in one transaction.
func BenchmarkTaskStartBoundedKeyed(b *testing.B) {
	ctx := context.Background()
	s := enginetest.Store(b)
	if err := s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "default", MaxWaiting: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		params := (&enginetest.TaskOpts{IdempotencyKey: "k" + strconv.Itoa(i)}).Params()
		if _, err := s.TaskStart(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
}
