package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
)

// masked replaces a password wherever the CLI prints one.
const masked = "xxxxx"

var (
	// urlPassword is the password of a URL's user info:
	// postgres://user:PASSWORD@host. It runs to the last @ of the URL (up
	// to a space or a quote), so a password with a raw @, #, ? or / in it
	// (pgx accepts them) is masked whole; a stray @ later in the URL masks
	// more than the password, never less.
	urlPassword = regexp.MustCompile("([A-Za-z][A-Za-z0-9+.-]*://[^\\s:/?#@'\"`]*):[^\\s'\"`]*@")
	// keywordPassword is a password in keyword/value form
	// (password=PASSWORD, password='PASS WORD', sslpassword=..., libpq's
	// DSNs with backslash escapes) or a URL's query parameter
	// (?password=PASSWORD).
	keywordPassword = regexp.MustCompile(`(?i)(\b\w*password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:\\.|[^\s&\\])+)`)
)

// redact masks every credential in s: a URL's password, and a password
// given as a keyword or query parameter, so
// postgres://postgres:s3cret@host/db prints as
// postgres://postgres:xxxxx@host/db. Every error, log line and help text
// the CLI prints goes through it (errors in main, logs in newLogger);
// pgx's own errors name the host, user and database, not the password,
// but a URL that fails to parse may be quoted whole.
func redact(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}:"+masked+"@")
	return keywordPassword.ReplaceAllString(s, "${1}"+masked)
}

// redactingHandler is a slog handler that masks credentials in the
// message and in every string or error attribute before its inner
// handler formats them.
type redactingHandler struct{ inner slog.Handler }

func (h redactingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = redactAttr(a)
	}
	return redactingHandler{h.inner.WithAttrs(clean)}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{h.inner.WithGroup(name)}
}

// redactAttr masks credentials in a string, an error or a group's members.
func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, redact(v.String()))
	case slog.KindGroup:
		members := v.Group()
		clean := make([]any, len(members))
		for i, m := range members {
			clean[i] = redactAttr(m)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		// An error, a *url.URL, any value: masked as the text handler
		// would print it.
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, redact(err.Error()))
		}
		return slog.String(a.Key, redact(fmt.Sprintf("%+v", v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// newRedactingLogger is a text logger on w at level l that masks
// credentials.
func newRedactingLogger(w io.Writer, l slog.Leveler) *slog.Logger {
	return slog.New(redactingHandler{slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})})
}
