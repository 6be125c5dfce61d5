#!/usr/bin/env bash
# compare-peers.sh: cairn against River and DBOS Transact on one PostgreSQL,
# one system after the other, then a table of the figures and their ratios.
#
# Runs, in order:
#   riverbench -mode burndown -n $RIVER_N            (drain a pre-inserted backlog)
#   riverbench -mode latency -n $LATENCY_RUNS        (one job at a time)
#   dbosbench  -mode queue -n $WORKFLOW_N -steps 3   (and -steps 1)
#   cairn bench throughput -n $CAIRN_N
#   cairn bench workflow -n $WORKFLOW_N --steps 3    (and --steps 1, to set beside DBOS)
#   cairn bench latency --rate $LATENCY_RATE --duration $LATENCY_DURATION
#   riversqlitebench -n $SQLITE_N                    (River on its SQLite driver)
#   cairn bench throughput -n $SQLITE_N              (no database URL: cairn's embedded store)
#   cairn bench latency (the same, on the embedded store)
#
# Each system works in a database of its own (created if missing):
# $RIVER_DB, $DBOS_DB and $CAIRN_DB on the server of $CAIRN_DATABASE_URL
# (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).
# cairn bench drops and recreates its schema (cairn_bench) in $CAIRN_DB;
# riverbench truncates river_job in $RIVER_DB; this script drops DBOS's
# schema (dbos) in $DBOS_DB before each dbosbench run, since dbosbench
# counts every successful workflow in the database, earlier runs' included.
#
# The peers are in $PEERS_DIR (default ../shared/peers from the repository
# root); they and cairn are built into a temporary directory first, so no
# compile time is measured. Logs and JSON stay in $LOG_DIR (default: a new
# temporary directory, printed at the end).
#
# Needs go, psql, awk, and jq or python3. Takes several minutes.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEERS_DIR=${PEERS_DIR:-$ROOT/../shared/peers}
BASE_URL=${CAIRN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
RIVER_DB=${RIVER_DB:-river}
DBOS_DB=${DBOS_DB:-dbos}
CAIRN_DB=${CAIRN_DB:-cairn_bench}
RIVER_N=${RIVER_N:-100000}
CAIRN_N=${CAIRN_N:-100000}
WORKFLOW_N=${WORKFLOW_N:-20000}
LATENCY_RUNS=${LATENCY_RUNS:-200} # River's latency mode: sequential jobs, ~250 ms each
LATENCY_RATE=${LATENCY_RATE:-100}
LATENCY_DURATION=${LATENCY_DURATION:-10s}
SQLITE_N=${SQLITE_N:-20000} # riversqlitebench's default; River on SQLite drains ~3,000 jobs/s

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'compare-peers: %s\n' "$*" >&2; exit 1; }

for tool in go psql awk; do
  command -v "$tool" >/dev/null || die "needs $tool on PATH"
done
if command -v jq >/dev/null; then
  JSON=jq
elif command -v python3 >/dev/null; then
  JSON=python3
else
  die "needs jq or python3 to read cairn's JSON"
fi
[ -d "$PEERS_DIR/riverbench" ] && [ -d "$PEERS_DIR/dbosbench" ] && [ -d "$PEERS_DIR/riversqlitebench" ] ||
  die "peers not found in $PEERS_DIR (set PEERS_DIR)"

# with_db URL DB prints URL with its database replaced by DB.
with_db() {
  local url=$1 db=$2 query="" base authority
  base=${url%%\?*}
  [[ $url == *\?* ]] && query="?${url#*\?}"
  authority=${base#*://}
  printf '%s://%s/%s%s\n' "${base%%://*}" "${authority%%/*}" "$db" "$query"
}

# jget FILE PATH prints a field of a JSON file. PATH is dotted; a part
# name[key=value] picks the element of array name whose key is value.
jget() {
  local file=$1 path=$2
  if [ "$JSON" = jq ]; then
    local filter="" part parts
    IFS=. read -ra parts <<<"$path"
    for part in "${parts[@]}"; do
      if [[ $part =~ ^([a-z_0-9]+)\[([a-z_0-9]+)=([^]]+)\]$ ]]; then
        filter+=".${BASH_REMATCH[1]}[] | select(.${BASH_REMATCH[2]} == ${BASH_REMATCH[3]}) | "
      else
        filter+=".$part | "
      fi
    done
    jq -r "${filter% | }" "$file"
  else
    python3 - "$file" "$path" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
for part in sys.argv[2].split("."):
    m = re.fullmatch(r"([a-z_0-9]+)\[([a-z_0-9]+)=([^]]+)\]", part)
    d = next(x for x in d[m[1]] if str(x[m[2]]) == m[3]) if m else d[part]
print(d)
PY
  fi
}

# field LINE KEY prints the value after "KEY=" in a RESULT line.
field() {
  awk -v key="$2" '{
    for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit }
  }' <<<"$1"
}

# ms DURATION converts a Go duration (1.5ms, 850µs, 1m2.5s) to milliseconds.
ms() {
  LC_ALL=C awk -v d="$1" 'BEGIN {
    total = 0
    while (match(d, /^[0-9.]+/)) {
      num = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
      if (sub(/^ns/, "", d)) f = 1e-6
      else if (sub(/^(us|\302\265s|\316\274s)/, "", d)) f = 1e-3
      else if (sub(/^ms/, "", d)) f = 1
      else if (sub(/^s/, "", d)) f = 1e3
      else if (sub(/^m/, "", d)) f = 6e4
      else if (sub(/^h/, "", d)) f = 3.6e6
      else { print "-"; exit }
      total += num * f
    }
    printf "%.2f\n", total
  }'
}

# ratio A B prints A/B, or "-" when either is missing.
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    if (a == "" || b == "" || a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b
  }'
}

# result LOG prints the log's RESULT line, or dies.
result() {
  grep -m1 '^RESULT' "$1" || die "no RESULT line in $1"
}

LOG_DIR=${LOG_DIR:-$(mktemp -d -t compare-peers.XXXXXX)}
mkdir -p "$LOG_DIR"
BIN=$(mktemp -d -t compare-peers-bin.XXXXXX)
trap 'rm -rf "$BIN"' EXIT

log "creating databases $RIVER_DB, $DBOS_DB, $CAIRN_DB if missing"
for db in "$RIVER_DB" "$DBOS_DB" "$CAIRN_DB"; do
  exists=$(psql "$BASE_URL" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")
  [ "$exists" = 1 ] || psql "$BASE_URL" -qc "CREATE DATABASE \"$db\""
done
RIVER_URL=$(with_db "$BASE_URL" "$RIVER_DB")
DBOS_URL=$(with_db "$BASE_URL" "$DBOS_DB")
CAIRN_URL=$(with_db "$BASE_URL" "$CAIRN_DB")

log "building cairn, riverbench, riversqlitebench and dbosbench into $BIN"
(cd "$ROOT" && go build -o "$BIN/cairn" ./cmd/cairn)
(cd "$PEERS_DIR/riverbench" && go build -o "$BIN/riverbench" .)
(cd "$PEERS_DIR/riversqlitebench" && go build -o "$BIN/riversqlitebench" .)
(cd "$PEERS_DIR/dbosbench" && go build -o "$BIN/dbosbench" .)

# CPU per task: what PostgreSQL and the benchmark process spent, from
# /proc, so the figure does not move with whatever else the machine runs.
# PostgreSQL's is the postmaster's own and its exited children's times
# (utime, stime, cutime, cstime: a backend's time joins the postmaster's
# cutime/cstime when it exits) plus its live children's, in clock ticks.
# The benchmark process's is its user and system time (GNU time, or bash's
# times when /usr/bin/time is missing). Where /proc or the data directory
# cannot be read (a remote server), the rows say "-".
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
PG_PID=$(head -n1 "$(psql "$BASE_URL" -tAc 'SHOW data_directory' 2>/dev/null)/postmaster.pid" 2>/dev/null || true)
pg_ticks() {
  [ -n "$PG_PID" ] && [ -r "/proc/$PG_PID/stat" ] || { echo -; return; }
  local total child
  total=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$PG_PID/stat")
  for child in $(ps --ppid "$PG_PID" -o pid= 2>/dev/null); do
    [ -r "/proc/$child/stat" ] || continue
    total=$((total + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$child/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}

# Work per task in the database: transactions committed or rolled back and
# buffers touched (hit or read) in the run's database (pg_stat_database),
# and WAL written by the whole server (pg_stat_wal; the machine is quiet).
# pg_io DB prints "transactions buffers wal_bytes wal_records".
pg_io() {
  psql "$BASE_URL" -tAF' ' -c "SELECT d.xact_commit + d.xact_rollback, d.blks_hit + d.blks_read, w.wal_bytes, w.wal_records
    FROM pg_stat_database AS d, pg_stat_wal AS w WHERE d.datname = '$1'" 2>/dev/null || echo "- - - -"
}
# db_of NAME is the database run NAME works in.
db_of() {
  case $1 in
    river-*) echo "$RIVER_DB" ;;
    dbos-*) echo "$DBOS_DB" ;;
    *) echo "$CAIRN_DB" ;;
  esac
}

# run NAME CMD... runs a benchmark, its output to $LOG_DIR/NAME.log, and
# records in $LOG_DIR/NAME.cpu the CPU seconds PostgreSQL and the process
# spent on it ("pg proc", or "-" where not measured), and in
# $LOG_DIR/NAME.io what pg_io counted during it.
run() {
  local name=$1 before after io_before
  shift
  log "$name: $*"
  io_before=$(pg_io "$(db_of "$name")")
  before=$(pg_ticks)
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f '%U %S' -o "$LOG_DIR/$name.time" "$@" >"$LOG_DIR/$name.log" 2>"$LOG_DIR/$name.err" || {
      tail -n 20 "$LOG_DIR/$name.err" >&2
      die "$name failed (logs in $LOG_DIR)"
    }
  else
    "$@" >"$LOG_DIR/$name.log" 2>"$LOG_DIR/$name.err" || {
      tail -n 20 "$LOG_DIR/$name.err" >&2
      die "$name failed (logs in $LOG_DIR)"
    }
    echo "- -" >"$LOG_DIR/$name.time"
  fi
  # A backend's time joins the postmaster's only once it is reaped: give
  # the run's closed connections a moment to be.
  sleep 2
  after=$(pg_ticks)
  awk -v b="$before" -v a="$after" -v t="$CLK_TCK" '
    NR == 1 { proc = ($1 == "-" ? "-" : $1 + $2) }
    END { printf "%s %s\n", (b == "-" || a == "-") ? "-" : (a - b) / t, proc }' "$LOG_DIR/$name.time" >"$LOG_DIR/$name.cpu"
  awk -v b="$io_before" -v a="$(pg_io "$(db_of "$name")")" 'BEGIN {
    nb = split(b, x, " "); na = split(a, y, " ")
    for (i = 1; i <= 4; i++) printf "%s%s", (nb < 4 || na < 4 || x[i] == "-" || y[i] == "-") ? "-" : y[i] - x[i], (i < 4 ? " " : "\n")
  }' >"$LOG_DIR/$name.io"
}

# io_per NAME TASKS FIELD prints field FIELD (1 transactions, 2 buffers,
# 3 WAL bytes, 4 WAL records) of run NAME's .io per task.
io_per() {
  awk -v n="$2" -v f="$3" '{ if ($f == "-" || n + 0 == 0) print "-"; else printf "%.2f\n", $f / n }' "$LOG_DIR/$1.io"
}
# per_xact NAME TASKS prints run NAME's tasks per transaction.
per_xact() {
  awk -v n="$2" '{ if ($1 == "-" || $1 + 0 == 0) print "-"; else printf "%.1f\n", n / $1 }' "$LOG_DIR/$1.io"
}

# cpu_us NAME TASKS prints the CPU microseconds per task of run NAME:
# PostgreSQL's and the process's together, "-" when either is unknown.
cpu_us() {
  awk -v n="$2" '{ if ($1 == "-" || $2 == "-" || n + 0 == 0) print "-"; else printf "%.1f\n", ($1 + $2) * 1e6 / n }' "$LOG_DIR/$1.cpu"
}
# cpu_pg_us NAME TASKS prints PostgreSQL's share alone.
cpu_pg_us() {
  awk -v n="$2" '{ if ($1 == "-" || n + 0 == 0) print "-"; else printf "%.1f\n", $1 * 1e6 / n }' "$LOG_DIR/$1.cpu"
}

run river-burndown "$BIN/riverbench" -db "$RIVER_URL" -mode burndown -n "$RIVER_N"
run river-latency "$BIN/riverbench" -db "$RIVER_URL" -mode latency -n "$LATENCY_RUNS"
reset_dbos() { PGOPTIONS='-c client_min_messages=warning' psql "$DBOS_URL" -qc 'DROP SCHEMA IF EXISTS dbos CASCADE'; }
reset_dbos
run dbos-queue-3 "$BIN/dbosbench" -db "$DBOS_URL" -mode queue -n "$WORKFLOW_N" -steps 3
reset_dbos
run dbos-queue-1 "$BIN/dbosbench" -db "$DBOS_URL" -mode queue -n "$WORKFLOW_N" -steps 1
# An array, not a function: run measures the process it starts.
cairn=("$BIN/cairn" --database-url "$CAIRN_URL" -o json bench)
run cairn-throughput "${cairn[@]}" throughput -n "$CAIRN_N"
run cairn-workflow-3 "${cairn[@]}" workflow -n "$WORKFLOW_N" --steps 3
run cairn-workflow-1 "${cairn[@]}" workflow -n "$WORKFLOW_N" --steps 1
run cairn-latency "${cairn[@]}" latency --rate "$LATENCY_RATE" --duration "$LATENCY_DURATION"
# The embedded pair. River's file is in $BIN, removed with it; cairn's bench
# makes a fresh file in the temporary directory when it has no database URL
# (CAIRN_DATABASE_URL unset for it, or it would run on PostgreSQL).
run river-sqlite "$BIN/riversqlitebench" -db "$BIN/riversqlitebench.db" -n "$SQLITE_N"
run cairn-sqlite env -u CAIRN_DATABASE_URL "$BIN/cairn" -o json bench throughput -n "$SQLITE_N"
run cairn-sqlite-latency env -u CAIRN_DATABASE_URL "$BIN/cairn" -o json bench latency --rate "$LATENCY_RATE" --duration "$LATENCY_DURATION"

# River.
line=$(result "$LOG_DIR/river-burndown.log")
river_drain=$(field "$line" jobs/sec)
line=$(result "$LOG_DIR/river-latency.log")
river_start=${line%%|*}
river_done=${line#*|}
river_start_p50=$(ms "$(field "$river_start" p50)")
river_start_p99=$(ms "$(field "$river_start" p99)")
river_done_p50=$(ms "$(field "$river_done" p50)")
river_done_p99=$(ms "$(field "$river_done" p99)")
river_sqlite=$(field "$(result "$LOG_DIR/river-sqlite.log")" jobs/sec)
cairn_sqlite=$(jget "$LOG_DIR/cairn-sqlite.log" drain_per_second)
# DBOS: its wall time runs from the first enqueue, with workers running.
dbos_wf3=$(field "$(result "$LOG_DIR/dbos-queue-3.log")" workflows/sec)
dbos_wf1=$(field "$(result "$LOG_DIR/dbos-queue-1.log")" workflows/sec)
# cairn.
j=$LOG_DIR/cairn-throughput.log
cairn_insert=$(jget "$j" insert_per_second)
cairn_drain=$(jget "$j" drain_per_second)
endtoend() { awk -v n="$(jget "$1" params.tasks)" -v a="$(jget "$1" insert_seconds)" -v b="$(jget "$1" drain_seconds)" 'BEGIN { printf "%.1f\n", n / (a + b) }'; }
j=$LOG_DIR/cairn-workflow-3.log
cairn_wf3=$(jget "$j" drain_per_second)
cairn_wf3_e2e=$(endtoend "$j")
cairn_steps3=$(jget "$j" steps_per_second)
j=$LOG_DIR/cairn-workflow-1.log
cairn_wf1=$(jget "$j" drain_per_second)
cairn_wf1_e2e=$(endtoend "$j")
j=$LOG_DIR/cairn-latency.log
lat() { jget "$j" "runs[steps=$1].$2"; }
cairn_start_p50=$(lat 1 schedule_to_start.p50_ms)
cairn_start_p99=$(lat 1 schedule_to_start.p99_ms)
cairn_done_p50=$(lat 1 schedule_to_completed.p50_ms)
cairn_done_p99=$(lat 1 schedule_to_completed.p99_ms)
cairn_rec_p50=$(lat 1 schedule_to_recorded.p50_ms)
cairn_rec_p99=$(lat 1 schedule_to_recorded.p99_ms)
cairn_wf3_done_p50=$(lat 3 schedule_to_completed.p50_ms)
cairn_wf3_done_p99=$(lat 3 schedule_to_completed.p99_ms)
cairn_accept_p50=$(lat 1 schedule_to_accepted.p50_ms)
cairn_accept_p99=$(lat 1 schedule_to_accepted.p99_ms)
j=$LOG_DIR/cairn-sqlite-latency.log
cairn_sqlite_start_p50=$(lat 1 schedule_to_start.p50_ms)
cairn_sqlite_start_p99=$(lat 1 schedule_to_start.p99_ms)

river_cpu=$(cpu_us river-burndown "$RIVER_N")
river_cpu_pg=$(cpu_pg_us river-burndown "$RIVER_N")
cairn_cpu=$(cpu_us cairn-throughput "$CAIRN_N")
cairn_cpu_pg=$(cpu_pg_us cairn-throughput "$CAIRN_N")

river_xacts=$(per_xact river-burndown "$RIVER_N")
cairn_xacts=$(per_xact cairn-throughput "$CAIRN_N")
river_bufs=$(io_per river-burndown "$RIVER_N" 2)
cairn_bufs=$(io_per cairn-throughput "$CAIRN_N" 2)
river_wal=$(io_per river-burndown "$RIVER_N" 3)
cairn_wal=$(io_per cairn-throughput "$CAIRN_N" 3)
river_walrec=$(io_per river-burndown "$RIVER_N" 4)
cairn_walrec=$(io_per cairn-throughput "$CAIRN_N" 4)

num() { awk -v x="$1" -v f="$2" 'BEGIN { if (x == "" || x == "-") print "-"; else printf f "\n", x }'; }
row() { printf '%-44s %12s %12s %12s   %s\n' "$@"; }

echo
echo "cairn vs peers on $(psql "$BASE_URL" -tAc 'SHOW server_version' | cut -d' ' -f1), $(nproc) CPUs, $(go env GOVERSION), $(date -u +%Y-%m-%dT%H:%MZ)"
echo
row "" River DBOS cairn ratio
row "drain, 1-step (tasks/s)" "$(num "$river_drain" %.0f)" - "$(num "$cairn_drain" %.0f)" \
  "cairn/River $(ratio "$cairn_drain" "$river_drain")"
row "insert (tasks/s)" - - "$(num "$cairn_insert" %.0f)" ""
row "CPU per task, insert+drain (µs)" "$(num "$river_cpu" %.1f)" - "$(num "$cairn_cpu" %.1f)" \
  "cairn/River $(ratio "$cairn_cpu" "$river_cpu")"
row "  of which PostgreSQL (µs)" "$(num "$river_cpu_pg" %.1f)" - "$(num "$cairn_cpu_pg" %.1f)" \
  "cairn/River $(ratio "$cairn_cpu_pg" "$river_cpu_pg")"
row "  tasks per transaction, insert+drain" "$(num "$river_xacts" %.0f)" - "$(num "$cairn_xacts" %.0f)" \
  "cairn/River $(ratio "$cairn_xacts" "$river_xacts")"
row "  buffers touched per task" "$(num "$river_bufs" %.1f)" - "$(num "$cairn_bufs" %.1f)" \
  "cairn/River $(ratio "$cairn_bufs" "$river_bufs")"
row "  WAL per task (bytes / records)" "$(num "$river_wal" %.0f)/$(num "$river_walrec" %.1f)" - "$(num "$cairn_wal" %.0f)/$(num "$cairn_walrec" %.1f)" \
  "cairn/River $(ratio "$cairn_wal" "$river_wal")"
row "workflows/s, 3 steps (cairn: drain)" - "$(num "$dbos_wf3" %.0f)" "$(num "$cairn_wf3" %.0f)" \
  "cairn/DBOS $(ratio "$cairn_wf3" "$dbos_wf3")"
row "workflows/s, 3 steps (cairn: insert+drain)" - "$(num "$dbos_wf3" %.0f)" "$(num "$cairn_wf3_e2e" %.0f)" \
  "cairn/DBOS $(ratio "$cairn_wf3_e2e" "$dbos_wf3")"
row "steps/s, 3-step workflows" - - "$(num "$cairn_steps3" %.0f)" ""
row "workflows/s, 1 step (cairn: drain)" - "$(num "$dbos_wf1" %.0f)" "$(num "$cairn_wf1" %.0f)" \
  "cairn/DBOS $(ratio "$cairn_wf1" "$dbos_wf1")"
row "workflows/s, 1 step (cairn: insert+drain)" - "$(num "$dbos_wf1" %.0f)" "$(num "$cairn_wf1_e2e" %.0f)" \
  "cairn/DBOS $(ratio "$cairn_wf1_e2e" "$dbos_wf1")"
row "latency to start p50 (ms)" "$(num "$river_start_p50" %.2f)" - "$(num "$cairn_start_p50" %.2f)" \
  "cairn/River $(ratio "$cairn_start_p50" "$river_start_p50")"
row "latency to start p99 (ms)" "$(num "$river_start_p99" %.2f)" - "$(num "$cairn_start_p99" %.2f)" \
  "cairn/River $(ratio "$cairn_start_p99" "$river_start_p99")"
row "  Start returns p50/p99 (ms)" - - "$(num "$cairn_accept_p50" %.2f)/$(num "$cairn_accept_p99" %.2f)" ""
row "latency to completed p50 (ms)" "$(num "$river_done_p50" %.2f)" - "$(num "$cairn_done_p50" %.2f)" \
  "cairn/River $(ratio "$cairn_done_p50" "$river_done_p50")"
row "latency to completed p99 (ms)" "$(num "$river_done_p99" %.2f)" - "$(num "$cairn_done_p99" %.2f)" \
  "cairn/River $(ratio "$cairn_done_p99" "$river_done_p99")"
row "latency to completion recorded p50/p99 (ms)" - - "$(num "$cairn_rec_p50" %.2f)/$(num "$cairn_rec_p99" %.2f)" ""
row "3-step workflow to completed p50/p99 (ms)" - - "$(num "$cairn_wf3_done_p50" %.2f)/$(num "$cairn_wf3_done_p99" %.2f)" ""
row "drain on SQLite, 1-step (tasks/s)" "$(num "$river_sqlite" %.0f)" - "$(num "$cairn_sqlite" %.0f)" \
  "cairn/River $(ratio "$cairn_sqlite" "$river_sqlite")"
row "latency to start on SQLite p50/p99 (ms)" - - "$(num "$cairn_sqlite_start_p50" %.2f)/$(num "$cairn_sqlite_start_p99" %.2f)" ""
cat <<EOF

Rates: higher is better; latencies: lower is better (a ratio under 1 favours cairn).
Method notes:
- drain: River $RIVER_N jobs, cairn $CAIRN_N tasks, both inserted first; River counts its
  completed events, cairn counts the tasks its done notifications name (the
  embedded store, which has none, polls every 10 ms), then checks the database once.
- DBOS queue: $WORKFLOW_N workflows enqueued by 8 goroutines while its workers run; its
  time runs from the first enqueue, so compare it with cairn's insert+drain row.
- latency: River runs $LATENCY_RUNS jobs one at a time; cairn starts $LATENCY_RATE tasks/s
  for $LATENCY_DURATION (open loop). "to completed" is River's completed event
  (its completer batches) and the return of cairn's Client.Wait;
  "completion recorded" is cairn's created_at -> finished_at; "Start returns" is
  from cairn's Client.Start call to its return (the task durable).
- CPU per task: PostgreSQL's CPU time (the postmaster and its backends,
  exited ones included, from /proc) plus the benchmark process's user and
  system time, over the drain run (its insert included), per task: the figure
  that does not move with the machine's neighbours.
- drain on SQLite: River's SQLite driver and cairn's embedded store, $SQLITE_N tasks each,
  inserted first, each in a fresh file (no PostgreSQL involved). Latency to start on
  SQLite: cairn's latency bench on its embedded store (River's bench has no such mode).
- The machine and the database may be shared: compare ratios from one run.

Logs: $LOG_DIR
EOF
