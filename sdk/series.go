package sdk

import (
	"context"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// QueueSeries returns the client's namespace's queues (or only queue,
// when it is not empty) over the window ending now, cut into buckets
// (0: [cairntype.DefaultSeriesBuckets]): at each bucket's end the waiting, due
// and running tasks, and within it the completions, failures, attempts
// and their schedule-to-start latency, folded from the event log. The
// console draws its charts from it. Bad arguments are ErrInvalid.
func (c *Client) QueueSeries(ctx context.Context, queue string, window time.Duration, buckets int) ([]cairntype.QueueSeries, error) {
	p := &store.QueueSeriesParams{Namespace: c.namespace, Queue: queue, Window: window, Buckets: buckets}
	if err := p.Validate(); err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	return c.store.QueueSeries(ctx, p)
}
