package sdk

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/celenv"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ErrFilterTooExpensive marks the error of a filtered call ([Client.List],
// [Client.ListPage], [Client.DeadLetters], [Client.RetryDeadLetters],
// [Client.Audit]) that stopped because its filter went over one of the
// client's [FilterLimits]; errors.As finds a [*FilterLimitError] saying
// which. It is never returned for a call without a filter.
var ErrFilterTooExpensive = errors.New("filter too expensive")

// FilterLimits bound the work one filtered call may make the client do, so
// that a filter sent by a caller (through the HTTP API, say) cannot hold a
// core or the memory of the process. Each applies to one call, across
// every row it evaluates the filter on; zero fields take the defaults.
type FilterLimits struct {
	// Timeout bounds the time a call spends reading rows and evaluating the
	// filter on them (not the time its caller takes with what it is
	// handed). Default [DefaultFilterTimeout].
	Timeout time.Duration
	// Cost bounds the CEL cost of all of a call's evaluations together.
	// Each evaluation is bounded too, by [FilterEvalCostLimit]. Default
	// [DefaultFilterCost].
	Cost uint64
	// MaxScan bounds the rows a call reads to evaluate the filter on.
	// A page of [Client.ListPage] reads at most 10,000 and then ends,
	// setting Next, so MaxScan below that shortens its pages; dead-letter
	// and audit calls stop with [ErrFilterTooExpensive]. Default
	// [DefaultFilterScan].
	MaxScan int
}

// The defaults of [FilterLimits], and the bound of one evaluation.
const (
	DefaultFilterTimeout = 2 * time.Second
	DefaultFilterCost    = 10_000_000
	DefaultFilterScan    = 100_000
	// FilterEvalCostLimit bounds the CEL cost of one evaluation of a
	// filter on one row: roughly one unit per operation, one per
	// character a string function reads or makes.
	FilterEvalCostLimit = 1_000_000
)

// withDefaults fills the zero fields.
func (l FilterLimits) withDefaults() FilterLimits {
	if l.Timeout <= 0 {
		l.Timeout = DefaultFilterTimeout
	}
	if l.Cost == 0 {
		l.Cost = DefaultFilterCost
	}
	if l.MaxScan <= 0 {
		l.MaxScan = DefaultFilterScan
	}
	return l
}

// validate refuses limits no call could work under.
func (l FilterLimits) validate() error {
	if l.Timeout < 0 || l.MaxScan < 0 {
		return errors.Newf("FilterLimits: Timeout %s and MaxScan %d must not be negative (zero takes the default)", l.Timeout, l.MaxScan)
	}
	return nil
}

// The limits a [FilterLimitError] names.
const (
	FilterLimitEvalCost = "evaluation cost" // one evaluation went over FilterEvalCostLimit
	FilterLimitCost     = "cost"            // the call's evaluations went over FilterLimits.Cost
	FilterLimitTime     = "time"            // FilterLimits.Timeout passed
	FilterLimitScan     = "rows scanned"    // the call read FilterLimits.MaxScan rows
)

// FilterLimitError says which of the [FilterLimits] stopped a filtered
// call. It is marked [ErrFilterTooExpensive].
type FilterLimitError struct {
	// Limit is what was exceeded: FilterLimitEvalCost, FilterLimitCost,
	// FilterLimitTime or FilterLimitScan.
	Limit string
	// Max is the limit's value: a cost, a duration ("2s") or a row count.
	Max string
	// Scanned counts the rows read before the call stopped; Spent the CEL
	// cost of its evaluations.
	Scanned int
	Spent   uint64
	// Reached, for an audit, is the time of the last event read: the
	// audit may go on from there (since).
	Reached time.Time
}

func (e *FilterLimitError) Error() string {
	var what string
	switch e.Limit {
	case FilterLimitEvalCost:
		what = "one evaluation went over (or was about to, making a long string) the cost limit of " + e.Max
	case FilterLimitCost:
		what = "the evaluations went over the request's cost budget of " + e.Max
	case FilterLimitTime:
		what = "reading and evaluating went over the request's deadline of " + e.Max
	case FilterLimitScan:
		what = "the request read its limit of " + e.Max + " rows"
	default:
		what = e.Limit + " over " + e.Max
	}
	msg := fmt.Sprintf("filter too expensive: %s (%d rows read, cost %d)", what, e.Scanned, e.Spent)
	if !e.Reached.IsZero() {
		msg += "; events were read up to " + e.Reached.UTC().Format(time.RFC3339Nano)
	}
	return msg
}

// errFilterTimeout is the cause a filtered call's context ends with when
// FilterLimits.Timeout passes.
var errFilterTimeout = errors.New("filter timeout")

// filterBudget is what one filtered call has left. One goroutine, the
// call's, owns it.
type filterBudget struct {
	limits  FilterLimits
	used    time.Duration // reading and evaluating so far
	spent   uint64        // CEL cost so far
	scanned int           // rows read so far
	reached time.Time     // an audit's last event time
}

func (c *Client) newFilterBudget() *filterBudget {
	return &filterBudget{limits: c.filterLimits}
}

// page starts a stretch of reading and evaluating: its context ends with
// the caller's or when the time left runs out; done ends the stretch and
// counts its time.
func (b *filterBudget) page(ctx context.Context) (context.Context, func()) {
	started := time.Now()
	pageCtx, cancel := context.WithTimeoutCause(ctx, b.limits.Timeout-b.used, errFilterTimeout)
	return pageCtx, func() {
		cancel()
		b.used += time.Since(started)
	}
}

// scan counts a row read: past MaxScan it returns the error that stops the
// call.
func (b *filterBudget) scan() error {
	if b.scanned >= b.limits.MaxScan {
		return b.exceeded(FilterLimitScan, strconv.Itoa(b.limits.MaxScan))
	}
	b.scanned++
	return nil
}

// evaluated counts an evaluation that cost spent and returned err: the
// error returned, if any, stops the call; a filter error of the row alone
// (a label it lacks) does not.
func (b *filterBudget) evaluated(ctx context.Context, spent uint64, err error) error {
	b.spent += spent
	switch {
	case err != nil && errors.Is(err, celenv.ErrCostLimit):
		return b.exceeded(FilterLimitEvalCost, strconv.Itoa(FilterEvalCostLimit))
	case ctx.Err() != nil:
		return b.interrupted(ctx, err)
	case b.spent > b.limits.Cost:
		return b.exceeded(FilterLimitCost, strconv.FormatUint(b.limits.Cost, 10))
	}
	return nil
}

// interrupted is the error of a call whose page context ended during err:
// over the deadline, or the caller's own.
func (b *filterBudget) interrupted(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errFilterTimeout) {
		return b.exceeded(FilterLimitTime, b.limits.Timeout.String())
	}
	if err == nil {
		err = context.Cause(ctx)
	}
	return errmark.Mark(err, context.Cause(ctx))
}

// readErr is the error of a read that failed under the page context.
func (b *filterBudget) readErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return b.interrupted(ctx, err)
	}
	return err
}

func (b *filterBudget) exceeded(limit, value string) error {
	return errmark.Mark(errors.WithHint(
		&FilterLimitError{Limit: limit, Max: value, Scanned: b.scanned, Spent: b.spent, Reached: b.reached},
		"narrow the rows the filter runs on (type, queue, status, a shorter since/until) and keep it simple: no nested comprehensions over long lists, no format or join building long strings"),
		ErrFilterTooExpensive)
}
