package server

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/console"
	"github.com/cairnflow/cairn/server/internal/web"
)

// Config configures a [Server].
type Config struct {
	// Store is the database: a PostgreSQL store or the embedded one.
	// Required, unless Cells is set. The events the API's requests write
	// are counted by the store's own metrics, if it has any.
	Store store.Store
	// Cells, instead of Store, places namespaces on several databases
	// ([sdk.Cells]): each request works in its namespace's cell; one
	// for a namespace the placement does not name is a 400 saying so,
	// and one for a cell that is down a 503, while the other cells'
	// namespaces are served. /readyz answers ready while any cell does,
	// and names each cell's state.
	Cells *sdk.Cells
	// Tokens, when any, are required on every /v1 request (but
	// /v1/callbacks/{token}, whose token is its capability, and GET
	// /v1/openapi.yaml, the API's description) and by the console. None:
	// no authentication, for a server on localhost: it then answers only
	// requests whose Host is a loopback name or address, or one of
	// AllowedHosts.
	Tokens []Token
	// AllowedHosts are the host names (no port; "*" for any) a server
	// without Tokens answers besides localhost, *.localhost and loopback
	// addresses. A page that rebinds its DNS name to the server sends
	// that name as Host, so only names the operator chose pass. Not
	// consulted when there are Tokens.
	AllowedHosts []string
	// SecureCookies marks the console's session cookie Secure even when
	// the request reached the server over plain HTTP: set it behind a
	// TLS-terminating proxy. A request served over TLS gets Secure anyway.
	SecureCookies bool
	// SessionTTL is how long a console sign-in lasts. Default
	// [console.DefaultSessionTTL].
	SessionTTL time.Duration
	// WriteTimeout bounds how long writing a response may take, so a
	// client that never reads its answer cannot hold the memory of the
	// request for long: each request's write deadline is this far off
	// when it starts. A long poll's is its wait plus this; a streamed
	// answer (a task's history, the audit) moves its deadline this far
	// off at each chunk it writes, so it may run long while the client
	// keeps reading. Default [DefaultWriteTimeout].
	WriteTimeout time.Duration
	// MaxPayloadBytes bounds the JSON of a task's input in a start's
	// body (a start over it is a 413 payload_too_large naming its size
	// and the limit); one over the blob threshold (64 KiB) is kept as a
	// blob with its task, as the SDK's client does. A start's body may
	// hold 64 KiB besides the input. Default [sdk.DefaultMaxPayloadBytes]
	// (1 MiB).
	MaxPayloadBytes int
	// Keys, when set, encrypt at rest the payloads of the namespaces they
	// have keys for, as [sdk.ClientConfig.Keys]: what the API starts and
	// signals is sealed, and what it reads is opened. Nil: payloads are
	// stored as they are, and sealed ones read back sealed.
	Keys *seal.Keys
	// BlobStore is where the blobs the API writes (inputs and signal
	// payloads kept by reference) keep their bytes, as
	// [sdk.ClientConfig.BlobStore]. Default: the database.
	BlobStore string
	// DefaultArchive is where the histories of tasks retention removed are
	// read from in a namespace without an archive of its own (the
	// leader's default), as [sdk.ClientConfig.DefaultArchive]: GET
	// /v1/tasks/{id}/history answers for an archived task.
	DefaultArchive string
	// MaxListPayloadBytes bounds the inputs and outputs one page of
	// GET /v1/tasks?include=input,output carries: the page ends early,
	// with a next_cursor, before the first task that would take it past
	// the bound (a task larger than the bound comes alone, whole). Default
	// [sdk.DefaultMaxListPayloadBytes] (8 MiB). Listings without include
	// carry no payloads.
	MaxListPayloadBytes int
	// Gatherer serves /metrics. Nil: /metrics answers 404.
	Gatherer prometheus.Gatherer
	// MetricsToken, when set, is the bearer token /metrics requires
	// (Prometheus' authorization.credentials). Unset: /metrics on
	// [Server.Handler] requires, when there are Tokens, an API token that
	// may read every namespace (the metrics name every namespace's
	// queues); without Tokens it follows the loopback rule of the rest.
	MetricsToken string
	// MetricsApart leaves /metrics off [Server.Handler]: serve
	// [Server.MetricsHandler] on an address of its own instead (cairn
	// server --metrics-addr), where, without a MetricsToken, whoever
	// reaches the address reads the metrics.
	MetricsApart bool
	Logger       *slog.Logger // default slog.Default()
	// Prefix is the path the handler is mounted under, as clients see it:
	// "/cairn" for
	//
	//	mux.Handle("/cairn/", http.StripPrefix("/cairn", srv.Handler()))
	//
	// The handler routes the request's path with the prefix already
	// stripped (by http.StripPrefix, or by a proxy in front), and puts the
	// prefix in every URL it sends back: the console's links, form
	// actions, htmx requests, static assets and redirects, its cookie's
	// path, and the API's Location headers and problem instances. Empty
	// (or "/"): mounted at the root. Otherwise it starts with "/", does not
	// end with one, and is a clean path of letters, digits and "-._~"
	// (New refuses anything else).
	Prefix string
	// FilterLimits bound the work of each request with a CEL filter (task
	// lists, dead letters, the audit, and the console's filter boxes): its
	// time, its total cost and the rows it reads. Over them, a request is
	// answered 422 filter_too_expensive. Zero fields take the sdk's
	// defaults (2 s, 10,000,000, 100,000); see docs/guarantees.md ("Security").
	FilterLimits sdk.FilterLimits
	// CallbackSecret signs the one-time callback URLs of waits (see
	// [Server.CallbackURL] and [sdk.CallbackToken]); POST
	// /v1/callbacks/{token} delivers a signal, without an API token, to
	// whoever holds a URL signed with it, and GET shows a page for a
	// browser whose buttons post the decision. At least
	// [sdk.MinCallbackSecretBytes] bytes, kept secret. None: the route
	// answers 404.
	CallbackSecret []byte
	// MaxLongPolls bounds the long polls (GET /v1/tasks/{id}/wait) open at
	// once; one past it is answered 429 too_many_long_polls with
	// Retry-After: 1 at once. Default [DefaultMaxLongPolls].
	MaxLongPolls int
}

// DefaultMaxLongPolls is the default of Config.MaxLongPolls. An open long
// poll holds a goroutine and a notifier registration, and reads its task
// only when notified (or every second while notifications are not
// arriving).
const DefaultMaxLongPolls = 1000

// Server is the HTTP API and the console. Its handler is safe for
// concurrent use, and serves from [New] on; [Server.Start] adds the
// background work that makes long polls answer as soon as a task finishes.
type Server struct {
	cfg      Config
	tokens   []Token
	log      *slog.Logger
	handler  http.Handler
	console  *console.Console // served under /console/ (and /, which redirects there)
	draining atomic.Bool

	cells     *sdk.Cells               // Config.Cells; nil: Config.Store holds every namespace
	notifiers map[string]*sdk.Notifier // by cell: one listening connection for all its namespaces' waits; run from Start to Stop
	archives  sdk.Archives             // the archives every namespace's client reads through
	drained   chan struct{}            // closed by Drain: long polls answer at once

	life    sync.Mutex // guards started and stopped; held by Start and Stop
	started bool       // Start succeeded
	stopped bool       // Stop was called: the server does not start again

	mu      sync.Mutex
	clients map[string]*sdk.Client // by namespace, at most maxClients

	longPolls atomic.Int64 // open long polls, at most cfg.MaxLongPolls

	unavailable unavailableLog // throttles the warnings of a cell that is down

	routeList []route // what routes registered, in order
}

// maxClients bounds the cached per-namespace clients; a request for a
// namespace beyond them gets a client of its own (a few microseconds), so
// namespace names sent by callers cannot grow the server without bound.
const maxClients = 10_000

// New checks cfg, fills its defaults and returns a server. It is pure: it
// opens no connection and starts no goroutine; [Server.Start] does.
func New(cfg Config) (*Server, error) {
	stores, err := serverStores(cfg)
	if err != nil {
		return nil, err
	}
	if err := ValidateTokens(cfg.Tokens); err != nil {
		return nil, err
	}
	if cfg.MaxPayloadBytes <= 0 {
		cfg.MaxPayloadBytes = sdk.DefaultMaxPayloadBytes
	}
	if cfg.MaxListPayloadBytes <= 0 {
		cfg.MaxListPayloadBytes = sdk.DefaultMaxListPayloadBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxLongPolls <= 0 {
		cfg.MaxLongPolls = DefaultMaxLongPolls
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	for i, h := range cfg.AllowedHosts {
		name, ok := web.AllowedHost(h)
		if !ok {
			return nil, errors.WithHint(errors.Newf("server: Config.AllowedHosts[%d] %q is not a host name", i, h),
				`give names or addresses without a port or scheme, such as "cairn.internal" or "10.0.0.5", or "*" for any`)
		}
		cfg.AllowedHosts[i] = name
	}
	if n := len(cfg.CallbackSecret); n > 0 && n < sdk.MinCallbackSecretBytes {
		return nil, errors.Newf("server: Config.CallbackSecret is %d bytes: give at least %d", n, sdk.MinCallbackSecretBytes)
	}
	if cfg.Prefix == "/" {
		cfg.Prefix = ""
	}
	if err := validPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if cfg.FilterLimits.Timeout < 0 || cfg.FilterLimits.MaxScan < 0 {
		return nil, errors.Newf("server: Config.FilterLimits: Timeout %s and MaxScan %d must not be negative (zero takes the default)",
			cfg.FilterLimits.Timeout, cfg.FilterLimits.MaxScan)
	}
	s := &Server{cfg: cfg, tokens: cfg.Tokens, log: cfg.Logger, clients: map[string]*sdk.Client{},
		cells: cfg.Cells, notifiers: map[string]*sdk.Notifier{}, drained: make(chan struct{}),
		unavailable: unavailableLog{every: unavailableLogEvery}}
	for name, st := range stores {
		logger := cfg.Logger
		if name != "" {
			logger = logger.With("cell", name)
		}
		s.notifiers[name] = sdk.NewNotifier(st, logger)
	}
	consoleCfg := console.Config{Client: s.client, Tokens: cfg.Tokens, AllowedHosts: cfg.AllowedHosts,
		SecureCookies: cfg.SecureCookies, SessionTTL: cfg.SessionTTL, MaxPayloadBytes: cfg.MaxPayloadBytes,
		Logger: cfg.Logger, Prefix: cfg.Prefix}
	if len(cfg.CallbackSecret) > 0 {
		consoleCfg.CallbackURL = s.CallbackURL
	}
	if cfg.Cells != nil {
		consoleCfg.Namespaces = cfg.Cells.ListNamespaces
	}
	if s.console, err = console.New(consoleCfg); err != nil {
		return nil, err
	}
	s.handler = s.routes()
	if testHookHandler != nil {
		s.handler = testHookHandler(s.handler)
	}
	return s, nil
}

// serverStores is the stores the server works in, by cell: Config.Cells',
// or Config.Store as the one cell, named "", of every namespace.
func serverStores(cfg Config) (map[string]store.Store, error) {
	switch {
	case cfg.Store != nil && cfg.Cells != nil:
		return nil, errors.New("server: Config.Store and Config.Cells are both set: set one")
	case cfg.Store != nil:
		return map[string]store.Store{"": cfg.Store}, nil
	case cfg.Cells == nil:
		return nil, errors.New("server: Config.Store (or Config.Cells) is required")
	}
	return cfg.Cells.Stores(), nil
}

// storeOf is the store holding namespace, and its cell's notifier.
func (s *Server) storeOf(namespace string) (store.Store, *sdk.Notifier, error) {
	if s.cells == nil {
		return s.cfg.Store, s.notifiers[""], nil
	}
	cell, st, err := s.cells.Of(namespace)
	if err != nil {
		return nil, nil, errmark.Mark(err, sdk.ErrInvalid)
	}
	return st, s.notifiers[cell], nil
}

// validPrefix checks a Config.Prefix other than the root.
func validPrefix(prefix string) error {
	if prefix == "" || web.ValidPrefix(prefix) {
		return nil
	}
	return errors.WithHint(errors.Newf("server: Config.Prefix %q is not a mount path", prefix),
		`use a clean path such as "/cairn": a leading "/", no trailing "/", letters, digits and "-._~"`)
}

// path returns the URL of p, a path of the handler's such as
// "/console/tasks", as clients see it: under Config.Prefix.
func (s *Server) path(p string) string { return s.cfg.Prefix + p }

// Handler returns the server's HTTP handler: the API under /v1 (described
// by the OpenAPI document it serves at /v1/openapi.yaml), /healthz,
// /readyz, /metrics and the console under /console/ (where / redirects),
// all relative to [Config.Prefix]. It serves before [Server.Start] too;
// long polls then notice a finished task by reading it again, up to a
// second late.
func (s *Server) Handler() http.Handler { return s.handler }

// Start starts the server's background work, the notifier that wakes long
// polls (GET /v1/tasks/{id}/wait) when their task finishes, over one
// listening connection for every namespace, and returns once it runs. It
// runs until [Server.Stop] or until ctx ends. A server starts once: Start
// after Start or after Stop is an error.
func (s *Server) Start(ctx context.Context) error {
	s.life.Lock()
	defer s.life.Unlock()
	switch {
	case s.stopped:
		return errors.New("server: stopped; a server starts once")
	case s.started:
		return errors.New("server: already started")
	}
	for name, n := range s.notifiers {
		if err := n.Start(ctx); err != nil {
			for _, started := range s.notifiers {
				started.Stop() // a notifier not started stops at once
			}
			return errors.Wrapf(err, "server: start the notifier%s", cellSuffix(name))
		}
	}
	s.started = true
	return nil
}

// Stop drains the server (see [Server.Drain]), stops its background work
// and waits for it to end, or for ctx, whose error it then returns. Stop is
// idempotent and safe before Start. Call it after the http.Server serving
// [Server.Handler] has shut down: requests served after Stop still work,
// but long polls answer at once.
func (s *Server) Stop(ctx context.Context) error {
	s.Drain()
	s.life.Lock()
	s.stopped = true
	s.life.Unlock()
	done := make(chan struct{})
	go func() { // bounded: each notifier's loop ends once cancelled
		defer close(done)
		for _, n := range s.notifiers {
			n.Stop()
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Wrap(ctx.Err(), "server: stop")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		c.Close()
	}
	s.clients = map[string]*sdk.Client{}
	return nil
}

// Drain makes /readyz answer not ready, so a load balancer stops sending
// requests before the server shuts down, and answers open long polls at
// once with the task as it is, so a graceful shutdown of the http.Server
// serving [Server.Handler] does not wait for them. Call it before that
// shutdown; [Server.Stop] drains too. Drain is idempotent.
func (s *Server) Drain() {
	if s.draining.CompareAndSwap(false, true) {
		close(s.drained)
	}
}

func (s *Server) routes() http.Handler {
	mux := newRouteMux()
	mux.Handle("POST /v1/tasks", s.api(RoleSubmit, s.startTask))
	mux.Handle("GET /v1/tasks", s.api(RoleRead, s.listTasks))
	mux.Handle("GET /v1/tasks/{id}", s.api(RoleRead, s.getTask))
	mux.Handle("GET /v1/tasks/{id}/history", s.api(RoleRead, s.taskHistory))
	mux.Handle("GET /v1/tasks/{id}/wait", s.api(RoleRead, s.waitTask))
	mux.Handle("GET /v1/tasks/{id}/stream", s.api(RoleRead, s.taskStream))
	mux.Handle("POST /v1/tasks/{id}/cancel", s.api(RoleOperate, s.cancelTask))
	mux.Handle("POST /v1/tasks/{id}/retry", s.api(RoleOperate, s.retryTask))
	mux.Handle("POST /v1/tasks/{id}/compensate", s.api(RoleOperate, s.compensateTask))
	mux.Handle("POST /v1/tasks/{id}/erase", s.api(RoleAdmin, s.eraseTask))
	// A fork starts a task with the caller's choice of output, so it needs
	// submit as well as operate.
	mux.Handle("POST /v1/tasks/{id}/fork", s.api(RoleOperate, s.forkTask, RoleSubmit))
	mux.Handle("POST /v1/tasks/{id}/reset", s.api(RoleOperate, s.resetTask, RoleSubmit))
	mux.Handle("GET /v1/tasks/{id}/forks", s.api(RoleRead, s.taskForks))
	mux.Handle("GET /v1/tasks/{id}/usage", s.api(RoleRead, s.taskUsage))
	mux.Handle("POST /v1/tasks/{id}/signals/{name}", s.api(RoleOperate, s.signalTask))
	mux.Handle("GET /v1/tasks/{id}/queries/{name}", s.api(RoleRead, s.queryTask))
	mux.Handle("POST /v1/tasks/{id}/queries/{name}", s.api(RoleRead, s.queryTask))
	mux.Handle("POST /v1/tasks/{id}/updates/{name}", s.api(RoleOperate, s.updateTask))
	mux.Handle("GET /v1/tasks/{id}/updates/{name}/{update_id}", s.api(RoleOperate, s.updateOutcome))
	mux.Handle("POST /v1/tasks/by-key/{key}/signals/{name}", s.api(RoleOperate, s.signalTaskByKey))
	if len(s.cfg.CallbackSecret) > 0 {
		mux.HandleFunc("POST /v1/callbacks/{token}", s.callback)
		mux.HandleFunc("GET /v1/callbacks/{token}", s.callbackPage)
		mux.HandleFunc("POST /v1/callbacks/budget/{token}", s.budgetCallback)
		mux.HandleFunc("GET /v1/callbacks/budget/{token}", s.budgetCallbackPage)
	}
	mux.Handle("GET /v1/queues", s.api(RoleRead, s.listQueues))
	mux.Handle("GET /v1/queues/{queue}/diagnosis", s.api(RoleRead, s.diagnoseQueue))
	mux.Handle("GET /v1/task-types", s.api(RoleRead, s.listTaskTypes))
	mux.Handle("GET /v1/usage", s.api(RoleRead, s.usageSeries))
	mux.Handle("GET /v1/blobs/{key}", s.api(RoleRead, s.getBlob))
	mux.Handle("GET /v1/namespace", s.api(RoleRead, s.getNamespace))
	mux.Handle("PUT /v1/namespace", s.api(RoleAdmin, s.putNamespace))
	mux.Handle("GET /v1/model-limits", s.api(RoleRead, s.listModelLimits))
	mux.Handle("PUT /v1/model-limits/{model}", s.api(RoleAdmin, s.putModelLimit))
	mux.Handle("DELETE /v1/model-limits/{model}", s.api(RoleAdmin, s.deleteModelLimit))
	mux.Handle("GET /v1/budgets", s.api(RoleRead, s.listBudgets))
	mux.Handle("PUT /v1/budgets/{ref}", s.api(RoleAdmin, s.putBudget))
	mux.Handle("DELETE /v1/budgets/{ref}", s.api(RoleAdmin, s.deleteBudget))
	// A raise lets tasks spend more: an operator's decision, as a signal
	// or an approval is.
	mux.Handle("POST /v1/budgets/{ref}/raise", s.api(RoleOperate, s.raiseBudget))
	mux.Handle("GET /v1/events", s.api(RoleRead, s.auditEvents))
	mux.Handle("POST /v1/remote-steps/claim", s.api(RoleWork, s.claimRemote))
	mux.Handle("POST /v1/remote-steps/{claim}/heartbeat", s.api(RoleWork, s.heartbeatRemote))
	mux.Handle("POST /v1/remote-steps/{claim}/complete", s.api(RoleWork, s.completeRemote))
	mux.Handle("POST /v1/remote-steps/{claim}/stream", s.api(RoleWork, s.streamRemote))
	mux.Handle("POST /v1/remote-steps/{claim}/fail", s.api(RoleWork, s.failRemote))
	mux.Handle("POST /v1/remote-steps/{claim}/release", s.api(RoleWork, s.releaseRemote))
	mux.HandleFunc("GET /v1/openapi.yaml", s.openAPI)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.ready)
	if s.cfg.Gatherer != nil && !s.cfg.MetricsApart {
		mux.Handle("GET /metrics", s.metrics(true))
	}
	mux.Handle("GET /{$}", s.console)
	mux.Handle("/console/", s.console)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeProblem(w, r, web.NewProblem(http.StatusNotFound, web.CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path))
	})
	s.routeList = mux.routes
	return s.recoverer(s.writeDeadline(s.guard(mux)))
}

// DefaultWriteTimeout is the default of [Config.WriteTimeout].
const DefaultWriteTimeout = time.Minute

// writeDeadline sets each request's write deadline Config.WriteTimeout
// off (see [Server.extendWrite]).
func (s *Server) writeDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.extendWrite(w, 0)
		next.ServeHTTP(w, r)
	})
}

// extendWrite moves the response's write deadline to Config.WriteTimeout
// plus more from now. A writer without deadlines (a test's recorder) is
// left as it is.
func (s *Server) extendWrite(w http.ResponseWriter, more time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout + more))
}

// call is what an API handler acts with: who asks, in which namespace,
// through which client.
type call struct {
	who       *web.Principal
	namespace string
	client    *sdk.Client
}

// api wraps an API handler: authenticate, check the role (and each of
// also: the token needs them all), resolve the namespace (the "namespace"
// query parameter or Cairn-Namespace header, else the token's first), and
// record the requester for the histories.
func (s *Server) api(role Role, h func(http.ResponseWriter, *http.Request, *call), also ...Role) http.Handler {
	roles := append([]Role{role}, also...)
	return apiHandler{roles: roles, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, p := web.Authenticate(s.tokens, r)
		if p != nil {
			s.writeProblem(w, r, p)
			return
		}
		for _, role := range roles {
			if !who.Can(role) {
				s.writeProblem(w, r, web.NewProblem(http.StatusForbidden, web.CodeForbidden, "the token's roles do not include "+string(role)))
				return
			}
		}
		if p := checkQuery(r); p != nil {
			s.writeProblem(w, r, p)
			return
		}
		ns := r.URL.Query().Get("namespace")
		if ns == "" {
			ns = r.Header.Get("Cairn-Namespace")
		}
		if ns == "" {
			ns = who.DefaultNamespace()
		}
		if err := validNamespace(ns); err != nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, err.Error()))
			return
		}
		if !who.InNamespace(ns) {
			s.writeProblem(w, r, web.NewProblem(http.StatusForbidden, web.CodeForbidden, "the token may not act in namespace "+ns))
			return
		}
		r = r.WithContext(withNamespace(r.Context(), ns))
		c, err := s.client(ns)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		ctx := sdk.WithRequester(r.Context(), who.Requester())
		h(w, r.WithContext(ctx), &call{who: who, namespace: ns, client: c})
	})}
}

// client returns the namespace's client, made on first use.
func (s *Server) client(namespace string) (*sdk.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[namespace]; ok {
		return c, nil
	}
	st, notifier, err := s.storeOf(namespace)
	if err != nil {
		return nil, err
	}
	c, err := sdk.NewClient(sdk.ClientConfig{Store: st, Namespace: namespace, Identity: "api",
		Notifier: notifier, FilterLimits: s.cfg.FilterLimits, MaxPayloadBytes: s.cfg.MaxPayloadBytes,
		DefaultArchive: s.cfg.DefaultArchive, Archives: &s.archives, OutputsByReference: true,
		Keys: s.cfg.Keys, BlobStore: s.cfg.BlobStore})
	if err != nil {
		return nil, errmark.Mark(err, sdk.ErrInvalid)
	}
	if len(s.clients) < maxClients {
		s.clients[namespace] = c
	}
	return c, nil
}

// validNamespace checks a namespace a request names against
// [sdk.NamePattern].
func validNamespace(ns string) error { return sdk.ValidateName("namespace", ns) }

// ready answers 200 when the database answers within two seconds and the
// server is not draining, else 503. With cells it answers 200 while any
// cell answers, and names each cell's state: a cell that is down stops
// only its namespaces, so it must not take the server out of a load
// balancer that serves the others.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		s.writeProblem(w, r, web.NewProblem(http.StatusServiceUnavailable, web.CodeNotReady, "the server is shutting down"))
		return
	}
	if s.cells == nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.cfg.Store.Ping(ctx); err != nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusServiceUnavailable, web.CodeNotReady, "the database does not answer"))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	// A probe gives up after about a second (Kubernetes' default): one
	// cell out of reach must not make every answer that slow.
	ctx, cancel := context.WithTimeout(r.Context(), cellPingTimeout)
	defer cancel()
	states, up := s.pingCells(ctx)
	if up == 0 {
		s.writeProblem(w, r, web.NewProblem(http.StatusServiceUnavailable, web.CodeNotReady, "no cell's database answers"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "cells": states})
}

// cellPingTimeout bounds /readyz's wait for each cell: one that has not
// answered by then counts as unreachable.
const cellPingTimeout = 500 * time.Millisecond

// pingCells pings every cell at once: each one's state ("ready" or
// "unreachable") and how many answered.
func (s *Server) pingCells(ctx context.Context) (map[string]string, int) {
	names := s.cells.Names()
	answered := make([]bool, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			answered[i] = s.cells.Store(name).Ping(ctx) == nil
		})
	}
	wg.Wait()
	states, up := map[string]string{}, 0
	for i, name := range names {
		states[name] = "unreachable"
		if answered[i] {
			states[name] = "ready"
			up++
		}
	}
	return states, up
}

// cellSuffix is " of cell NAME", or nothing for the one cell of a server
// without cells.
func cellSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " of cell " + strconv.Quote(name)
}

// recoverer turns a handler's panic into a logged 500 rather than a
// dropped connection.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panicked", "method", r.Method, "path", logPath(r), "panic", v, "stack", string(debug.Stack()))
				s.writeProblem(w, r, web.NewProblem(http.StatusInternalServerError, web.CodeInternal, ""))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
