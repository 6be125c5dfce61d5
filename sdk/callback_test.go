package sdk_test

import (
	"encoding/base64"
	"strings"
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

// otherSpellings are strings a lenient base64url decoder reads as token's
// bytes: a line break inside (Go's decoder skips '\r' and '\n'), and the
// last character with its unused low bits changed ("…U" for "…V").
func otherSpellings(t *testing.T, token string) map[string]string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	raw, err := base64.RawURLEncoding.DecodeString(token)
	require.NoError(t, err)
	require.NotZero(t, len(raw)%3, "the token must end in a character with unused bits")
	last := strings.IndexByte(alphabet, token[len(token)-1])
	trailing := token[:len(token)-1] + string(alphabet[last^1])
	variants := map[string]string{
		"LF inside":      token[:10] + "\n" + token[10:],
		"CR inside":      token[:10] + "\r" + token[10:],
		"CRLF at end":    token + "\r\n",
		"trailing bits":  trailing,
		"both":           trailing[:5] + "\n" + trailing[5:],
		"line-wrapped":   token[:20] + "\n" + token[20:40] + "\n" + token[40:],
		"leading LF":     "\n" + token,
		"padded":         token + strings.Repeat("=", (4-len(token)%4)%4),
		"standard chars": strings.NewReplacer("-", "+", "_", "/").Replace(token),
	}
	for name, v := range variants {
		if v == token {
			delete(variants, name) // the token has no '-' or '_' to change
			continue
		}
		if name == "padded" || name == "standard chars" {
			continue // not even leniently the same: refused anyway
		}
		got, err := base64.RawURLEncoding.DecodeString(v)
		require.NoError(t, err, name)
		require.Equal(t, raw, got, "%s decodes to the token's bytes", name)
	}
	return variants
}

// A token has one spelling: every other string that a lenient decoder
// reads as its bytes is refused, and all of them share its dedup id, so
// none would be a new signal even if accepted (probe finding F1).
func TestCallbackTokenHasOneSpelling(t *testing.T) {
	t.Parallel()
	cb := sdk.Callback{Namespace: "default", TaskID: uuid.New(), Name: "approve", Wait: 0,
		Expires: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	token, err := sdk.CallbackToken(callbackSecret, cb)
	require.NoError(t, err)
	now := cb.Expires.Add(-time.Hour)
	_, err = sdk.ParseCallbackToken(callbackSecret, token, now)
	require.NoError(t, err)
	for name, v := range otherSpellings(t, token) {
		_, err := sdk.ParseCallbackToken(callbackSecret, v, now)
		require.True(t, errors.Is(err, sdk.ErrBadCallbackToken), "%s %q: %v", name, v, err)
		if name != "padded" && name != "standard chars" {
			require.Equal(t, sdk.CallbackDedupID(token), sdk.CallbackDedupID(v), name)
		}
	}
}
