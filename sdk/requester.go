package sdk

import "context"

type requesterKey struct{}

// WithRequester returns a context under which the client records who as
// the requester of what it asks (cancel_requested, compensation_requested
// and task_requeued carry it as "by") instead of its Identity: a server
// acting for many callers names each one (say "api:deploy-bot").
func WithRequester(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, requesterKey{}, who)
}

// requester is who asks, under ctx: WithRequester's, else the client's
// Identity.
func (c *Client) requester(ctx context.Context) string {
	if who, ok := ctx.Value(requesterKey{}).(string); ok && who != "" {
		return who
	}
	return c.identity
}
