package console

import (
	"context"
	"html/template"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// Config configures a [Console].
type Config struct {
	// Client returns the client the console acts through in a namespace:
	// the server's, made on first use and shared with its API. Required.
	// An error it returns is shown as the API would answer it (a
	// namespace no cell holds is a 400), or logged and shown as an
	// internal error when the API would not know it.
	Client func(namespace string) (*sdk.Client, error)
	// Tokens, when any, are required to use the console: a sign-in page
	// asks for one (or a script sends it as a bearer token), and its
	// roles and namespaces decide what the console shows and allows,
	// as on the API (server.Token is this type). None: everyone acts as
	// console:anonymous with every role, and only requests whose Host
	// is a loopback name or address, or one of AllowedHosts, are
	// answered.
	Tokens []web.Token
	// AllowedHosts are the host names (no port; "*" for any) a console
	// without Tokens answers besides localhost, *.localhost and loopback
	// addresses, as server.Config.AllowedHosts.
	AllowedHosts []string
	// SecureCookies marks the session cookie Secure even when the
	// request came over plain HTTP: set it behind a TLS-terminating
	// proxy. A request served over TLS gets Secure anyway. It also makes
	// callback links https.
	SecureCookies bool
	// SessionTTL is how long a sign-in lasts. Default [DefaultSessionTTL].
	SessionTTL time.Duration
	// MaxPayloadBytes bounds a signal form's payload as the API bounds a
	// signal's (the form may hold 64 KiB more); every other form is
	// bounded at 64 KiB. Default [sdk.DefaultMaxPayloadBytes].
	MaxPayloadBytes int
	// CallbackURL, when set, signs the one-time callback URL of a wait
	// the task page offers an operator (server.Server.CallbackURL: base
	// is the origin the console was reached at). Nil: no links.
	CallbackURL func(base string, cb sdk.Callback) (string, error)
	// Namespaces, when set, lists every namespace the server holds, each
	// with its cell (sdk.Cells.ListNamespaces: a server over a placement
	// map). Nil: the namespaces of the current namespace's client.
	Namespaces func(ctx context.Context) ([]cairntype.NamespaceConfig, error)
	Logger     *slog.Logger // default slog.Default()
	// Prefix is the path the console is mounted under, as clients see
	// it, as server.Config.Prefix: the handler routes /console/… (and
	// redirects / there) with the prefix already stripped, and puts the
	// prefix in every URL it sends back and its cookie's path. Empty:
	// mounted at the root.
	Prefix string
}

// Console is the web console, an http.Handler safe for concurrent use.
// It keeps its sign-ins and its forms' notices in memory: one process's
// console forgets them when it stops.
type Console struct {
	cfg      Config
	tokens   []web.Token
	log      *slog.Logger
	pages    map[string]*template.Template // the pages, their URLs under cfg.Prefix
	sessions *sessions                     // the sign-ins
	flashes  *flashes                      // the messages of the forms' redirects
	handler  http.Handler
	streams  atomic.Int64 // task pages streaming now (consoleTaskStream)
}

// New checks cfg, fills its defaults and returns a console. It is pure:
// it opens nothing and starts no goroutine.
func New(cfg Config) (*Console, error) {
	if cfg.Client == nil {
		return nil, errors.New("console: Config.Client is required")
	}
	if err := web.ValidateTokens(cfg.Tokens); err != nil {
		return nil, err
	}
	if cfg.Prefix == "/" {
		cfg.Prefix = ""
	}
	if cfg.Prefix != "" && !web.ValidPrefix(cfg.Prefix) {
		return nil, errors.WithHint(errors.Newf("console: Config.Prefix %q is not a mount path", cfg.Prefix),
			`use a clean path such as "/cairn": a leading "/", no trailing "/", letters, digits and "-._~"`)
	}
	hosts := make([]string, len(cfg.AllowedHosts))
	for i, h := range cfg.AllowedHosts {
		name, ok := web.AllowedHost(h)
		if !ok {
			return nil, errors.Newf("console: Config.AllowedHosts[%d] %q is not a host name", i, h)
		}
		hosts[i] = name
	}
	cfg.AllowedHosts = hosts
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.MaxPayloadBytes <= 0 {
		cfg.MaxPayloadBytes = sdk.DefaultMaxPayloadBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Console{cfg: cfg, tokens: cfg.Tokens, log: cfg.Logger, pages: consoleTemplates(cfg.Prefix),
		sessions: newSessions(cfg.SessionTTL), flashes: newFlashes()}
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP serves the console's pages under /console/ (and redirects /
// there), relative to [Config.Prefix]; any other path is a 404.
func (s *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// path returns the URL of p, a path of the console's such as
// "/console/tasks", as clients see it: under Config.Prefix.
func (s *Console) path(p string) string { return s.cfg.Prefix + p }

// writeProblem answers a request the console refuses before any page (a
// form from another origin, a missing static file) with p, as the API
// answers.
func (s *Console) writeProblem(w http.ResponseWriter, r *http.Request, p *web.Problem) {
	web.WriteProblem(w, r, s.cfg.Prefix, p)
}

// call is what a page's handler acts with: who asks, in which namespace,
// through which client.
type call struct {
	who       *web.Principal
	namespace string
	client    *sdk.Client
}
