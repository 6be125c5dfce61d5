package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
	"github.com/cairnflow/cairn/server/console"
)

type serverFlags struct {
	listen          string
	tokensFile      string
	maxListPayload  int // bytes of inputs and outputs a listing page that includes them carries
	maxLongPolls    int // --max-long-polls: GET /v1/tasks/{id}/wait open at once (server.Config.MaxLongPolls)
	maxConns        int // --max-conns: the process's connections (splitBudget)
	rescueInterval  time.Duration
	retention       retentionFlag // --default-retention
	keyRetention    retentionFlag // --default-key-retention
	shutdownTimeout time.Duration
	migrate         bool
	logLevel        string
	metricLabels    []string
	consoleHint     bool // print the console's address once listening (cairn dev)
	allowedHosts    []string
	insecureNoAuth  bool
	secureCookies   bool
	sessionTTL      time.Duration
	metricsToken    envFlag // read with get(): a secret, so --help never shows it
	metricsAddr     string
	callbackSecret  envFlag // read with get(): a secret, so --help never shows it
}

// addCallbackSecretFlag adds --callback-secret, which cairn server and
// cairn dev share.
func addCallbackSecretFlag(cmd *cobra.Command, f *serverFlags) {
	f.callbackSecret.env = "CAIRN_CALLBACK_SECRET"
	cmd.Flags().Var(&f.callbackSecret, "callback-secret",
		"secret (16 bytes or more) that signs the one-time callback URLs of waits, POST /v1/callbacks/{token} (env CAIRN_CALLBACK_SECRET, which ps does not show); none: callbacks answer 404")
}

// addExposureFlags adds the flags of who may reach a server without
// tokens, which cairn server and cairn dev share.
func addExposureFlags(cmd *cobra.Command, f *serverFlags) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.allowedHosts, "allowed-hosts", envList("CAIRN_ALLOWED_HOSTS"),
		`without --tokens, host names besides localhost and loopback addresses the server answers requests for ("*": any) (env CAIRN_ALLOWED_HOSTS)`)
	fl.BoolVar(&f.insecureNoAuth, "insecure-no-auth", false, "serve without --tokens on an address that is not loopback: anyone who reaches it may do anything")
}

// maxLongPollsFlag bounds --max-long-polls: an open poll holds a goroutine
// and a timer (a few KiB), so a million would be gigabytes of a server
// that answers nothing else.
const maxLongPollsFlag = 100_000

func newServerCmd(g *globals) *cobra.Command {
	f := &serverFlags{}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Serve the HTTP API and run the engine's singleton work (rescuer, cron) under the leader lease",
		Long: `cairn server serves the HTTP API under /v1 (tasks, queues, audit events),
/healthz, /readyz and /metrics, and runs the engine's singleton work (rescue
of expired leases, start-deadline expiry, cron schedules) whenever it holds
the leader lease. Run as many as you like: one leads at a time.

With --tokens, every /v1 request needs "Authorization: Bearer <token>"; the
file lists token hashes (cairn token new prints a token and its entry), and
the console asks for a token once per session (--session-ttl).
Without it the API and console are open to whoever reaches them, so the
server answers only requests for localhost or a loopback address (add
names with --allowed-hosts), and refuses to listen on another address
unless told --insecure-no-auth. Writes to /v1 need Content-Type:
application/json; the console's forms are accepted only from its own pages.

/metrics needs --metrics-token when set; otherwise, with --tokens, an API
token that may read every namespace. --metrics-addr serves it on an address
of its own instead.

With --placement it serves every namespace the placement map places, each
in its cell's database; each cell gets --max-conns and a leader of its own,
and a cell that is down stops only its namespaces (their requests answer
503 database_unavailable; /readyz stays ready while any cell answers). It
starts while a cell is down (warning, and leaving that cell unmigrated), not
while every cell is.
See docs/guarantees.md ("Security") and docs/deployment.md ("Cells").`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{everyCellAnnotation: "yes"},
		RunE:        func(cmd *cobra.Command, _ []string) error { return runServer(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", envOr("CAIRN_LISTEN", "127.0.0.1:7233"), "address to serve on (env CAIRN_LISTEN)")
	fl.StringVar(&f.tokensFile, "tokens", os.Getenv("CAIRN_TOKENS_FILE"), "JSON file of API token hashes, namespaces and roles (env CAIRN_TOKENS_FILE); none: no authentication")
	// The flag's old name: the limit is the global --max-payload-bytes.
	fl.IntVar(&g.maxPayload, "max-input-bytes", sdk.DefaultMaxPayloadBytes, "largest task input accepted, in bytes")
	_ = fl.MarkDeprecated("max-input-bytes", "use --max-payload-bytes")
	fl.IntVar(&f.maxListPayload, "max-list-payload-bytes", sdk.DefaultMaxListPayloadBytes,
		"bytes of inputs and outputs one page of GET /v1/tasks?include=input,output carries at most")
	fl.IntVar(&f.maxLongPolls, "max-long-polls", server.DefaultMaxLongPolls,
		fmt.Sprintf("long polls (GET /v1/tasks/{id}/wait) open at once, 1 to %d; past it a poll is answered 429 too_many_long_polls with Retry-After: 1", maxLongPollsFlag))
	fl.IntVar(&f.maxConns, "max-conns", defaultServerConns, maxConnsHelp)
	fl.DurationVar(&f.rescueInterval, "rescue-interval", 5*time.Second, "how often the leader looks for expired leases; the leader lease lasts three")
	fl.Var(&f.retention, "default-retention", "how long the leader keeps finished tasks of namespaces without a retention of their own, e.g. 30d (0: forever)")
	fl.Var(&f.keyRetention, "default-key-retention", "how long a removed task's idempotency key stays taken in namespaces without their own (0: 24h)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a stopping server lets requests (long polls) finish")
	fl.BoolVar(&f.migrate, "migrate", true, "apply cairn's migrations at start")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringSliceVar(&f.metricLabels, "metric-labels", nil, "task label keys to break finished-task and AI usage metrics down by (bounded values only, e.g. tier)")
	addExposureFlags(cmd, f)
	addCallbackSecretFlag(cmd, f)
	fl.BoolVar(&f.secureCookies, "secure-cookies", envBool("CAIRN_SECURE_COOKIES"), "mark the console's cookie Secure over plain HTTP too: behind a TLS-terminating proxy (env CAIRN_SECURE_COOKIES)")
	fl.DurationVar(&f.sessionTTL, "session-ttl", console.DefaultSessionTTL, "how long a console sign-in lasts")
	f.metricsToken.env = "CAIRN_METRICS_TOKEN"
	fl.Var(&f.metricsToken, "metrics-token", "bearer token /metrics requires (env CAIRN_METRICS_TOKEN, which ps does not show)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", os.Getenv("CAIRN_METRICS_ADDR"), "serve /metrics on this address instead of --listen (env CAIRN_METRICS_ADDR)")
	return cmd
}

func runServer(cmd *cobra.Command, g *globals, f *serverFlags) error {
	return runServerWith(cmd, g, f, nil)
}

// alongside is work a process runs beside the server over the same store
// (cairn dev's demo worker); stop ends it before the server closes. addr
// is the address the server listens on (--listen's port 0 resolved), for
// the links it prints.
type alongside func(ctx context.Context, store store.Store, logger *slog.Logger, addr string) (stop func(), err error)

func runServerWith(cmd *cobra.Command, g *globals, f *serverFlags, also alongside) error {
	ctx := cmd.Context()
	logger, err := newLogger(cmd.ErrOrStderr(), f.logLevel)
	if err != nil {
		return err
	}
	var tokens []server.Token
	if f.tokensFile != "" {
		if tokens, err = server.LoadTokens(f.tokensFile); err != nil {
			return errmark.Mark(err, configError)
		}
	}
	if err := checkExposure(f, len(tokens) > 0); err != nil {
		return err
	}
	if f.maxConns < 2 || f.maxConns > 1000 {
		return errmark.Mark(errors.Newf("--max-conns %d: use 2 to 1000", f.maxConns), configError)
	}
	if f.maxListPayload < 1 {
		return errmark.Mark(errors.Newf("--max-list-payload-bytes %d: must be positive", f.maxListPayload), configError)
	}
	if f.maxLongPolls < 1 || f.maxLongPolls > maxLongPollsFlag {
		return errmark.Mark(errors.Newf("--max-long-polls %d: use 1 to %d", f.maxLongPolls, maxLongPollsFlag), configError)
	}
	// Metrics: what this process writes (cancels through the API, the
	// rescuer's lease expirations), and queue depths read from the
	// database at each scrape, right whichever process changed them.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := sdk.NewMetrics(reg, &sdk.MetricsOpts{TaskLabels: f.metricLabels})
	if err != nil {
		return errmark.Mark(err, configError)
	}
	dbs, closeDBs, err := serverDatabases(ctx, g, storeOpts{maxConns: int32(f.maxConns), runsWorkers: true, migrate: f.migrate, metrics: metrics,
		cellsDown: logger})
	if err != nil {
		return err
	}
	defer closeDBs()
	reg.MustRegister(dbs.collector())
	archive, err := g.defaultArchive()
	if err != nil {
		return err
	}
	stage, err := g.payloadStage() // serverDatabases read it
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{Store: dbs.store, Cells: dbs.cells, Tokens: tokens, MaxPayloadBytes: g.maxPayload, DefaultArchive: archive,
		Keys: stage.keys, BlobStore: stage.blobStore,
		MaxListPayloadBytes: f.maxListPayload, MaxLongPolls: f.maxLongPolls, Gatherer: reg, Logger: logger, FilterLimits: g.filters,
		AllowedHosts: f.allowedHosts, SecureCookies: f.secureCookies, SessionTTL: f.sessionTTL,
		MetricsToken: f.metricsToken.get(), MetricsApart: f.metricsAddr != "",
		CallbackSecret: callbackSecret(f)})
	if err != nil {
		return errmark.Mark(err, configError)
	}
	if err := srv.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	// serve stops the server in order (drain, HTTP shutdown, Stop); this
	// one is for the returns before it, and finds nothing left to do after.
	defer func() { _ = srv.Stop(context.Background()) }()
	// The leader's work (rescues, start deadlines, cron, retention), one
	// leader lease per cell.
	maintainer, err := sdk.NewMaintainer(sdk.MaintainerConfig{Store: dbs.store, Cells: dbs.cells, Owner: serverID(),
		Interval: f.rescueInterval, Logger: logger, DefaultRetention: time.Duration(f.retention),
		DefaultKeyRetention: time.Duration(f.keyRetention), DefaultArchive: archive})
	if err != nil {
		return err
	}
	// The maintainer outlives the signal context, so its stop resigns the
	// leader lease and another process takes over at once.
	if err := maintainer.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer maintainer.Stop()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return errmark.Mark(errors.Wrapf(err, "--listen %s", f.listen), configError)
	}
	if also != nil {
		stop, err := also(ctx, dbs.store, logger, ln.Addr().String())
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stop()
	}
	return serve(ctx, cmd.ErrOrStderr(), srv, f, logger, ln)
}

// serverDBs is what a server works in: one store, or, with --placement,
// every cell.
type serverDBs struct {
	store store.Store
	cells *sdk.Cells
}

// serverDatabases opens the server's store, or every cell of --placement.
func serverDatabases(ctx context.Context, g *globals, o storeOpts) (serverDBs, func(), error) {
	if g.everyCell() {
		cells, closeCells, err := g.openCells(ctx, o)
		return serverDBs{cells: cells}, closeCells, err
	}
	st, closeStore, err := g.store(ctx, o)
	return serverDBs{store: st}, closeStore, err
}

// collector is the queue gauges' collector over every database.
func (d serverDBs) collector() prometheus.Collector {
	if d.cells != nil {
		return sdk.NewCellQueueCollector(d.cells)
	}
	return sdk.NewQueueCollector(d.store)
}

// serve serves on ln until ctx ends, then drains: /readyz turns not
// ready, and requests in flight get up to the shutdown timeout, which
// bounds stopping the server's background work too.
func serve(ctx context.Context, stderr io.Writer, srv *server.Server, f *serverFlags, logger *slog.Logger, ln net.Listener) error {
	var err error
	// No server-wide write timeout: the handler sets each request's write
	// deadline itself (server.Config.WriteTimeout, a minute), a long
	// poll's past its wait and a streamed answer's at each chunk, so a
	// client that never reads its answer is cut off. The read timeout
	// bounds a body trickled in slowly.
	httpServer := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	// The metrics' own listener, when --metrics-addr asks for one.
	var metricsServer *http.Server
	var metricsLn net.Listener
	if f.metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", f.metricsAddr); err != nil {
			_ = ln.Close()
			return errmark.Mark(errors.Wrapf(err, "--metrics-addr %s", f.metricsAddr), configError)
		}
		metricsServer = &http.Server{Handler: srv.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
			WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	}
	if metricsServer != nil {
		fmt.Fprintf(stderr, "cairn server metrics on http://%s/metrics\n", metricsLn.Addr())
	}
	fmt.Fprintf(stderr, "cairn server listening on http://%s\n", ln.Addr())
	if f.insecureNoAuth && !loopbackAddr(f.listen) {
		fmt.Fprintf(stderr, "warning: no authentication (--insecure-no-auth); answering requests for localhost, loopback addresses and %v\n", f.allowedHosts)
	}
	if f.consoleHint {
		fmt.Fprintf(stderr, "web console: http://%s/console/ ; Ctrl-C stops\n", ln.Addr())
	}
	errc := make(chan error, 2)
	go func() { errc <- httpServer.Serve(ln) }()
	if metricsServer != nil {
		go func() { errc <- metricsServer.Serve(metricsLn) }()
	}
	select {
	case err := <-errc:
		_ = httpServer.Close()
		if metricsServer != nil {
			_ = metricsServer.Close()
		}
		return errors.Wrap(err, "serve")
	case <-ctx.Done():
	}
	srv.Drain()
	fmt.Fprintln(stderr, "cairn server stopping")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if metricsServer != nil {
		if err := metricsServer.Shutdown(shutdownCtx); err != nil {
			return errors.Wrap(err, "shut down the metrics server")
		}
	}
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		return errors.Wrap(err, "shut down the HTTP server")
	}
	return srv.Stop(shutdownCtx)
}

// checkExposure refuses a tokenless server on an address other hosts
// reach, unless told --insecure-no-auth.
func checkExposure(f *serverFlags, tokens bool) error {
	if tokens || f.insecureNoAuth || loopbackAddr(f.listen) {
		return nil
	}
	return errmark.Mark(errors.Newf("--listen %s without --tokens would let anyone who reaches that address start, read and cancel tasks: "+
		"pass --tokens FILE (cairn token new makes one), listen on 127.0.0.1, or say --insecure-no-auth "+
		"(and name the host clients use in --allowed-hosts)", f.listen), configError)
}

// loopbackAddr reports whether a listen address binds only a loopback
// interface: "localhost" or a loopback IP. An empty host binds them all.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// envList splits a comma-separated environment variable.
func envList(name string) []string {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// envBool reads a boolean environment variable: "1", "true", "yes".
func envBool(name string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "1", "true", "yes":
		return true
	}
	return false
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, errmark.Mark(errors.Newf("--log-level %q: use debug, info, warn or error", level), configError)
	}
	return newRedactingLogger(w, l), nil
}

// serverID names this server in the leader lease.
func serverID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("server-%s-%d", host, os.Getpid())
}

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Make API tokens and their hashes for the tokens file",
		Annotations: map[string]string{noDatabaseAnnotation: "yes"}}
	var namespaces, roles []string
	newCmd := &cobra.Command{
		Use:   "new NAME",
		Short: "Print a new random token, and the entry for the tokens file that holds its hash",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw := make([]byte, 32)
			if _, err := rand.Read(raw); err != nil {
				return err
			}
			token := "cairn_" + base64.RawURLEncoding.EncodeToString(raw)
			entry := server.Token{Name: args[0], SHA256: server.HashToken(token), Namespaces: namespaces}
			for _, r := range roles {
				entry.Roles = append(entry.Roles, server.Role(r))
			}
			if err := server.ValidateTokens([]server.Token{entry}); err != nil {
				return errmark.Mark(err, configError)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "token (shown once; give it to the client): %s\nentry for the tokens file:\n", token)
			return printJSON(cmd, entry)
		},
	}
	newCmd.Flags().StringSliceVar(&namespaces, "namespace", []string{"default"}, `namespaces the token may act in ("*" for all)`)
	newCmd.Flags().StringSliceVar(&roles, "role", []string{"submit", "read"}, "roles: submit, read, operate, admin")
	hashCmd := &cobra.Command{
		Use:   "hash",
		Short: "Read a token on stdin and print its SHA-256, as the tokens file holds it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 4096))
			if err != nil {
				return err
			}
			token := strings.TrimSpace(string(raw))
			if token == "" {
				return errmark.Mark(errors.New("no token on stdin"), configError)
			}
			fmt.Fprintln(cmd.OutOrStdout(), server.HashToken(token))
			return nil
		},
	}
	cmd.AddCommand(newCmd, hashCmd)
	return cmd
}

// callbackSecret is --callback-secret's bytes, nil when none is given.
func callbackSecret(f *serverFlags) []byte {
	if v := f.callbackSecret.get(); v != "" {
		return []byte(v)
	}
	return nil
}
