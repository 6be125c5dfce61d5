package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// Patroni's timings in the test: a lost leader's key expires after
// patroniTTL, and each node looks at the cluster every patroniLoopWait.
// Shorter than Patroni's defaults (30 s, 10 s), as docs/patroni.md
// advises, so that the failovers fit the CI budget; loop_wait +
// 2 × retry_timeout must not exceed ttl.
const (
	patroniTTL          = 10
	patroniLoopWait     = 1
	patroniRetryTimeout = 3
)

// The workload's leases are sized by the rule of docs/patroni.md: a
// worker rides out a database outage of up to LeaseTTL − 2 ×
// HeartbeatInterval (18 s here) with its attempts intact, more than the
// slowest failover here (the leader's key expiring: patroniTTL plus a
// loop, 10.6 s at most in ten runs alone; the margin is for a loaded
// machine). With 5 s the test fails.
const (
	patroniLeaseTTL  = 20 * time.Second
	patroniHeartbeat = time.Second
	patroniSchema    = "patroni"
	patroniWorkers   = 2
	// patroniStartEvery is the submitter's pace, as in the trial.
	patroniStartEvery = 50 * time.Millisecond
)

// patroniCluster is etcd and three Patroni nodes, each with its
// PostgreSQL, on loopback ports: Debian's patroni and etcd-server
// packages, in a temporary directory of the test's own.
type patroniCluster struct {
	t        *testing.T
	dir      string
	etcdPort int
	nodes    []*patroniNode
	pgBin    string
}

type patroniNode struct {
	name           string
	apiPort        int
	pgPort         int
	dataDir        string
	config, logOut string
	mu             sync.Mutex
	cmd            *exec.Cmd
}

// patroniMember is a node as Patroni's /cluster describes it.
type patroniMember struct {
	Name     string `json:"name"`
	Role     string `json:"role"` // leader, sync_standby, replica
	State    string `json:"state"`
	Timeline int    `json:"timeline"`
	Port     int    `json:"port"`
}

// startPatroni starts etcd and three Patroni nodes in synchronous mode and
// waits until one leads with a synchronous standby and a replica.
func startPatroni(t *testing.T) *patroniCluster {
	t.Helper()
	for _, bin := range []string{"patroni", "etcd"} {
		_, err := exec.LookPath(bin)
		require.NoError(t, err, "this test runs a Patroni cluster: install Debian's patroni and etcd-server packages (.ci/run does)")
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	require.NotEmpty(t, bins, "this test runs its own PostgreSQL: install the postgresql server package")
	slices.Sort(bins)
	removeStalePatroni()
	dir, err := os.MkdirTemp("", "cairn-patroni-")
	require.NoError(t, err)
	// The test binary's pid, for removeStalePatroni: Patroni dies with
	// the binary, its PostgreSQL servers do not.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644))
	c := &patroniCluster{t: t, dir: dir, etcdPort: freePort(t), pgBin: filepath.Dir(bins[len(bins)-1])}
	t.Cleanup(c.stop)
	if os.Geteuid() == 0 {
		require.NoError(t, exec.Command("chown", "postgres:postgres", dir).Run())
	}
	c.startEtcd()
	for i := 1; i <= 3; i++ {
		n := &patroniNode{name: fmt.Sprintf("node%d", i), apiPort: freePort(t), pgPort: freePort(t),
			dataDir: filepath.Join(dir, fmt.Sprintf("data%d", i)), config: filepath.Join(dir, fmt.Sprintf("node%d.yml", i)),
			logOut: filepath.Join(dir, fmt.Sprintf("node%d.log", i))}
		require.NoError(t, os.WriteFile(n.config, []byte(c.nodeConfig(n)), 0o644))
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		c.startNode(n)
	}
	c.waitHealthy(90 * time.Second)
	return c
}

func (c *patroniCluster) startEtcd() {
	t := c.t
	peer := freePort(t)
	client := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	log, err := os.Create(filepath.Join(c.dir, "etcd.log"))
	require.NoError(t, err)
	defer log.Close()
	cmd := exec.Command("etcd", "--name", "etcd1", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "etcd1="+peerURL)
	cmd.Stdout, cmd.Stderr = log, log
	dieWithParent(cmd)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitFor(t, 30*time.Second, "etcd to answer", func() bool {
		resp, err := http.Get(client + "/version")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// nodeConfig is a node's Patroni configuration: synchronous_mode, so an
// acknowledged commit is on a standby; primary_start_timeout 0, so a
// crashed primary fails over instead of being restarted in place; and
// pg_rewind, so a former leader rejoins.
func (c *patroniCluster) nodeConfig(n *patroniNode) string {
	return fmt.Sprintf(`scope: cairn-test
namespace: /cairn-test/
name: %[1]s
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd3:
  hosts: 127.0.0.1:%[3]d
bootstrap:
  dcs:
    ttl: %[4]d
    loop_wait: %[5]d
    retry_timeout: %[6]d
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    primary_start_timeout: 0
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 100
  initdb:
    - encoding: UTF8
    - no-sync
  pg_hba:
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
    - local all all trust
postgresql:
  listen: 127.0.0.1:%[7]d
  connect_address: 127.0.0.1:%[7]d
  data_dir: %[8]s
  bin_dir: %[9]s
  pgpass: %[10]s
  authentication:
    replication:
      username: postgres
    superuser:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: %[11]s
    fsync: "off"
`, n.name, n.apiPort, c.etcdPort, patroniTTL, patroniLoopWait, patroniRetryTimeout,
		n.pgPort, n.dataDir, c.pgBin, filepath.Join(c.dir, n.name+".pgpass"), c.dir)
}

// startNode starts a node's Patroni, as the postgres user when we are
// root (initdb refuses root).
func (c *patroniCluster) startNode(n *patroniNode) {
	t := c.t
	log, err := os.OpenFile(n.logOut, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer log.Close()
	cmd := exec.Command("patroni", n.config)
	cmd.Stdout, cmd.Stderr = log, log
	dieWithParent(cmd)
	if os.Geteuid() == 0 {
		runAs(t, cmd, "postgres")
	}
	require.NoError(t, cmd.Start())
	n.mu.Lock()
	n.cmd = cmd
	n.mu.Unlock()
}

// killPatroni kills a node's Patroni the way kill -9 does; its
// PostgreSQL, a process of its own, runs on.
func (n *patroniNode) killPatroni() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return nil
	}
	err := n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
	return err
}

// stopped says whether the node's Patroni was killed.
func (n *patroniNode) stopped() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd == nil
}

// killPostmaster kills a node's PostgreSQL server the way kill -9 does.
func (n *patroniNode) killPostmaster() error {
	pid, err := n.postmasterPID()
	if err != nil {
		return err
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

func (n *patroniNode) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(n.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// members returns the cluster as the first node that answers describes it.
func (c *patroniCluster) members() ([]patroniMember, error) {
	var lastErr error
	for _, n := range c.nodes {
		var body struct {
			Members []patroniMember `json:"members"`
		}
		if err := getJSON(fmt.Sprintf("http://127.0.0.1:%d/cluster", n.apiPort), &body); err != nil {
			lastErr = err
			continue
		}
		return body.Members, nil
	}
	return nil, lastErr
}

func getJSON(url string, into any) error {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// healthy says whether the three nodes run, one leading, one its
// synchronous standby, all on the leader's timeline; it returns the
// leader.
func (c *patroniCluster) healthy() (*patroniNode, bool) {
	members, err := c.members()
	if err != nil || len(members) != len(c.nodes) {
		return nil, false
	}
	var leader *patroniNode
	timeline, sync := 0, false
	for _, m := range members {
		switch m.Role {
		case "leader":
			leader, timeline = c.node(m.Name), m.Timeline
		case "sync_standby":
			sync = true
		}
	}
	if leader == nil || !sync {
		return nil, false
	}
	for _, m := range members {
		if m.State != "running" && m.State != "streaming" || m.Timeline != timeline {
			return nil, false
		}
	}
	return leader, true
}

func (c *patroniCluster) node(name string) *patroniNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// waitHealthy waits until the cluster is healthy and returns its leader.
func (c *patroniCluster) waitHealthy(timeout time.Duration) *patroniNode {
	var leader *patroniNode
	waitFor(c.t, timeout, "the Patroni cluster to have a leader, a synchronous standby and a replica", func() bool {
		l, ok := c.healthy()
		leader = l
		return ok
	})
	return leader
}

// leaderOtherThan returns the leader if the cluster has one other than
// old.
func (c *patroniCluster) leaderOtherThan(old *patroniNode) *patroniNode {
	members, err := c.members()
	if err != nil {
		return nil
	}
	for _, m := range members {
		if m.Role == "leader" && m.Name != old.name {
			return c.node(m.Name)
		}
	}
	return nil
}

// syncStandby returns the leader's synchronous standby.
func (c *patroniCluster) syncStandby() *patroniNode {
	members, err := c.members()
	require.NoError(c.t, err)
	for _, m := range members {
		if m.Role == "sync_standby" {
			return c.node(m.Name)
		}
	}
	c.t.Fatal("no synchronous standby")
	return nil
}

// switchover asks Patroni to hand the leadership from leader to candidate,
// as `patronictl switchover` does.
func (c *patroniCluster) switchover(leader, candidate *patroniNode) {
	body := fmt.Sprintf(`{"leader": %q, "candidate": %q}`, leader.name, candidate.name)
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/switchover", leader.apiPort), "application/json", strings.NewReader(body))
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode, "switchover from %s to %s", leader.name, candidate.name)
}

// url is the multi-host URL docs/patroni.md recommends: every node, the
// one that accepts writes chosen, a bounded connect, no TLS retry.
func (c *patroniCluster) url() string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.pgPort)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") +
		"/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}

// digest reads, from one node alone, how many tasks and events the
// schema holds and a digest of them all.
func (n *patroniNode) digest(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", n.pgPort))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var tasks, events int
	var tasksMD5, eventsMD5 string
	err = conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+patroniSchema+`.tasks),
		(SELECT coalesce(md5(string_agg(id::text || status || last_seq, ',' ORDER BY id)), '') FROM `+patroniSchema+`.tasks),
		(SELECT count(*) FROM `+patroniSchema+`.events),
		(SELECT coalesce(md5(string_agg(task_id::text || seq || type || data::text, ',' ORDER BY task_id, seq)), '') FROM `+patroniSchema+`.events)`).
		Scan(&tasks, &tasksMD5, &events, &eventsMD5)
	return fmt.Sprintf("%d tasks %s, %d events %s", tasks, tasksMD5, events, eventsMD5), err
}

// stop stops every node's Patroni and PostgreSQL, then removes the
// cluster's directory; on a failure it first logs each node's last lines.
func (c *patroniCluster) stop() {
	for _, n := range c.nodes {
		_ = n.killPatroni()
		if c.t.Failed() {
			if b, err := os.ReadFile(n.logOut); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				c.t.Logf("%s's Patroni log, last lines:\n%s", n.name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
		pg := &pgCluster{bin: c.pgBin}
		_ = pg.run("pg_ctl", "-D", n.dataDir, "-m", "immediate", "stop")
	}
	_ = os.RemoveAll(c.dir)
}

// removeStalePatroni stops the servers of clusters left by a test binary
// that died before its cleanup ran (a timeout, a panic): their owner's
// pid is gone (or, without a pid file, they are over an hour old).
func removeStalePatroni() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "cairn-patroni-*"))
	for _, dir := range dirs {
		if !patroniDirStale(dir) {
			continue
		}
		datas, _ := filepath.Glob(filepath.Join(dir, "data*"))
		for _, data := range datas {
			if bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(bins) > 0 {
				_ = (&pgCluster{bin: bins[len(bins)-1]}).run("pg_ctl", "-D", data, "-m", "immediate", "stop")
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// patroniDirStale says whether the test binary that made dir is gone.
func patroniDirStale(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
	if err != nil {
		info, err := os.Stat(dir)
		return err == nil && time.Since(info.ModTime()) > time.Hour
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return true
	}
	// Signal 0 checks that the process exists. A pid reused since keeps
	// the directory: a leak at worst, never a live cluster stopped.
	return syscall.Kill(pid, 0) == syscall.ESRCH
}

// patroniStep is how long each of a task's three steps takes: with a
// task started every patroniStartEvery, about twenty attempts are running
// at any moment, so each failover cuts some short, whose leases must ride
// it out.
const patroniStep = 300 * time.Millisecond

// patroniWorkflow is three steps of patroniStep each, named as
// failoverWorkflow's (requireOnceEach checks them).
var patroniWorkflow = sdk.NewWorkflow("patroni.pipeline", 1, func(ctx workflow.Context, n int) (int, error) {
	for _, name := range []string{"fetch", "extract", "store"} {
		if _, err := workflow.Step(ctx, name, func(context.Context) (int, error) {
			time.Sleep(patroniStep)
			return n, nil
		}, nil); err != nil {
			return 0, err
		}
	}
	return n, nil
}, nil)

// patroniLoad is the trial's workload: a submitter starting a task every
// patroniStartEvery, each with an idempotency key and retried with it
// until acknowledged, and workers running them; it records when starts
// were acknowledged and when each worker started attempts.
type patroniLoad struct {
	t       *testing.T
	url     string
	client  *sdk.Client
	stopped atomic.Bool
	done    chan struct{}

	mu       sync.Mutex
	accepted map[string]uuid.UUID // by idempotency key
	acks     []time.Time
	attempts [patroniWorkers][]time.Time
}

func startPatroniLoad(t *testing.T, url string) *patroniLoad {
	t.Helper()
	l := &patroniLoad{t: t, url: url, done: make(chan struct{}), accepted: map[string]uuid.UUID{}}
	ctx := context.Background()
	_, err := pgstore.Migrate(ctx, l.pool(2), patroniSchema)
	require.NoError(t, err)
	for i := range patroniWorkers {
		w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: l.pool(6), Schema: patroniSchema, Concurrency: 20,
			LeaseTTL: patroniLeaseTTL, HeartbeatInterval: patroniHeartbeat, PollInterval: 200 * time.Millisecond,
			ExpectedFailover: (patroniTTL + patroniLoopWait) * time.Second,
			RescueInterval:   time.Second, Logger: enginetest.Logger(t)})
		require.NoError(t, err)
		wf := sdk.NewWorkflow(patroniWorkflow.TypeName(), patroniWorkflow.TypeVersion(), func(ctx workflow.Context, n int) (int, error) {
			l.mu.Lock()
			l.attempts[i] = append(l.attempts[i], time.Now())
			l.mu.Unlock()
			return patroniWorkflow.Func()(ctx, n)
		}, nil)
		sdk.Register(w, wf)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Stop(ctx)
		})
	}
	l.client, err = sdk.NewClient(sdk.ClientConfig{Pool: l.pool(4), Schema: patroniSchema})
	require.NoError(t, err)
	t.Cleanup(l.client.Close)
	go l.submit()
	return l
}

func (l *patroniLoad) pool(maxConns int32) *pgxpool.Pool {
	l.t.Helper()
	pool, err := pgstore.OpenPool(context.Background(), l.url, pgstore.PoolOptions{MaxConns: maxConns})
	require.NoError(l.t, err)
	l.t.Cleanup(pool.Close)
	return pool
}

// submit starts a task every patroniStartEvery until stopped; a start that
// fails is tried again with its key until acknowledged, as
// docs/patroni.md advises: its first try may have committed.
func (l *patroniLoad) submit() {
	defer close(l.done)
	for n := 0; !l.stopped.Load(); n++ {
		key := fmt.Sprintf("patroni-%d", n)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := l.client.StartDynamic(ctx, patroniWorkflow, n, &sdk.StartOpts{IdempotencyKey: key})
			cancel()
			if err == nil {
				l.mu.Lock()
				l.accepted[key] = res.ID
				l.acks = append(l.acks, time.Now())
				l.mu.Unlock()
				break
			}
			time.Sleep(patroniStartEvery)
		}
		time.Sleep(patroniStartEvery)
	}
}

// stop stops the submitter after its current start.
func (l *patroniLoad) stop() {
	l.stopped.Store(true)
	<-l.done
}

// pauses returns, from `since` on, the longest pause between acknowledged
// starts and the longest pause between one worker's attempts.
func (l *patroniLoad) pauses(since time.Time) (starts, claims time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	starts = longestPause(l.acks, since)
	for i := range l.attempts {
		claims = max(claims, longestPause(l.attempts[i], since))
	}
	return starts, claims
}

func longestPause(at []time.Time, since time.Time) time.Duration {
	var longest time.Duration
	prev := since
	for _, t := range at {
		if t.Before(since) {
			continue
		}
		longest = max(longest, t.Sub(prev))
		prev = t
	}
	return longest
}

// everyWorkerClaimedSince says whether each worker started an attempt
// after t, and the submitter had a start acknowledged.
func (l *patroniLoad) everyWorkerClaimedSince(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.acks) == 0 || !l.acks[len(l.acks)-1].After(t) {
		return false
	}
	for i := range l.attempts {
		a := l.attempts[i]
		if len(a) == 0 || !a[len(a)-1].After(t) {
			return false
		}
	}
	return true
}

// TestPatroniFailover runs the trial's workload on a Patroni cluster of
// three nodes in synchronous mode, through the multi-host URL, across a
// planned switchover, a kill -9 of the leader's PostgreSQL, and a kill -9
// of the leader's Patroni and PostgreSQL (its key left to expire; the node
// restarted to rejoin with pg_rewind). No acknowledged start is lost or
// doubled, every task finishes, each step is recorded once in the one
// attempt of its task (no lease expired: the leases are sized by the rule
// of docs/patroni.md), the same workers run throughout, and the three
// nodes end with identical tasks and events. Each failover's pauses are
// logged.
func TestPatroniFailover(t *testing.T) {
	t.Parallel()
	c := startPatroni(t)
	load := startPatroniLoad(t, c.url())
	time.Sleep(2 * time.Second)

	failovers := []struct {
		name  string
		cause func(leader *patroniNode)
	}{
		{"planned switchover", func(leader *patroniNode) { c.switchover(leader, c.syncStandby()) }},
		{"kill -9 of the leader's PostgreSQL", func(leader *patroniNode) { require.NoError(t, leader.killPostmaster()) }},
		{"kill -9 of the leader's Patroni and PostgreSQL", func(leader *patroniNode) {
			require.NoError(t, leader.killPatroni())
			require.NoError(t, leader.killPostmaster())
		}},
	}
	var causedAt []time.Time
	for _, f := range failovers {
		leader := c.waitHealthy(2 * time.Minute)
		at := time.Now()
		causedAt = append(causedAt, at)
		f.cause(leader)
		var newLeader *patroniNode
		waitFor(t, 2*time.Minute, "a new leader after the "+f.name, func() bool {
			newLeader = c.leaderOtherThan(leader)
			return newLeader != nil
		})
		elected := time.Now()
		if leader.stopped() {
			c.startNode(leader) // its Patroni was killed: it rejoins
		}
		waitFor(t, 2*time.Minute, "starts and every worker's claims after the "+f.name, func() bool {
			return load.everyWorkerClaimedSince(elected)
		})
		starts, claims := load.pauses(at.Add(-time.Second))
		c.waitHealthy(2 * time.Minute)
		t.Logf("%s (%s → %s): new leader seen after %s; no start acknowledged for %s at most, no attempt started by a worker for %s at most; cluster whole again after %s",
			f.name, leader.name, newLeader.name, elected.Sub(at).Round(10*time.Millisecond), starts.Round(10*time.Millisecond),
			claims.Round(10*time.Millisecond), time.Since(at).Round(100*time.Millisecond))
	}
	time.Sleep(time.Second)
	load.stop()

	// Every task finishes; nothing acknowledged is lost, nothing doubled.
	events := finishedTasks(t, load.pool(2), patroniSchema)
	load.mu.Lock()
	accepted := make(map[uuid.UUID]bool, len(load.accepted))
	for _, id := range load.accepted {
		accepted[id] = true
	}
	load.mu.Unlock()
	require.Len(t, events, len(accepted), "the tasks are exactly the acknowledged starts")
	for id := range accepted {
		require.Contains(t, events, id, "an acknowledged start is lost")
	}
	for id, evs := range events {
		requireOnceEach(t, id, evs)
	}
	// The failovers cut attempts short: each ran across one, in its
	// attempt (requireOnceEach). Without any, the leases were not tested.
	across := make([]int, len(causedAt))
	for _, evs := range events {
		var began time.Time
		for _, e := range evs {
			if e.Type() == history.AttemptStarted {
				began = e.At
				break
			}
		}
		ended := evs[len(evs)-1].At
		for i, at := range causedAt {
			if began.Before(at) && ended.After(at) {
				across[i]++
			}
		}
	}
	t.Logf("tasks running across each failover, each finished in its one attempt: %v", across)
	for i, n := range across {
		require.Positive(t, n, "no task ran across the %s", failovers[i].name)
	}

	// The three nodes hold the same tasks and events once the standbys
	// have replayed the leader's last commit.
	ctx := context.Background()
	var digests []string
	waitFor(t, time.Minute, "the three nodes to hold identical tasks and events", func() bool {
		digests = digests[:0]
		for _, n := range c.nodes {
			d, err := n.digest(ctx)
			if err != nil {
				return false
			}
			digests = append(digests, d)
		}
		return digests[0] == digests[1] && digests[1] == digests[2]
	})
	t.Logf("%d starts acknowledged, every task finished once; each node: %s", len(accepted), digests[0])
}
