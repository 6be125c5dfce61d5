package sdk_test

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/sdk"
)

var callbackSecret = []byte("0123456789abcdef-test-secret")

func testCallback() sdk.Callback {
	return sdk.Callback{Namespace: "billing", TaskID: uuid.New(), Name: "approve", Wait: 3,
		Expires: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func TestCallbackTokenRoundTrip(t *testing.T) {
	t.Parallel()
	cb := testCallback()
	token, err := sdk.CallbackToken(callbackSecret, cb)
	require.NoError(t, err)
	got, err := sdk.ParseCallbackToken(callbackSecret, token, cb.Expires.Add(-time.Second))
	require.NoError(t, err)
	require.Equal(t, cb, got)

	other, err := sdk.CallbackToken(callbackSecret, sdk.Callback{Namespace: cb.Namespace, TaskID: cb.TaskID, Name: cb.Name, Wait: 4, Expires: cb.Expires})
	require.NoError(t, err)
	require.NotEqual(t, token, other, "each wait has its own token")
	require.NotEqual(t, sdk.CallbackDedupID(token), sdk.CallbackDedupID(other))
	require.Equal(t, sdk.CallbackDedupID(token), sdk.CallbackDedupID(token))
}

func TestCallbackTokenRefused(t *testing.T) {
	t.Parallel()
	cb := testCallback()
	now := cb.Expires.Add(-time.Hour)
	token, err := sdk.CallbackToken(callbackSecret, cb)
	require.NoError(t, err)
	raw, err := base64.RawURLEncoding.DecodeString(token)
	require.NoError(t, err)

	// Flipping any byte (version, expiry, task id, wait, namespace, name,
	// MAC) makes the token invalid.
	for i := range raw {
		tampered := append([]byte(nil), raw...)
		tampered[i] ^= 0x01
		_, err := sdk.ParseCallbackToken(callbackSecret, base64.RawURLEncoding.EncodeToString(tampered), now)
		require.True(t, errors.Is(err, sdk.ErrBadCallbackToken), "byte %d: %v", i, err)
	}
	// A token re-signed with each field changed is not the original.
	for name, change := range map[string]func(*sdk.Callback){
		"namespace": func(c *sdk.Callback) { c.Namespace = "other" },
		"task":      func(c *sdk.Callback) { c.TaskID = uuid.New() },
		"name":      func(c *sdk.Callback) { c.Name = "reject" },
		"wait":      func(c *sdk.Callback) { c.Wait++ },
		"expiry":    func(c *sdk.Callback) { c.Expires = c.Expires.Add(time.Hour) },
	} {
		changed := cb
		change(&changed)
		other, err := sdk.CallbackToken(callbackSecret, changed)
		require.NoError(t, err)
		require.NotEqual(t, token, other, name)
		got, err := sdk.ParseCallbackToken(callbackSecret, other, now)
		require.NoError(t, err)
		require.Equal(t, changed, got, name)
	}
	for name, bad := range map[string]string{
		"empty":     "",
		"not-b64":   "not base64!",
		"short":     base64.RawURLEncoding.EncodeToString([]byte("short")),
		"truncated": token[:len(token)-4],
		"extended":  token + "AA",
	} {
		_, err := sdk.ParseCallbackToken(callbackSecret, bad, now)
		require.True(t, errors.Is(err, sdk.ErrBadCallbackToken), "%s: %v", name, err)
	}
	_, err = sdk.ParseCallbackToken([]byte("another secret of 16+ bytes"), token, now)
	require.True(t, errors.Is(err, sdk.ErrBadCallbackToken), "wrong secret: %v", err)
	require.False(t, errors.Is(err, sdk.ErrCallbackExpired))

	_, err = sdk.ParseCallbackToken(callbackSecret, token, cb.Expires)
	require.True(t, errors.Is(err, sdk.ErrCallbackExpired), "expired: %v", err)
	require.True(t, errors.Is(err, sdk.ErrBadCallbackToken))

	_, err = sdk.CallbackToken([]byte("short"), cb)
	require.True(t, errors.Is(err, sdk.ErrInvalid), "short secret: %v", err)
	_, err = sdk.CallbackToken(callbackSecret, sdk.Callback{Namespace: "billing", Name: "x", Expires: cb.Expires})
	require.True(t, errors.Is(err, sdk.ErrInvalid), "no task: %v", err)
}
