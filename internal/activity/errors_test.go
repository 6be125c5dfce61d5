package activity_test

import (
	"context"
	stderrors "errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
)

type kindError struct{ kind string }

func (e *kindError) Error() string     { return "kind error " + e.kind }
func (e *kindError) ErrorKind() string { return e.kind }

type statusError struct{ status int }

func (e statusError) Error() string    { return fmt.Sprintf("http %d", e.status) }
func (e statusError) ErrorStatus() int { return e.status }

// bothError has a kind and a status, as an HTTP client error might.
type bothError struct{}

func (bothError) Error() string     { return "too many requests" }
func (bothError) ErrorKind() string { return "rate_limited" }
func (bothError) ErrorStatus() int  { return 429 }

type leafError struct{}

func (*leafError) Error() string { return "leaf" }

func TestDescribe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		err          error
		defaultClass history.Class
		want         history.ErrorInfo
	}{
		{
			name: "PlainTakesDefaultTransient", err: errors.New("boom"), defaultClass: history.Transient,
			want: history.ErrorInfo{ClassifiedBy: "default", Class: history.Transient, Message: "boom"},
		},
		{
			name: "PlainTakesDefaultPermanent", err: errors.New("boom"), defaultClass: history.Permanent,
			want: history.ErrorInfo{ClassifiedBy: "default", Class: history.Permanent, Message: "boom"},
		},
		{
			name: "PermanentMarkWins", err: errors.Wrap(activities.Permanent(errors.New("bad document")), "extract"),
			defaultClass: history.Transient,
			want:         history.ErrorInfo{ClassifiedBy: "mark:permanent", Class: history.Permanent, Message: "extract: bad document"},
		},
		{
			name: "TransientMarkWins", err: errors.Wrap(activities.Transient(errors.New("503")), "extract"),
			defaultClass: history.Permanent,
			want:         history.ErrorInfo{ClassifiedBy: "mark:transient", Class: history.Transient, Message: "extract: 503"},
		},
		{
			// With both marks on the chain, the permanent one wins wherever
			// it sits: refusing to retry is the safe reading of a conflict.
			name: "PermanentWinsOverTransient", err: activities.Transient(errors.Wrap(activities.Permanent(errors.New("bad")), "x")),
			defaultClass: history.Transient,
			want:         history.ErrorInfo{ClassifiedBy: "mark:permanent", Class: history.Permanent, Message: "x: bad"},
		},
		{
			name: "ContextCanceledIsTransient", err: context.Canceled, defaultClass: history.Permanent,
			want: history.ErrorInfo{ClassifiedBy: "rule:interrupted", Class: history.Transient, Message: "context canceled"},
		},
		{
			name: "WrappedContextCanceledIsTransient", err: errors.Wrap(context.Canceled, "call model"),
			defaultClass: history.Permanent,
			want:         history.ErrorInfo{ClassifiedBy: "rule:interrupted", Class: history.Transient, Message: "call model: context canceled"},
		},
		{
			name: "DeadlineExceededIsTransient", err: fmt.Errorf("call model: %w", context.DeadlineExceeded),
			defaultClass: history.Permanent,
			want: history.ErrorInfo{ClassifiedBy: "rule:interrupted", Class: history.Transient, Message: "call model: context deadline exceeded",
				Kind: "context.deadlineExceededError"},
		},
		{
			name: "MarkedCanceledStaysPermanent", err: activities.Permanent(context.Canceled),
			defaultClass: history.Transient,
			want:         history.ErrorInfo{ClassifiedBy: "mark:permanent", Class: history.Permanent, Message: "context canceled"},
		},
		{
			name: "KindFromKindError", err: errors.Wrap(&kindError{kind: "quota_exceeded"}, "call model"),
			defaultClass: history.Transient,
			want: history.ErrorInfo{ClassifiedBy: "default", Class: history.Transient, Message: "call model: kind error quota_exceeded",
				Kind: "quota_exceeded"},
		},
		{
			name: "StatusFromStatusError", err: errors.Wrap(activities.Permanent(statusError{status: 404}), "fetch"),
			defaultClass: history.Transient,
			want: history.ErrorInfo{ClassifiedBy: "mark:permanent", Class: history.Permanent, Message: "fetch: http 404",
				Kind: "activity_test.statusError", Status: 404},
		},
		{
			name: "KindAndStatus", err: fmt.Errorf("send: %w", bothError{}), defaultClass: history.Transient,
			want: history.ErrorInfo{ClassifiedBy: "default", Class: history.Transient, Message: "send: too many requests",
				Kind: "rate_limited", Status: 429},
		},
		{
			name: "KindDefaultsToInnermostType", err: errors.Wrap(errors.Wrap(&leafError{}, "a"), "b"),
			defaultClass: history.Transient,
			want:         history.ErrorInfo{ClassifiedBy: "default", Class: history.Transient, Message: "b: a: leaf", Kind: "*activity_test.leafError"},
		},
		{
			name: "StdlibPlainMessageHasNoKind", err: stderrors.New("plain"), defaultClass: history.Transient,
			want: history.ErrorInfo{ClassifiedBy: "default", Class: history.Transient, Message: "plain"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, activity.Describe(tt.err, tt.defaultClass))
		})
	}
}

func TestDescribeReplacesNUL(t *testing.T) {
	t.Parallel()
	info := activity.Describe(errors.New("bad byte \x00 in page"), history.Transient)
	require.Equal(t, "bad byte \uFFFD in page", info.Message)
}
