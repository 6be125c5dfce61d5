package activities_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

func TestMarksSurviveWrapping(t *testing.T) {
	t.Parallel()
	base := errors.New("upstream said no")

	perm := errors.Wrap(errors.Wrapf(activities.Permanent(base), "step %s", "extract"), "run attempt")
	require.True(t, errors.Is(perm, activities.ErrPermanent))
	require.False(t, errors.Is(perm, activities.ErrTransient))
	require.True(t, errors.Is(perm, base), "marking keeps the original cause")
	require.Equal(t, "run attempt: step extract: upstream said no", perm.Error(), "marks do not change the message")

	trans := errors.WithHint(errors.Wrap(activities.Transient(base), "call model"), "try later")
	require.True(t, errors.Is(trans, activities.ErrTransient))
	require.False(t, errors.Is(trans, activities.ErrPermanent))

	// Marks also survive a standard library wrap.
	std := fmt.Errorf("outer: %w", activities.Permanent(base))
	require.True(t, errors.Is(std, activities.ErrPermanent))

	require.NoError(t, activities.Permanent(nil))
	require.NoError(t, activities.Transient(nil))
	require.False(t, errors.Is(base, activities.ErrPermanent), "marking returns a new error and leaves base alone")
}

func TestRetryPolicyValidate(t *testing.T) {
	t.Parallel()
	valid := activities.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, Multiplier: 2, MaxInterval: time.Minute}
	tests := []struct {
		name    string
		mutate  func(*activities.RetryPolicy)
		wantErr string // "" when valid
	}{
		{name: "Valid", mutate: func(*activities.RetryPolicy) {}},
		{name: "OneAttempt", mutate: func(p *activities.RetryPolicy) { p.MaxAttempts = 1 }},
		{name: "ConstantBackoff", mutate: func(p *activities.RetryPolicy) { p.Multiplier = 1; p.MaxInterval = p.InitialInterval }},
		{name: "NoBackoff", mutate: func(p *activities.RetryPolicy) { p.InitialInterval, p.MaxInterval = 0, 0 }},
		{name: "ZeroAttempts", mutate: func(p *activities.RetryPolicy) { p.MaxAttempts = 0 }, wantErr: "MaxAttempts"},
		{name: "NegativeAttempts", mutate: func(p *activities.RetryPolicy) { p.MaxAttempts = -1 }, wantErr: "MaxAttempts"},
		{name: "NegativeInitial", mutate: func(p *activities.RetryPolicy) { p.InitialInterval = -time.Second }, wantErr: "negative"},
		{name: "NegativeMax", mutate: func(p *activities.RetryPolicy) { p.MaxInterval = -time.Second }, wantErr: "negative"},
		{name: "MultiplierBelowOne", mutate: func(p *activities.RetryPolicy) { p.Multiplier = 0.5 }, wantErr: "Multiplier"},
		{name: "ZeroMultiplier", mutate: func(p *activities.RetryPolicy) { p.Multiplier = 0 }, wantErr: "Multiplier"},
		{name: "NaNMultiplier", mutate: func(p *activities.RetryPolicy) { p.Multiplier = math.NaN() }, wantErr: "Multiplier"},
		{name: "MaxBelowInitial", mutate: func(p *activities.RetryPolicy) { p.MaxInterval = time.Millisecond }, wantErr: "MaxInterval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := valid
			tt.mutate(&p)
			err := p.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.wantErr)
		})
	}
	require.NoError(t, activities.DefaultRetryPolicy.Validate())
}

func TestRetryPolicyCeilingGrowsAndCaps(t *testing.T) {
	t.Parallel()
	p := activities.RetryPolicy{MaxAttempts: 20, InitialInterval: time.Second, Multiplier: 2, MaxInterval: time.Minute}
	want := []time.Duration{
		time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second,
		time.Minute, time.Minute, time.Minute,
	}
	for i, w := range want {
		require.Equal(t, w, p.Ceiling(i+1), "after failed attempt %d", i+1)
	}
	require.Equal(t, time.Minute, p.Ceiling(1000), "the ceiling stays capped however many attempts failed")
	require.Equal(t, time.Second, p.Ceiling(0), "attempt 0 is treated as the first")

	constant := activities.RetryPolicy{MaxAttempts: 5, InitialInterval: 3 * time.Second, Multiplier: 1, MaxInterval: time.Hour}
	for attempt := 1; attempt <= 5; attempt++ {
		require.Equal(t, 3*time.Second, constant.Ceiling(attempt))
	}

	fractional := activities.RetryPolicy{MaxAttempts: 5, InitialInterval: 100 * time.Millisecond, Multiplier: 1.5, MaxInterval: time.Second}
	require.Equal(t, 150*time.Millisecond, fractional.Ceiling(2))
	require.Equal(t, 225*time.Millisecond, fractional.Ceiling(3))

	d := activities.DefaultRetryPolicy
	require.Equal(t, time.Second, d.Ceiling(1))
	require.Equal(t, 5*time.Minute, d.Ceiling(d.MaxAttempts))
}

// Ceiling is documented as capped at MaxInterval, so it must never exceed
// it nor, through float overflow, turn negative; a negative backoff would
// schedule a retry in the past. Every policy here passes Validate.
func TestRetryPolicyCeilingStaysWithinBounds(t *testing.T) {
	t.Parallel()
	policies := []activities.RetryPolicy{
		activities.DefaultRetryPolicy,
		{MaxAttempts: 100, InitialInterval: time.Nanosecond, Multiplier: 10, MaxInterval: 24 * time.Hour},
		{MaxAttempts: 100, InitialInterval: time.Second, Multiplier: 2, MaxInterval: math.MaxInt64}, // "no cap"
		{MaxAttempts: 100, InitialInterval: time.Hour, Multiplier: math.Inf(1), MaxInterval: 1<<53 + 1},
	}
	for _, p := range policies {
		require.NoError(t, p.Validate())
		for _, attempt := range []int{1, 2, 10, 63, 64, 100, 1000} {
			c := p.Ceiling(attempt)
			require.GreaterOrEqual(t, c, time.Duration(0), "%+v attempt %d", p, attempt)
			require.LessOrEqual(t, c, p.MaxInterval, "%+v attempt %d", p, attempt)
		}
	}
}

func TestRetryPolicyBackoffFullJitter(t *testing.T) {
	t.Parallel()
	p := activities.RetryPolicy{MaxAttempts: 10, InitialInterval: time.Second, Multiplier: 2, MaxInterval: 10 * time.Second}
	fixed := func(v float64) func() float64 { return func() float64 { return v } }

	require.Equal(t, time.Duration(0), p.Backoff(3, fixed(0)))
	require.Equal(t, 2*time.Second, p.Backoff(3, fixed(0.5)), "half of the 4s ceiling")
	require.Equal(t, 5*time.Second, p.Backoff(7, fixed(0.5)), "half of the capped 10s ceiling")
	almostOne := math.Nextafter(1, 0)
	require.Less(t, p.Backoff(3, fixed(almostOne)), p.Ceiling(3)+1)

	// A deterministic sequence of draws: every backoff lies in [0, Ceiling].
	var state uint64 = 42
	random := func() float64 { // xorshift64*, mapped to [0, 1)
		state ^= state >> 12
		state ^= state << 25
		state ^= state >> 27
		return float64((state*2685821657736338717)>>11) / (1 << 53)
	}
	distinct := map[time.Duration]bool{}
	for attempt := 1; attempt <= 12; attempt++ {
		for range 50 {
			d := p.Backoff(attempt, random)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, p.Ceiling(attempt))
			distinct[d] = true
		}
	}
	require.Greater(t, len(distinct), 100, "full jitter spreads retries")

	calls := 0
	_ = p.Backoff(1, func() float64 { calls++; return 0.25 })
	require.Equal(t, 1, calls, "one draw per backoff")
}

// A policy that sets only what it means is whole: its zero fields take
// the default policy's, and what it set stays (wrong values too, for
// Validate to refuse).
func TestRetryPolicyWithDefaults(t *testing.T) {
	t.Parallel()
	p := activities.RetryPolicy{MaxAttempts: 3}.WithDefaults()
	require.NoError(t, p.Validate(), "RetryPolicy{MaxAttempts: 3} needs nothing more")
	want := activities.DefaultRetryPolicy
	want.MaxAttempts = 3
	require.Equal(t, want.MaxAttempts, p.MaxAttempts)
	require.Equal(t, want.InitialInterval, p.InitialInterval)
	require.Equal(t, want.Multiplier, p.Multiplier)
	require.Equal(t, want.MaxInterval, p.MaxInterval)

	long := activities.RetryPolicy{InitialInterval: 10 * time.Minute}.WithDefaults()
	require.NoError(t, long.Validate())
	require.Equal(t, 10*time.Minute, long.MaxInterval, "the ceiling is never below the first interval")

	require.Error(t, activities.RetryPolicy{Multiplier: 0.5}.WithDefaults().Validate(), "a value set is kept")
	require.Equal(t, activities.DefaultRetryPolicy, activities.RetryPolicy{}.WithDefaults())
}
