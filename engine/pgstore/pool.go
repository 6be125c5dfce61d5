package pgstore

import (
	"context"
	stderrors "errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pooler names what sits between cairn and PostgreSQL, so the pool speaks
// to it in a way it can carry.
type Pooler string

const (
	// PoolerNone: cairn talks to PostgreSQL itself (or through a TCP proxy),
	// and prepares its statements once per connection.
	PoolerNone Pooler = "none"
	// PoolerSession: a pooler in session mode (PgBouncer pool_mode=session),
	// which hands a client one server connection for as long as it is
	// connected: the same as none to cairn.
	PoolerSession Pooler = "session"
	// PoolerTransaction: a pooler in transaction mode (PgBouncer
	// pool_mode=transaction), which hands a client a server connection per
	// transaction. Statements are described once and sent unnamed with every
	// execution (pgx's QueryExecModeCacheDescribe): a named statement
	// prepared on one server connection does not exist on the next, and
	// PgBouncer before 1.21 cannot track them. LISTEN does not work through
	// it: give the listener its own URL ([Config.ListenURL]).
	PoolerTransaction Pooler = "transaction"
)

// ParsePooler reads a --pooler value; "" is [PoolerNone].
func ParsePooler(v string) (Pooler, error) {
	switch p := Pooler(v); p {
	case "", PoolerNone:
		return PoolerNone, nil
	case PoolerSession, PoolerTransaction:
		return p, nil
	}
	return "", errors.Newf("pooler %q: use none, session or transaction", v)
}

// Pool defaults: what a pool gets when its URL does not say.
const (
	// DefaultMaxConnIdleTime: an idle connection is closed after this long
	// (pgx's own default is 30 minutes), so a burst's connections go back
	// to the server in minutes.
	DefaultMaxConnIdleTime = 2 * time.Minute
	// DefaultHealthCheckPeriod: how often the pool closes idle and expired
	// connections.
	DefaultHealthCheckPeriod = 30 * time.Second
	// DefaultConnectTimeout bounds a new connection's dial and start-up
	// when the URL sets no connect_timeout (libpq's default is none): a
	// host that drops packets, or accepts and never answers, fails its
	// requests with store.ErrUnavailable in seconds, not minutes.
	DefaultConnectTimeout = 10 * time.Second
)

// PoolOptions are a caller's defaults for a pool: each applies only where
// the connection string does not set its own (pool_max_conns,
// default_query_exec_mode, ...), so an operator's URL always wins.
type PoolOptions struct {
	// MaxConns is the pool's size unless the URL sets pool_max_conns.
	// Zero: pgx's default (the larger of 4 and the number of CPUs).
	MaxConns int32
	// Pooler says what the URL points at. Default [PoolerNone].
	Pooler Pooler
	// NoTimelineGuard turns the stale-primary guard off: for a cluster
	// restored so that it writes on a timeline older than one this
	// process has written on (a file-system snapshot), until the process
	// restarts.
	NoTimelineGuard bool
}

// ParsePoolConfig parses a PostgreSQL URL (or keyword/value string) into a
// pool configuration with cairn's defaults where the string is silent: the
// pool size of o.MaxConns, idle connections closed after
// [DefaultMaxConnIdleTime], and the statement mode o.Pooler needs. Its
// connections refuse a former primary (see the stale-primary guard below).
func ParsePoolConfig(connString string, o PoolOptions) (*pgxpool.Config, error) {
	pooler, err := ParsePooler(string(o.Pooler))
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	sets := connStringKeys(connString)
	if o.MaxConns > 0 && !sets["pool_max_conns"] {
		cfg.MaxConns = o.MaxConns
	}
	if !sets["pool_max_conn_idle_time"] {
		cfg.MaxConnIdleTime = DefaultMaxConnIdleTime
	}
	if !sets["pool_health_check_period"] {
		cfg.HealthCheckPeriod = DefaultHealthCheckPeriod
	}
	if cfg.ConnConfig.ConnectTimeout == 0 { // neither connect_timeout nor PGCONNECT_TIMEOUT
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if pooler == PoolerTransaction && !sets["default_query_exec_mode"] {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	if !o.NoTimelineGuard {
		guardTimelines(&cfg.ConnConfig.Config)
	}
	return cfg, nil
}

// connStringKeys returns the keys a connection string sets: a URL's query
// parameters, or a keyword/value string's keywords.
func connStringKeys(connString string) map[string]bool {
	keys := map[string]bool{}
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		if u, err := url.Parse(connString); err == nil {
			for k := range u.Query() {
				keys[k] = true
			}
		}
		return keys
	}
	for _, m := range keywordPattern.FindAllStringSubmatch(connString, -1) {
		keys[m[1]] = true
	}
	return keys
}

// keywordPattern finds a keyword/value string's keywords: a word followed
// by '=' (libpq allows spaces around it), where a value cannot be, skipping
// single-quoted values.
var keywordPattern = regexp.MustCompile(`(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?:'(?:[^'\\]|\\.)*'|\S*)`)

// OpenPool opens a pool on connString with o's defaults ([ParsePoolConfig])
// and checks that the database answers ([NewPool]).
func OpenPool(ctx context.Context, connString string, o PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := ParsePoolConfig(connString, o)
	if err != nil {
		return nil, err
	}
	return NewPool(ctx, cfg)
}

// NewPool opens a pool of cfg and checks that the database answers. With
// several hosts it first reads each one's timeline, for the stale-primary
// guard. Its error names every host cfg lists, and why each refused.
func NewPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	surveyTimelines(ctx, &cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errors.Wrap(err, "open the pool")
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, errors.Mark(errors.Newf("cannot reach the database at %s (%s)", Hosts(cfg.ConnConfig), ConnectFailure(err)), err)
	}
	return pool, nil
}

// ConnectFailure says why a connection failed (or a connection string did
// not parse), without the connection string (which may hold a password):
// each host tried, with its own reason
// ("127.0.0.1:5441: server is in hot standby mode; 127.0.0.1:5442: connection
// refused"), or the error's last clause for any other error.
func ConnectFailure(err error) string {
	var connectErr *pgconn.ConnectError
	if !stderrors.As(err, &connectErr) {
		// pgx's parse errors quote the string first ("cannot parse
		// `URL`: cannot parse pool_max_conns (…)"): what follows names
		// the setting and the cause, without the string.
		if rest, ok := strings.CutPrefix(err.Error(), "cannot parse `"); ok {
			if i := strings.Index(rest, "`: "); i >= 0 {
				return rest[i+3:]
			}
		}
		return lastClause(err.Error())
	}
	inner := stderrors.Unwrap(connectErr)
	var each []error
	if joined, ok := inner.(interface{ Unwrap() []error }); ok {
		each = joined.Unwrap()
	} else if inner != nil {
		each = []error{inner}
	}
	reasons := make([]string, 0, len(each))
	for _, e := range each {
		// sslmode=prefer tries each address twice, with and without
		// TLS: the same reason once is enough.
		if r := perHostReason(e); !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	return strings.Join(reasons, "; ")
}

// perHostReason shortens pgconn's "addr (host): failed to ...: reason" to
// "addr: reason".
func perHostReason(err error) string {
	msg := err.Error()
	addr, _, ok := strings.Cut(msg, " (")
	if !ok || strings.Contains(addr, " ") {
		return lastClause(msg)
	}
	return addr + ": " + lastClause(msg)
}

// lastClause is the text after an error's last ": ", which names the cause.
func lastClause(msg string) string {
	if i := strings.LastIndex(strings.TrimSuffix(msg, ": "), ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// Hosts names every host a connection configuration tries, in order:
// "h1:5432, h2:5432".
func Hosts(cfg *pgx.ConnConfig) string {
	hosts := []string{fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)}
	for _, fb := range cfg.Fallbacks {
		if h := fmt.Sprintf("%s:%d", fb.Host, fb.Port); h != hosts[len(hosts)-1] {
			hosts = append(hosts, h)
		}
	}
	return strings.Join(hosts, ", ")
}

// The stale-primary guard. After a failover the former primary may come
// back read-write (restarted by hand, by a supervisor that did not hear of
// the promotion) on its old timeline, while the promoted standby writes on
// a newer one: a multi-host URL would then send whoever connects first to
// whichever answers first. Every pool ParsePoolConfig makes checks each
// new connection to a primary: the cluster's system identifier and the
// timeline it writes on (pg_walfile_name of the current WAL position
// starts with it); a server on an older timeline than the newest this
// process has seen for that cluster is refused, and the pool tries the
// next host. OpenPool first reads every host of a multi-host URL, so a
// process started after a split brain knows the newest timeline before its
// first write. A cluster restored from a backup keeps its identifier and
// moves to a new timeline too, so it is accepted.

// clusterTimelines holds, per system identifier, the newest timeline this
// process has seen a primary write on.
var clusterTimelines = struct {
	sync.Mutex
	newest map[string]uint64
}{newest: map[string]uint64{}}

// timelineQuery reads a server's cluster, whether it is a standby, and,
// on a primary, the timeline it writes on.
const timelineQuery = `SELECT s.system_identifier, pg_is_in_recovery(),
	CASE WHEN pg_is_in_recovery() THEN '' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END
FROM pg_control_system() AS s`

// serverTimeline runs timelineQuery on conn: the cluster, and the
// timeline of a primary (0 on a standby).
func serverTimeline(ctx context.Context, conn *pgconn.PgConn) (cluster string, timeline uint64, err error) {
	results, err := conn.Exec(ctx, timelineQuery).ReadAll()
	if err != nil {
		return "", 0, err
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 3 {
		return "", 0, errors.New("read the server's timeline: unexpected reply")
	}
	row := results[0].Rows[0]
	if string(row[1]) == "t" {
		return string(row[0]), 0, nil
	}
	timeline, err = strconv.ParseUint(string(row[2]), 16, 32)
	return string(row[0]), timeline, errors.Wrap(err, "read the server's timeline")
}

// seeTimeline records a primary's timeline and reports whether it is the
// newest seen for its cluster (an equal one is).
func seeTimeline(cluster string, timeline uint64) (newest uint64, ok bool) {
	clusterTimelines.Lock()
	defer clusterTimelines.Unlock()
	newest = max(clusterTimelines.newest[cluster], timeline)
	clusterTimelines.newest[cluster] = newest
	return newest, timeline == newest
}

// guardTimelines makes cfg refuse, after its own checks
// (target_session_attrs), a primary on an older timeline than its
// cluster's newest seen.
func guardTimelines(cfg *pgconn.Config) {
	validate := cfg.ValidateConnect
	cfg.ValidateConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
		var err error
		if validate != nil {
			err = validate(ctx, conn)
			// A server only "not preferred" (prefer-standby) may be used
			// on a second pass: it must pass the guard too.
			var notPreferred *pgconn.NotPreferredError
			if err != nil && !stderrors.As(err, &notPreferred) {
				return err
			}
		}
		if refused := refuseFormerPrimary(ctx, conn); refused != nil {
			return refused
		}
		return err
	}
}

// refuseFormerPrimary returns an error when conn is to a primary on an
// older timeline than its cluster's newest seen. A server whose timeline
// cannot be read (the functions revoked from PUBLIC, a proxy that answers
// otherwise) is accepted: the guard only refuses what it knows to be stale.
func refuseFormerPrimary(ctx context.Context, conn *pgconn.PgConn) error {
	cluster, timeline, err := serverTimeline(ctx, conn)
	if err != nil || timeline == 0 {
		return nil
	}
	if newest, ok := seeTimeline(cluster, timeline); !ok {
		return errors.Newf("refused a former primary: it writes on timeline %d of cluster %s, and this process has seen timeline %d (a standby promoted since)",
			timeline, cluster, newest)
	}
	return nil
}

// surveyTimelines reads the timeline of every primary among cfg's hosts
// (with a multi-host URL), so that the guard knows the newest before the
// pool's first connection. The hosts are read at once, each within
// surveyTimeout whatever cfg's connect_timeout; hosts that do not answer in
// time are skipped.
func surveyTimelines(ctx context.Context, cfg *pgconn.Config) {
	if len(cfg.Fallbacks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), surveyTimeout)
	defer cancel()
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for _, h := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...) {
		addr := fmt.Sprintf("%s:%d", h.Host, h.Port)
		if seen[addr] { // sslmode=prefer lists each host twice, with and without TLS
			continue
		}
		seen[addr] = true
		one := cfg.Copy()
		one.Host, one.Port, one.TLSConfig, one.Fallbacks = h.Host, h.Port, h.TLSConfig, nil
		one.ValidateConnect, one.AfterConnect = nil, nil
		wg.Go(func() {
			conn, err := pgconn.ConnectConfig(ctx, one)
			if err != nil {
				return
			}
			defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
			if cluster, timeline, err := serverTimeline(ctx, conn); err == nil && timeline > 0 {
				seeTimeline(cluster, timeline)
			}
		})
	}
	wg.Wait()
}

// surveyTimeout bounds surveyTimelines.
const surveyTimeout = 2 * time.Second
