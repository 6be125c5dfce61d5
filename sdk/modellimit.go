package sdk

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ModelLimit is a rate limit on a model (or on a provider key: whatever
// name steps give in their Spend.Model), shared by every worker on the
// database: over any 60 seconds, the steps admitted may declare at most
// TokensPerMinute tokens and make at most RequestsPerMinute requests
// (one a step). A zero rate leaves its dimension unlimited; at least
// one is set. Bounds: TokensPerMinute 0 to 10^12
// ([MaxModelTokensPerMinute]), RequestsPerMinute 0 to 10^7
// ([MaxModelRequestsPerMinute]); a namespace holds up to 1,000 limits.
//
// A step that declares a Spend naming the model (workflow.StepOpts.Spend)
// is admitted when the tokens admitted in the last 60 seconds plus its
// Spend.Tokens fit, and it is its turn: waiting steps take turns round
// robin across fairness keys (StartOpts.FairnessKey), first come first
// served within one. Until then it waits, holding its worker slot. Once
// it ran, the tokens it reported for the model
// (activities.RecordUsage: input plus output) replace its reservation,
// so over any 60 seconds the tokens steps spent stay under the limit
// but for what steps still running when others were admitted spent
// over their declared Spend. See docs/model-limits.md.
type ModelLimit struct {
	TokensPerMinute   int64
	RequestsPerMinute int64
}

// ModelLimitInfo is a model's limit as [Client.ModelLimits] lists it.
type ModelLimitInfo struct {
	Model string
	ModelLimit
	UpdatedAt time.Time
}

// The bounds of a [ModelLimit].
const (
	MaxModelTokensPerMinute   = store.MaxModelTokensPerMinute
	MaxModelRequestsPerMinute = store.MaxModelRequestsPerMinute
)

// SetModelLimit sets (makes or replaces) the rate limit of model in the
// client's namespace. Workers apply it within a second. A model name is
// 1 to 200 bytes; limits out of bounds are [ErrInvalid].
func (c *Client) SetModelLimit(ctx context.Context, model string, limit ModelLimit) error {
	p := &store.ModelLimitSetParams{Namespace: c.namespace, Model: model, TokensPerMinute: limit.TokensPerMinute,
		RequestsPerMinute: limit.RequestsPerMinute}
	if err := validateModelLimit(p); err != nil {
		return err
	}
	return errors.Wrapf(c.store.ModelLimitSet(ctx, p), "set model limit %s", model)
}

// validateModelLimit says what is wrong with p in the SDK's words,
// marked [ErrInvalid].
func validateModelLimit(p *store.ModelLimitSetParams) error {
	switch {
	case p.Model == "" || len(p.Model) > history.MaxSpendModelBytes:
		return errmark.Mark(errors.Newf("model limit: a model name is 1 to %d bytes", history.MaxSpendModelBytes), ErrInvalid)
	case p.TokensPerMinute < 0 || p.TokensPerMinute > MaxModelTokensPerMinute:
		return errmark.Mark(errors.Newf("model limit %s: TokensPerMinute %d is outside 0..%d", p.Model, p.TokensPerMinute,
			int64(MaxModelTokensPerMinute)), ErrInvalid)
	case p.RequestsPerMinute < 0 || p.RequestsPerMinute > MaxModelRequestsPerMinute:
		return errmark.Mark(errors.Newf("model limit %s: RequestsPerMinute %d is outside 0..%d", p.Model, p.RequestsPerMinute,
			MaxModelRequestsPerMinute), ErrInvalid)
	case p.TokensPerMinute == 0 && p.RequestsPerMinute == 0:
		return errmark.Mark(errors.Newf("model limit %s: set TokensPerMinute, RequestsPerMinute or both (0 leaves one unlimited)", p.Model), ErrInvalid)
	}
	if err := p.Validate(); err != nil {
		return errmark.Mark(err, ErrInvalid)
	}
	return nil
}

// ModelLimits lists the model limits of the client's namespace, by model.
func (c *Client) ModelLimits(ctx context.Context) ([]ModelLimitInfo, error) {
	list, err := c.store.ModelLimitList(ctx, &store.ModelLimitListParams{Namespace: c.namespace})
	if err != nil {
		return nil, errors.Wrap(err, "list model limits")
	}
	out := make([]ModelLimitInfo, len(list))
	for i, l := range list {
		out[i] = ModelLimitInfo{Model: l.Model, ModelLimit: ModelLimit{TokensPerMinute: l.TokensPerMinute, RequestsPerMinute: l.RequestsPerMinute},
			UpdatedAt: l.UpdatedAt}
	}
	return out, nil
}

// DeleteModelLimit removes the rate limit of model in the client's
// namespace: its waiting steps run at once. None is [ErrNotFound].
func (c *Client) DeleteModelLimit(ctx context.Context, model string) error {
	if model == "" || len(model) > history.MaxSpendModelBytes {
		return errmark.Mark(errors.Newf("model limit: a model name is 1 to %d bytes", history.MaxSpendModelBytes), ErrInvalid)
	}
	return errors.Wrapf(c.store.ModelLimitDelete(ctx, &store.ModelLimitDeleteParams{Namespace: c.namespace, Model: model}),
		"delete model limit %s", model)
}
