package pgstore

import (
	"context"
	"encoding/hex"
	"strings"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// listener is the store's [store.Listener]: a connection of its own, outside
// the pool (a pooled connection would be handed to other work between
// notifications), that runs LISTEN on the store's channels.
type listener struct {
	s    *Store
	conn *pgx.Conn // nil while not connected; used by the notifier's goroutine only
	// probeChannel is this listener's own channel for its probes, so no
	// other listener hears them.
	probeChannel string
}

// NewListener returns a listener on the store's NOTIFY channels, not yet
// connected.
func (s *Store) NewListener() store.Listener {
	id := uuid.New()
	return &listener{s: s, probeChannel: s.probeChannel + "." + hex.EncodeToString(id[:4])}
}

func (l *listener) Connect(ctx context.Context) error {
	if l.conn != nil {
		return errors.AssertionFailedf("pgstore: listener connected twice")
	}
	conn, err := pgx.ConnectConfig(ctx, l.s.listenConf.Copy())
	if err != nil {
		return errors.Wrap(interpretError(err), "connect the listener")
	}
	for _, channel := range []string{l.s.channel, l.s.doneChannel, l.s.cancelChannel, l.s.streamChannel, l.probeChannel, l.s.inquiryChannel, l.s.answeredChannel, l.s.modelChannel, l.s.remoteChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return errors.Wrapf(interpretError(err), "listen on %s", channel)
		}
	}
	l.conn = conn
	return nil
}

func (l *listener) WaitForNotification(ctx context.Context) (store.Notification, error) {
	if l.conn == nil {
		return store.Notification{}, errors.AssertionFailedf("pgstore: listener not connected")
	}
	note, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		_ = l.Close(context.WithoutCancel(ctx))
		return store.Notification{}, errors.Wrap(interpretError(err), "wait for a notification")
	}
	switch note.Channel {
	case l.s.doneChannel:
		return store.Notification{Done: parseIDs(note.Payload)}, nil
	case l.s.cancelChannel:
		return store.Notification{Cancel: parseIDs(note.Payload)}, nil
	case l.s.streamChannel:
		return store.Notification{Streams: parseIDs(note.Payload)}, nil
	case l.probeChannel:
		return store.Notification{Probes: []string{note.Payload}}, nil
	case l.s.inquiryChannel:
		return store.Notification{Inquiries: true}, nil
	case l.s.answeredChannel:
		return store.Notification{Answered: parseIDs(note.Payload)}, nil
	case l.s.modelChannel:
		return store.Notification{Models: parseModelKey(note.Payload)}, nil
	case l.s.remoteChannel:
		return store.Notification{Remote: []string{note.Payload}}, nil
	default:
		return store.Notification{Ready: true}, nil
	}
}

func (l *listener) Close(ctx context.Context) error {
	if l.conn == nil {
		return nil
	}
	conn := l.conn
	l.conn = nil
	return errors.Wrap(conn.Close(ctx), "close the listener")
}

// Probe notifies the listener's probe channel the way every writer's
// notifications go (through the pool's URL, a pooler included), on the
// control pool, so that a pool busy with claims does not delay it.
func (l *listener) Probe(ctx context.Context, token string) error {
	_, err := l.s.control.Exec(ctx, "SELECT pg_notify($1, $2)", l.probeChannel, token)
	return errors.Wrap(interpretError(err), "probe the listener")
}

// parseIDs reads a NOTIFY payload of comma-separated task ids, skipping
// what is not one.
func parseIDs(payload string) []uuid.UUID {
	var ids []uuid.UUID
	for _, s := range strings.Split(payload, ",") {
		if id, err := uuid.Parse(s); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

var _ store.Store = (*Store)(nil)
