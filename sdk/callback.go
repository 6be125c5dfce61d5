package sdk

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Callback is what a signed one-time callback URL delivers: the signal
// called Name to the task TaskID in Namespace, for the task's receive at
// position Wait (history.Wait's Position: it tells the tokens of two
// waits for the same name apart), until Expires.
type Callback struct {
	Namespace string
	TaskID    uuid.UUID
	Name      string
	Wait      int
	Expires   time.Time
}

// ErrBadCallbackToken marks a callback token that is not valid: not one
// this secret signed (forged, tampered with, signed with another secret),
// malformed, or expired ([ErrCallbackExpired] too).
var ErrBadCallbackToken = errors.New("bad callback token")

// ErrCallbackExpired marks a callback token, otherwise valid, whose expiry
// has passed.
var ErrCallbackExpired = errors.New("callback token expired")

// MinCallbackSecretBytes is the shortest callback secret accepted.
const MinCallbackSecretBytes = 16

const (
	callbackVersion = 1
	callbackContext = "cairn callback v1\n" // MAC domain separation
	callbackFixed   = 1 + 8 + 16            // version, expiry, task id
)

// CallbackToken signs cb with secret (HMAC-SHA256) and returns the token
// of a one-time callback URL, {base}/v1/callbacks/{token} on a server
// whose Config.CallbackSecret is secret (see server.Server.CallbackURL).
// The token carries cb in clear (base64url; see docs/internals/scheduling.md, "Approvals and callback tokens") and
// is not a secret of the task's data, only a capability: whoever holds it
// may send that one signal, once, before cb.Expires. The expiry is kept
// to the second.
func CallbackToken(secret []byte, cb Callback) (string, error) {
	switch {
	case len(secret) < MinCallbackSecretBytes:
		return "", errmark.Mark(errors.Newf("callback token: the secret must be at least %d bytes", MinCallbackSecretBytes), ErrInvalid)
	case cb.TaskID == uuid.Nil || cb.Name == "" || cb.Wait < 0 || cb.Expires.IsZero():
		return "", errmark.Mark(errors.New("callback token: a task id, a signal name, a wait position of 0 or more and an expiry are required"), ErrInvalid)
	}
	if err := ValidateName("namespace", cb.Namespace); err != nil {
		return "", errmark.Mark(errors.Wrap(err, "callback token"), ErrInvalid)
	}
	body := make([]byte, callbackFixed, callbackFixed+3*binary.MaxVarintLen64+len(cb.Namespace)+len(cb.Name)+sha256.Size)
	body[0] = callbackVersion
	binary.BigEndian.PutUint64(body[1:9], uint64(cb.Expires.Unix()))
	copy(body[9:25], cb.TaskID[:])
	body = binary.AppendUvarint(body, uint64(cb.Wait))
	body = binary.AppendUvarint(body, uint64(len(cb.Namespace)))
	body = append(body, cb.Namespace...)
	body = binary.AppendUvarint(body, uint64(len(cb.Name)))
	body = append(body, cb.Name...)
	return base64.RawURLEncoding.EncodeToString(append(body, callbackMAC(secret, body)...)), nil
}

// ParseCallbackToken checks token against secret and returns what it
// delivers. The MAC is compared in constant time before anything else is
// read; a token that fails is an error marked [ErrBadCallbackToken]; one
// whose expiry is not after now is marked [ErrCallbackExpired] too.
func ParseCallbackToken(secret []byte, token string, now time.Time) (Callback, error) {
	bad := func(why string) (Callback, error) {
		return Callback{}, errmark.Mark(errors.New("callback token: "+why), ErrBadCallbackToken)
	}
	if len(secret) < MinCallbackSecretBytes {
		return bad("no secret to check it with")
	}
	raw, ok := decodeCallbackToken(token)
	if !ok || len(raw) < callbackFixed+3+sha256.Size {
		return bad("malformed")
	}
	body, mac := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if !hmac.Equal(mac, callbackMAC(secret, body)) {
		return bad("signature does not match")
	}
	if body[0] != callbackVersion {
		return bad("unknown version")
	}
	cb := Callback{Expires: time.Unix(int64(binary.BigEndian.Uint64(body[1:9])), 0).UTC()}
	copy(cb.TaskID[:], body[9:25])
	rest := body[callbackFixed:]
	wait, n := binary.Uvarint(rest)
	if n <= 0 || wait > 1<<31 {
		return bad("malformed")
	}
	cb.Wait, rest = int(wait), rest[n:]
	if cb.Namespace, rest, ok = callbackString(rest); !ok {
		return bad("malformed")
	}
	if cb.Name, rest, ok = callbackString(rest); !ok || len(rest) != 0 {
		return bad("malformed")
	}
	if !now.Before(cb.Expires) {
		err := errors.Newf("callback token: expired at %s", cb.Expires.Format(time.RFC3339))
		return Callback{}, errmark.Mark(errmark.Mark(err, ErrCallbackExpired), ErrBadCallbackToken)
	}
	return cb, nil
}

// CallbackDedupID is the dedup id of the signal a callback token sends:
// a hash of the token's canonical form (its bytes encoded again), so its
// second use is a duplicate and writes nothing, however the second
// spells it: base64 decoders skip line breaks and take any trailing bits,
// so one token has many spellings. [ParseCallbackToken] refuses all but
// the canonical one; the id does not depend on that check.
func CallbackDedupID(token string) string {
	if raw, err := base64.RawURLEncoding.DecodeString(token); err == nil {
		token = base64.RawURLEncoding.EncodeToString(raw)
	}
	sum := sha256.Sum256([]byte(token))
	return "callback:" + hex.EncodeToString(sum[:16])
}

// decodeCallbackToken decodes token, refusing every spelling but the
// canonical one: Go's decoder skips '\r' and '\n' anywhere, and, even
// strict, takes a last character whose unused bits are not zero, so
// "…U" and "…V" could decode alike. Encoding the bytes again must give
// the token back.
func decodeCallbackToken(token string) ([]byte, bool) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != token {
		return nil, false
	}
	return raw, true
}

func callbackMAC(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(callbackContext))
	m.Write(body)
	return m.Sum(nil)
}

// callbackString reads a length-prefixed string off b.
func callbackString(b []byte) (string, []byte, bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return "", nil, false
	}
	return string(b[n : n+int(l)]), b[n+int(l):], true
}

// The states of a callback link's wait ([CallbackWait]), as a POST of the
// link would find them.
const (
	CallbackOpen       = "open"        // the task waits at the link's receive: the link's signal would be taken
	CallbackUsed       = "used"        // the link's signal is in the history: it was used
	CallbackEnded      = "ended"       // the task went past the receive (answered otherwise, timed out) or finished
	CallbackNotReached = "not_reached" // the task has not reached the receive yet
)

// CallbackWait is where the wait a callback link answers stands: what a
// page about the link shows before anyone decides.
type CallbackWait struct {
	State       string         // CallbackOpen, CallbackUsed, CallbackEnded or CallbackNotReached
	TaskType    string         // the task's type
	TypeVersion int            // and version
	Status      history.Status // the task's status
	// Deadline is when the receive stops waiting (CallbackOpen); zero
	// when it waits without one.
	Deadline time.Time
}

// CallbackWait reads, writing nothing, where the wait of cb (token is its
// signed token, as [CallbackToken] made it) stands, deciding as a signal
// through the link would: used first, then open, ended or not reached. It
// reads the task's row and two indexed facts of its history; only a task
// that waits elsewhere has its history read, to tell ended from not
// reached. A task not found is [ErrNotFound].
func (c *Client) CallbackWait(ctx context.Context, cb Callback, token string) (*CallbackWait, error) {
	t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: cb.TaskID})
	if err != nil {
		return nil, errors.Wrapf(err, "callback wait of task %s", cb.TaskID)
	}
	out := &CallbackWait{TaskType: t.Type, TypeVersion: t.TypeVersion, Status: t.Status}
	facts, err := c.store.Engine().SignalLookup(ctx, &store.SignalLookupParams{Namespace: c.namespace, TaskID: t.ID,
		DedupID: CallbackDedupID(token), OpenWait: !t.Status.Terminal(), LastSeq: t.LastSeq})
	if err != nil {
		return nil, errors.Wrapf(err, "callback wait of task %s", cb.TaskID)
	}
	w := facts.Wait
	switch {
	case facts.Seen:
		out.State = CallbackUsed
	case t.Status.Terminal():
		out.State = CallbackEnded
	case w != nil && w.Position == cb.Wait && w.Name == cb.Name:
		out.State = CallbackOpen
		if w.Deadline.Before(history.Never) {
			out.Deadline = w.Deadline
		}
	case w != nil && w.Position > cb.Wait:
		out.State = CallbackEnded
	default:
		events, err := store.TaskEvents(ctx, c.store.Engine(), c.namespace, t.ID)
		if err != nil {
			return nil, errors.Wrapf(err, "callback wait of task %s", cb.TaskID)
		}
		out.State = CallbackNotReached
		for _, e := range events {
			if d, ok := e.Data.(history.WaitStartedData); ok && d.Position >= cb.Wait {
				out.State = CallbackEnded
				break
			}
		}
	}
	return out, nil
}
