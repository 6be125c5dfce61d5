"""A worker for cairn's remote steps, in one file of standard-library Python.

It speaks the protocol of docs/remote-steps-protocol.md: it long-polls
``claim`` for the step names it has handlers for, runs each step in a thread,
heartbeats it, sends the chunks a handler ``ctx.stream``-s, and reports
``complete`` or ``fail`` under the step's claim. On stop it drains, then
``release``-s what has not finished.

    worker = Worker("http://localhost:8080", "ocr", concurrency=4)
    worker.register("ocr.page", lambda input, ctx: {"text": read(input["page"])})
    worker.run()
"""

import http.client
import json
import logging
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Worker", "StepContext", "Transient", "Permanent", "WorkerError", "ClaimLost"]

_PREFIX = "/v1/remote-steps"
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}
_RETRY_DELAYS = (0.25, 0.5, 1.0, 2.0)  # retries of the calls under a claim but heartbeat
_CLAIM_BACKOFF_CAP = 30.0
_CALL_TIMEOUT = 10.0
_NETWORK_ERRORS = (OSError, http.client.HTTPException)  # refused, timeouts, resets, bad replies
_MAX_CHUNKS, _MAX_BODY_BYTES = 1000, 4 << 20  # the stream call's limits
_MAX_CHUNK_BYTES, _MAX_NAME_BYTES = 64 << 10, 100


class WorkerError(Exception):
    """A refusal retrying will not help: of the worker itself (401, 403, 400...), raised by run()."""

    def __init__(self, status, code, detail):
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail = status, code, detail


class ClaimLost(WorkerError):
    """Raised by ctx.stream on 409 claim_lost: the step is no longer this worker's; its outcome is dropped."""


class Transient(Exception):
    """A failure worth retrying: sent with class "transient"; ``retry_after`` is in seconds."""

    error_class = "transient"

    def __init__(self, message, kind=None, status=None, attributes=None, retry_after=None):
        super().__init__(message)
        self.kind, self.status, self.attributes, self.retry_after = kind, status, attributes, retry_after


class Permanent(Exception):
    """A failure no retry will fix: sent with class "permanent"."""

    error_class, retry_after = "permanent", None

    def __init__(self, message, kind=None, status=None, attributes=None):
        super().__init__(message)
        self.kind, self.status, self.attributes = kind, status, attributes


def error_body(exc):
    """The protocol's ``error`` object for an exception a handler raised."""
    name = type(exc).__name__
    err = {"message": str(exc) or name, "type": name,
           "class": getattr(exc, "error_class", ""),
           "kind": getattr(exc, "kind", None) or name}
    if getattr(exc, "status", None) is not None:
        err["status"] = int(exc.status)
    if getattr(exc, "attributes", None):
        err["attributes"] = {str(k): str(v) for k, v in exc.attributes.items()}
    if getattr(exc, "retry_after", None) is not None:
        err["retry_after_ms"] = int(round(exc.retry_after * 1000))
    return err


class StepContext:
    """What a handler knows of its step, and its way to heartbeat, stream and see cancellation.

    ``cancelled`` is set when the server asks to cancel, the claim is lost, or the worker stops
    hard. ``deadline`` is a ``time.monotonic()`` instant (from ``start_to_close_ms``) or None.
    """

    def __init__(self, step, worker_id, beat, send):
        self.claim, self.name, self.worker_id = step["claim"], step["name"], worker_id
        self.task_id, self.namespace, self.position = map(step.get, ("task_id", "namespace", "position"))
        self.attempt = step.get("attempt", 1)
        self.cancelled = threading.Event()
        self.cancel_requested = False  # the workflow itself was cancelled
        ms = step.get("start_to_close_ms") or 0
        self.deadline = time.monotonic() + ms / 1000 if ms > 0 else None
        self._beat, self._send = beat, send

    def heartbeat(self):
        """Heartbeat now; never raises on network errors (they are logged)."""
        self._beat()

    def time_left(self):
        """Seconds until the deadline, or None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def stream(self, name, data):
        """Write ``data`` (JSON of at most 64 KiB) to the task's stream ``name`` now; returns its seq.

        Raises, with nothing sent, Permanent for a bad name (kind InvalidStreamName) or a chunk over
        64 KiB (PayloadTooLarge), TypeError/ValueError for data JSON cannot hold. Network errors and
        5xx are retried (a chunk whose answer was lost may be written twice). ClaimLost: the claim
        lost the step; Permanent: refused (413: the claim's 32 MiB are spent); Transient: unreachable.
        """
        return self.stream_many(name, [data])

    def stream_many(self, name, items):
        """stream() for 1-1000 chunks of one stream, in order, in several calls if over 4 MiB in all
        (a call that raises leaves those before it written); returns the last one's seq."""
        items = list(items)
        if not 1 <= len(items) <= _MAX_CHUNKS:
            raise ValueError(f"stream {name!r}: {len(items)} chunks in one call; send 1 to {_MAX_CHUNKS}")
        if not (isinstance(name, str) and name.isprintable() and " " not in name  # as Go's IsPrint, !IsSpace
                and 1 <= len(name.encode()) <= _MAX_NAME_BYTES):
            raise Permanent(f"stream name {name!r}: use 1-{_MAX_NAME_BYTES} bytes of printable UTF-8, "
                            "no spaces", kind="InvalidStreamName")
        batches, size, frame = [], _MAX_BODY_BYTES, len(_json({"stream": name, "data": 0}))  # 0 for a comma
        for data in items:
            n = len(_json(data))  # ASCII JSON: its characters are bytes
            if n > _MAX_CHUNK_BYTES:
                raise Permanent(f"stream {name!r}: a chunk of {n} bytes is over the limit of "
                                f"{_MAX_CHUNK_BYTES}", kind="PayloadTooLarge")
            if size + frame + n > _MAX_BODY_BYTES:  # a new body: '{"chunks":[' ']}', no comma first
                batches, size = batches + [[]], 12
            batches[-1].append({"stream": name, "data": data})
            size += frame + n
        return [self._send(batch) for batch in batches][-1]


class _Response:
    def __init__(self, status, body, headers):
        self.status, self.body = status, body
        self.code, self.detail = body.get("code", ""), body.get("detail", "")
        try:
            self.retry_after = max(0.0, float(headers.get("Retry-After")))  # seconds, or None
        except (TypeError, ValueError):
            self.retry_after = None


class _Http:
    """POSTs JSON and returns a _Response for any HTTP status; raises one of _NETWORK_ERRORS otherwise."""

    def __init__(self, url, token, namespace):
        self.base = url.rstrip("/")
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        if namespace:
            self.headers["Cairn-Namespace"] = namespace
        # Like Go's net/http, do not send loopback traffic through an env proxy.
        host = urllib.parse.urlsplit(self.base).hostname
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self.opener = urllib.request.build_opener(*handlers)

    def post(self, path, body, timeout=_CALL_TIMEOUT):
        req = urllib.request.Request(self.base + path, data=_json(body).encode(),
                                     headers=self.headers, method="POST")
        try:
            with self.opener.open(req, timeout=timeout) as r:
                return _Response(r.status, _parse(r.read()), r.headers)
        except urllib.error.HTTPError as e:
            with e:
                return _Response(e.code, _parse(e.read()), e.headers)


def _parse(raw):  # the answer's JSON object; anything else becomes its detail
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {"detail": raw[:200].decode(errors="replace")}


def _json(value):
    """Compact JSON, as sent: what the server measures a chunk by."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


class _Active:
    """A step this worker holds: its context, thread and where it stands."""

    def __init__(self, step, ctx, interval):
        self.step, self.ctx, self.interval = step, ctx, interval
        self.next_beat = time.monotonic() + interval
        self.settled = False     # an outcome, release or loss is decided: nothing more is sent
        self.reporting = False   # the handler returned; its outcome is being sent
        self.thread = None


class Worker:
    """Claims steps from one queue and runs them with registered handlers."""

    def __init__(self, url, queue, token=None, namespace=None, worker_id=None, concurrency=1,
                 names=None, poll_wait=20, drain_timeout=30.0, logger=None, on_event=None):
        if concurrency < 1 or concurrency > 100:
            raise ValueError("concurrency must be 1-100 (the protocol's max)")
        self.queue, self.concurrency = queue, concurrency
        self.worker_id = (worker_id or f"{socket.gethostname()}:{os.getpid()}")[:200]
        self.names, self.poll_wait, self.drain_timeout = names, poll_wait, drain_timeout
        self.log = logger or logging.getLogger("cairn_worker")
        self.on_event = on_event  # on_event(event, fields): claimed/completed/failed/released/lost/ready
        self._http = _Http(url, token, namespace)
        self._handlers = {}
        self._active = {}                  # claim -> _Active
        self._cond = threading.Condition()  # guards _active and the flags below
        self._stopping, self._hard = threading.Event(), threading.Event()
        self._closed = threading.Event()    # the heartbeat thread's end
        self._wake = threading.Event()      # new steps or the end: the heartbeat thread replans
        self._fatal = None

    def register(self, name, fn):
        """Run ``fn(input, ctx)`` for steps named ``name``; its return value is the output."""
        self._handlers[name] = fn
        return fn

    def step(self, name):
        """Decorator form of register()."""
        return lambda fn: self.register(name, fn)

    def run(self):
        """Work until stop() or SIGTERM/SIGINT, then drain; raises WorkerError if the server refuses us."""
        names = sorted(self.names if self.names is not None else self._handlers)
        missing = [n for n in names if n not in self._handlers]
        if not names or missing:
            raise ValueError(f"no handler for step names {missing or '(none registered)'}")
        restore = self._install_signals()
        try:
            beats = threading.Thread(target=self._heartbeat_loop, name="cairn-heartbeat", daemon=True)
            claims = threading.Thread(target=self._claim_loop, args=(names,), name="cairn-claim", daemon=True)
            for t in (beats, claims):
                t.start()
            self._emit("ready")
            while not self._stopping.wait(0.5):  # a timeout keeps signal handlers responsive
                pass
            self._drain()
            self._closed.set()
            self._wake.set()
            beats.join(5)
            claims.join(self.poll_wait + _CALL_TIMEOUT)  # its claimed-too-late steps get released
        finally:
            restore()
        if self._fatal:
            raise self._fatal

    def stop(self, hard=False):
        """Stop claiming and drain; ``hard`` skips the drain. Safe from any thread."""
        with self._cond:
            self._stopping.set()
            if hard:
                self._hard.set()
            self._cond.notify_all()

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        # The first signal drains; a second one gives up waiting.
        handler = lambda *_: self.stop(hard=self._stopping.is_set())
        old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        return lambda: [signal.signal(s, h) for s, h in old.items()]

    def _drain(self):
        """Let running steps finish for drain_timeout, then release the rest."""
        end = time.monotonic() + self.drain_timeout
        with self._cond:
            # Lost steps (settled) are not waited for: nothing of theirs will be sent.
            while (any(not a.settled for a in self._active.values())
                   and not self._hard.is_set() and time.monotonic() < end):
                self._cond.wait(min(0.5, max(0.0, end - time.monotonic())))
            unfinished = [a for a in self._active.values() if not a.settled and not a.reporting]
            for a in unfinished:
                a.settled = True
                a.ctx.cancelled.set()
            reporting = [a for a in self._active.values() if a.reporting]
        for a in unfinished:
            self._release(a.step)
        for a in reporting:  # an outcome being sent is worth the few seconds its retries take
            a.thread.join(sum(_RETRY_DELAYS) + _CALL_TIMEOUT)

    def _claim_loop(self, names):
        delay = 0.0
        try:
            while free := self._wait_free_slots():  # 0 once stopping
                body = {"queue": self.queue, "worker": self.worker_id, "names": names,
                        "max": free, "wait_seconds": self.poll_wait}
                try:
                    r = self._http.post(f"{_PREFIX}/claim", body, timeout=self.poll_wait + _CALL_TIMEOUT)
                    why = f"{r.status} {r.code}"
                except _NETWORK_ERRORS as e:
                    r, why = None, str(e)
                if r is not None and r.status == 200:
                    delay = 0.0
                    self._start(r.body.get("steps") or [])
                    continue
                if r is not None and r.status < 500 and r.status not in (408, 429):
                    raise WorkerError(r.status, r.code, r.detail)  # misconfigured, not the network
                delay = min(_CLAIM_BACKOFF_CAP, max(0.5, delay * 2))
                wait = min(_CLAIM_BACKOFF_CAP, (r and r.retry_after) or delay)
                self.log.warning("claim: %s; retrying in %.1fs", why, wait)
                self._stopping.wait(wait)
        except Exception as e:  # whatever ends the loop ends run(), reported there
            self._fatal = e if isinstance(e, WorkerError) else WorkerError(0, "client_error", repr(e))
            self.log.error("claim loop stopped: %s", e)
            self.stop()

    def _wait_free_slots(self):
        with self._cond:
            while not self._stopping.is_set() and len(self._active) >= self.concurrency:
                self._cond.wait()
            return 0 if self._stopping.is_set() else self.concurrency - len(self._active)

    def _start(self, steps):
        """Run the claimed steps, or release them if stop came while the claim was in flight."""
        with self._cond:
            late = self._stopping.is_set()
            started = []
            for step in [] if late else steps:
                interval = (step.get("heartbeat_timeout_ms") or 30000) / 3000
                a = _Active(step, None, interval)
                a.ctx = StepContext(step, self.worker_id, lambda a=a: self._heartbeat(a),
                                    lambda chunks, a=a: self._stream(a, chunks))
                a.thread = threading.Thread(target=self._run_step, args=(a,), daemon=True,
                                            name=f"cairn-step-{step['name']}")
                self._active[step["claim"]] = a
                started.append(a)
            for step in steps:  # under the lock, so "claimed" precedes any "released"
                self._emit("claimed", claim=step["claim"], name=step["name"], position=step.get("position"),
                           attempt=step.get("attempt"), task_id=step.get("task_id"))
        for step in steps if late else []:
            self._release(step)
        for a in started:
            a.thread.start()
        if started:
            self._wake.set()  # a short lease may need its first beat before the loop's next turn

    def _run_step(self, a):
        ctx = a.ctx
        try:
            try:
                handler = self._handlers.get(ctx.name)
                if handler is None:
                    raise LookupError(f"no handler for step {ctx.name!r} on this worker")
                body = {"output": handler(a.step.get("input"), ctx)}
                _json(body)  # an unserialisable output fails the step
                if ctx.cancel_requested:  # the protocol asks a cancelled step to fail, not complete
                    body = {"error": {"message": "step cancelled: the workflow was cancelled",
                                      "type": "Cancelled", "class": "permanent", "kind": "Cancelled"}}
            except Exception as exc:
                self.log.info("step %s (%s) failed: %r", ctx.name, ctx.claim, exc)
                body = {"error": error_body(exc)}
            with self._cond:
                if a.settled:  # released or lost meanwhile: the server would refuse it
                    return
                a.reporting = True
            action = "complete" if "output" in body else "fail"
            self._emit(self._send_outcome(a.step["claim"], action, body), claim=ctx.claim)
        finally:
            with self._cond:
                a.settled = True
                self._active.pop(ctx.claim, None)
                self._cond.notify_all()

    def _call(self, claim, action, body):
        """POST under a claim, retrying network errors and 5xx; returns (response or None, why)."""
        for delay in _RETRY_DELAYS + (None,):
            try:
                r = self._http.post(f"{_PREFIX}/{_esc(claim)}/{action}", body)
                why = f"{r.status} {r.code}"
            except _NETWORK_ERRORS as e:
                r, why = None, str(e)
            if (r is not None and r.status < 500) or delay is None:
                return r, why
            if r is not None and r.retry_after is not None:
                delay = min(r.retry_after, 5.0)
            self.log.warning("%s %s: %s; retrying in %.2fs", action, claim, why, delay)
            time.sleep(delay)

    def _send_outcome(self, claim, action, body):
        """POST complete/fail/release (idempotent per claim, so retries are safe); returns the event."""
        r, why = self._call(claim, action, body)
        if r is not None and r.status == 413 and action != "release":
            action, body = "fail", _smaller(body)  # the protocol: fail with a smaller error
            r, why = self._call(claim, action, body)
        if r is not None and r.status == 200:
            return {"complete": "completed", "fail": "failed", "release": "released"}[action]
        if r is not None and r.status < 500:  # claim_lost, or a refusal no retry will change
            self.log.warning("%s %s: %s %s; dropping the step", action, claim, why, r.detail)
        else:
            self.log.error("%s %s: %s; giving up: the step requeues when its lease ends", action, claim, why)
        return "lost"

    def _stream(self, a, chunks):
        """ctx.stream's POST: returns the seq, or raises as StepContext.stream says."""
        if a.settled:  # lost or released: the server would refuse it
            raise ClaimLost(409, "claim_lost", "the step's claim was lost or released")
        r, why = self._call(a.step["claim"], "stream", {"chunks": chunks})
        if r is None or r.status >= 500:
            raise Transient(f"stream: {why}; the server is out of reach", kind="Unavailable")
        if r.status == 200:
            return r.body.get("seq")
        if r.code == "claim_lost":
            self._lose(a, "stream")
            raise ClaimLost(r.status, r.code, r.detail)
        raise Permanent(f"stream refused: {r.status} {r.code}: {r.detail}", status=r.status,
                        kind="PayloadTooLarge" if r.status == 413 else r.code or "StreamRefused")

    def _release(self, step):
        self._emit(self._send_outcome(step["claim"], "release", {}), claim=step["claim"])

    def _heartbeat_loop(self):
        """One thread beats for every running step, each every heartbeat_timeout/3."""
        while not self._closed.is_set():
            now = time.monotonic()
            with self._cond:
                live = [a for a in self._active.values() if not a.settled]
            for a in live:
                if a.next_beat <= now:
                    self._heartbeat(a)
            nxt = min((a.next_beat for a in live), default=now + 1.0)
            self._wake.wait(min(1.0, max(0.01, nxt - time.monotonic())))
            self._wake.clear()

    def _heartbeat(self, a):
        a.next_beat = time.monotonic() + a.interval
        claim = a.step["claim"]
        try:
            r = self._http.post(f"{_PREFIX}/{_esc(claim)}/heartbeat", {},
                                timeout=min(_CALL_TIMEOUT, max(1.0, a.interval)))
        except _NETWORK_ERRORS as e:
            self.log.warning("heartbeat %s: %s", claim, e)
            return
        if r.status == 200 and r.body.get("cancel_requested"):
            a.ctx.cancel_requested = True
            a.ctx.cancelled.set()
        elif r.code == "claim_lost":
            self._lose(a, "heartbeat")
        elif r.status != 200:
            self.log.warning("heartbeat %s: %s %s", claim, r.status, r.body)

    def _lose(self, a, call):
        """The server says the claim lost the step: cancel the handler and drop its outcome."""
        with self._cond:
            if a.reporting:  # the outcome call under way will say how it ended
                return
            first, a.settled = not a.settled, True
        a.ctx.cancelled.set()
        if first:
            self.log.warning("%s %s: claim lost; the step's outcome will be dropped", call, a.step["claim"])
            self._emit("lost", claim=a.step["claim"])

    def _emit(self, event, **fields):
        if self.on_event:
            try:
                self.on_event(event, fields)
            except Exception:
                self.log.exception("on_event(%s) raised", event)


def _smaller(body):
    """What to send after a 413: an error in place of an output, or a trimmed error."""
    if "output" in body:
        return {"error": {"message": "step output is over the server's limit", "type": "PayloadTooLarge",
                          "class": "permanent", "kind": "PayloadTooLarge"}}
    return {"error": {**body["error"], "message": body["error"]["message"][:1000], "attributes": {}}}


def _esc(claim):
    return urllib.parse.quote(claim, safe="")
