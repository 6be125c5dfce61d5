package activities_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestNewPolicyRejectsBadPolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr string
		want       []string // each must appear in the error
	}{
		{name: "syntax", expr: "error.status == 429 ||", want: []string{`policy "syntax"`, "1:"}},
		{name: "unknown-field", expr: "error.sttus >= 500", want: []string{`policy "unknown-field"`, "sttus", "1:6"}},
		{name: "unknown-variable", expr: "status >= 500", want: []string{"undeclared reference", "status"}},
		{name: "wrong-type", expr: "error.status + 1", want: []string{"returns int", "bool"}},
		{name: "type-mismatch", expr: `error.status == "429"`, want: []string{"no matching overload"}},
		{
			// Every pair of attributes against a regular expression built
			// from them, over the whole message: far over the cost limit.
			name: "over-cost",
			expr: `error.attrs.all(k, error.attrs.all(v, error.message.matches(k + v) || error.message.contains(k + v)))`,
			want: []string{`policy "over-cost"`, "may cost up to", "over the limit"},
		},
		{name: "", expr: "true", want: []string{"name must be"}},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.expr, func(t *testing.T) {
			t.Parallel()
			p, err := activities.NewPolicy(tt.name, tt.expr)
			require.Error(t, err)
			require.Nil(t, p)
			require.True(t, errors.Is(err, activities.ErrBadPolicy), "not marked ErrBadPolicy: %v", err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	require.Panics(t, func() { activities.MustPolicy("bad", "error.") })
}

func TestPolicyClassifies(t *testing.T) {
	t.Parallel()
	http := activities.MustPolicy("http", "error.status == 429 || error.status >= 500")
	tests := []struct {
		name   string
		policy *activities.Policy
		in     activities.PolicyInput
		want   history.Class
		err    string
	}{
		{name: "429", policy: http, in: statusInput(429), want: history.Transient},
		{name: "503", policy: http, in: statusInput(503), want: history.Transient},
		{name: "400", policy: http, in: statusInput(400), want: history.Permanent},
		{name: "no-status", policy: http, in: activities.PolicyInput{}, want: history.Permanent},
		{
			name:   "string-result",
			policy: activities.MustPolicy("kinds", `error.kind == "rate_limited" ? "transient" : "permanent"`),
			in:     activities.PolicyInput{Error: activities.PolicyError{Kind: "rate_limited"}},
			want:   history.Transient,
		},
		{
			name:   "elapsed-and-attempt",
			policy: activities.MustPolicy("patience", `attempt < 3 && elapsed < duration("1m")`),
			in:     activities.PolicyInput{Attempt: 2, Elapsed: 30 * time.Second},
			want:   history.Transient,
		},
		{
			name:   "elapsed-over",
			policy: activities.MustPolicy("patience", `attempt < 3 && elapsed < duration("1m")`),
			in:     activities.PolicyInput{Attempt: 2, Elapsed: 2 * time.Minute},
			want:   history.Permanent,
		},
		{
			name:   "task-and-step",
			policy: activities.MustPolicy("ocr", `task.type == "doc.ocr" && step.name == "ocr" && task.queue == "gpu"`),
			in: activities.PolicyInput{Task: activities.PolicyTask{Type: "doc.ocr", Queue: "gpu"},
				Step: activities.PolicyStep{Name: "ocr"}},
			want: history.Transient,
		},
		{
			name:   "attrs",
			policy: activities.MustPolicy("provider", `"provider" in error.attrs && error.attrs["provider"] == "openai"`),
			in:     activities.PolicyInput{Error: activities.PolicyError{Attrs: map[string]string{"provider": "openai"}}},
			want:   history.Transient,
		},
		{
			name:   "message",
			policy: activities.MustPolicy("msg", `error.message.lowerAscii().contains("timeout")`),
			in:     activities.PolicyInput{Error: activities.PolicyError{Message: "upstream TIMEOUT after 30s"}},
			want:   history.Transient,
		},
		{
			name:   "missing-key-is-permanent",
			policy: activities.MustPolicy("strict", `error.attrs["provider"] == "openai"`),
			in:     activities.PolicyInput{},
			want:   history.Permanent, err: "no such key",
		},
		{
			name:   "bad-string-is-permanent",
			policy: activities.MustPolicy("typo", `"transiant"`),
			want:   history.Permanent, err: `returned "transiant"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			class, err := tt.policy.Classify(tt.in)
			require.Equal(t, tt.want, class)
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.err)
		})
	}
}

func statusInput(status int) activities.PolicyInput {
	return activities.PolicyInput{Error: activities.PolicyError{Status: status, Message: "http error"}}
}

func TestPolicySeesBoundedInput(t *testing.T) {
	t.Parallel()
	// A message far longer than a policy may read is cut, not refused: the
	// cost limit holds whatever the error says.
	p := activities.MustPolicy("long", `size(error.message) <= 4096 && error.message.startsWith("x")`)
	class, err := p.Classify(activities.PolicyInput{Error: activities.PolicyError{Message: strings.Repeat("x", 1<<20)}})
	require.NoError(t, err)
	require.Equal(t, history.Transient, class)
}

func TestDecide(t *testing.T) {
	t.Parallel()
	p := activities.RetryPolicy{MaxAttempts: 4, InitialInterval: time.Second, Multiplier: 2, MaxInterval: 10 * time.Second,
		Jitter: activities.NoJitter}
	transient := history.ErrorInfo{Class: history.Transient, ClassifiedBy: "default:step"}

	d := p.Decide(transient, 1, 0, rand.Float64)
	require.Equal(t, activities.Decision{Retry: true, Delay: time.Second}, d)
	d = p.Decide(transient, 3, 0, rand.Float64)
	require.Equal(t, activities.Decision{Retry: true, Delay: 4 * time.Second}, d)

	d = p.Decide(transient, 4, 0, rand.Float64)
	require.False(t, d.Retry)
	require.Equal(t, "retries exhausted: attempt 4 of 4 failed", d.Reason)

	d = p.Decide(history.ErrorInfo{Class: history.Permanent, ClassifiedBy: "policy:http"}, 1, 0, rand.Float64)
	require.False(t, d.Retry)
	require.Equal(t, "permanent error (policy:http)", d.Reason)

	hinted := transient
	hinted.RetryAfterMillis = 42_000
	d = p.Decide(hinted, 1, 0, rand.Float64)
	require.Equal(t, activities.Decision{Retry: true, Delay: 42 * time.Second}, d, "a retry-after hint wins over the backoff")

	p.MaxElapsed = 5 * time.Second
	d = p.Decide(transient, 2, 2*time.Second, rand.Float64)
	require.Equal(t, activities.Decision{Retry: true, Delay: 2 * time.Second}, d)
	d = p.Decide(transient, 3, 2*time.Second, rand.Float64)
	require.False(t, d.Retry, "4s of backoff after 2s would start at 6s, over the 5s budget")
	require.Contains(t, d.Reason, "retry budget exhausted")

	equal := activities.RetryPolicy{MaxAttempts: 3, InitialInterval: 8 * time.Second, Multiplier: 2, MaxInterval: time.Minute,
		Jitter: activities.EqualJitter}
	require.Equal(t, 4*time.Second, equal.Backoff(1, func() float64 { return 0 }))
	require.Equal(t, 8*time.Second, equal.Backoff(1, func() float64 { return 1 }))
}

// TestRetryPolicyProperties runs random policies against random error
// sequences, as a worker would: attempts never exceed MaxAttempts, run
// times never go backwards, every delay stays under its ceiling (or is the
// hint), and no attempt is scheduled past the time budget.
func TestRetryPolicyProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		initial := time.Duration(rapid.Int64Range(0, int64(10*time.Second)).Draw(t, "initial"))
		p := activities.RetryPolicy{
			MaxAttempts:     rapid.IntRange(1, 20).Draw(t, "max_attempts"),
			InitialInterval: initial,
			Multiplier:      rapid.Float64Range(1, 5).Draw(t, "multiplier"),
			MaxInterval:     initial + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "max_extra")),
			MaxElapsed:      time.Duration(rapid.Int64Range(0, int64(2*time.Hour)).Draw(t, "max_elapsed")),
			Jitter:          activities.Jitter(rapid.IntRange(0, 2).Draw(t, "jitter")),
		}
		require.NoError(t, p.Validate())
		random := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1)).Float64

		first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		runAt := first
		for attempt := 1; ; attempt++ {
			require.LessOrEqual(t, attempt, p.MaxAttempts, "attempt beyond the maximum")
			failedAt := runAt.Add(time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "duration")))
			info := history.ErrorInfo{Class: history.Transient}
			switch rapid.IntRange(0, 9).Draw(t, "error") {
			case 0:
				info.Class = history.Permanent
			case 1:
				info.RetryAfterMillis = rapid.Int64Range(1, 600_000).Draw(t, "retry_after_ms")
			}
			d := p.Decide(info, attempt, failedAt.Sub(first), random)
			if !d.Retry {
				require.NotEmpty(t, d.Reason)
				return
			}
			require.NotEqual(t, history.Permanent, info.Class, "a permanent error was retried")
			if info.RetryAfterMillis > 0 {
				require.Equal(t, time.Duration(info.RetryAfterMillis)*time.Millisecond, d.Delay)
			} else {
				require.GreaterOrEqual(t, d.Delay, time.Duration(0))
				require.LessOrEqual(t, d.Delay, p.Ceiling(attempt))
			}
			next := failedAt.Add(d.Delay)
			require.False(t, next.Before(runAt), "the next run time went backwards")
			if p.MaxElapsed > 0 {
				require.LessOrEqual(t, next.Sub(first), p.MaxElapsed, "an attempt was scheduled past the budget")
			}
			runAt = next
		}
	})
}

// The policies docs/workflows.md shows compile.
func TestDocumentedPoliciesCompile(t *testing.T) {
	t.Parallel()
	for name, expr := range map[string]string{
		"llm":       `error.status == 429 || error.status == 529 || error.status >= 500 || error.kind == "timeout"`,
		"crm":       `error.status >= 500 && elapsed < duration("1h")`,
		"documents": `error.kind == "bad_document" ? "permanent" : (error.message.contains("connection reset") ? "transient" : "permanent")`,
		"demo-http": "error.status == 429 || error.status >= 500",
	} {
		_, err := activities.NewPolicy(name, expr)
		require.NoError(t, err, name)
	}
}
