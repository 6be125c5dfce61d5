"""Tests of cairn_worker against a fake server that plays the remote step protocol.

Run: cd clients/python && python3 -m unittest -v
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cairn_worker import ClaimLost, Permanent, Transient, Worker, WorkerError

PREFIX = "/v1/remote-steps/"
QUIET = logging.getLogger("cairn_worker.test")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def problem(status, code, detail=""):
    return status, {"type": "about:blank", "title": code, "status": status,
                    "detail": detail, "code": code}, {}


class FakeServer:
    """Hands out queued steps on claim and records every call.

    Scripted replies (status, body, headers) are consumed before the default
    behaviour: ``claim_replies`` for claims, ``replies[(claim, action)]`` for
    the calls under a claim.
    """

    def __init__(self):
        self.cond = threading.Condition()
        self.pending, self.calls, self.claims = [], [], []
        self.outstanding, self.max_outstanding = set(), 0
        self.claim_replies, self.replies = [], {}
        self.seq, self.stream_seq, self.paths = 0, 0, []
        self.max_poll = 0.25  # answer an empty long poll early, so a stop waits little
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                status, reply, headers = fake.handle(self.path, body, dict(self.headers))
                raw = json.dumps(reply).encode()
                self.send_response(status)
                kind = "application/json" if status == 200 else "application/problem+json"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(raw)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def add_step(self, name, input=None, **fields):
        """Queue a step; its claim has a slash and a space to test URL escaping."""
        with self.cond:
            self.seq += 1
            step = {"claim": f"c{self.seq}/x y", "task_id": f"task-{self.seq}", "namespace": "default",
                    "position": self.seq, "name": name, "attempt": 1, "input": input,
                    "lease_expires_at": "2026-12-07T10:00:30Z", "heartbeat_timeout_ms": 30000,
                    "start_to_close_ms": 0, **fields}
            self.pending.append(step)
            self.cond.notify_all()
            return step["claim"]

    def handle(self, path, body, headers):
        rest = path[len(PREFIX):]
        if rest == "claim":
            return self.claim(body, headers)
        quoted, action = rest.rsplit("/", 1)
        claim = urllib.parse.unquote(quoted)
        with self.cond:
            self.calls.append((action, claim, body))
            self.paths.append(path)
            self.cond.notify_all()
            script = self.replies.get((claim, action))
            if script:
                return script.pop(0)
            if action == "heartbeat":
                return 200, {"lease_expires_at": "x", "cancel_requested": False}, {}
            if action == "stream":
                self.stream_seq += len(body["chunks"])
                return 200, {"seq": self.stream_seq}, {}
            self.outstanding.discard(claim)
            return 200, {"status": {"complete": "completed", "fail": "failed",
                                    "release": "released"}[action]}, {}

    def claim(self, body, headers):
        with self.cond:
            self.claims.append((body, headers, len(self.outstanding)))
            self.cond.notify_all()
            if self.claim_replies:
                return self.claim_replies.pop(0)
            wanted = lambda s: not body.get("names") or s["name"] in body["names"]
            end = time.monotonic() + min(self.max_poll, body.get("wait_seconds", 20))
            while not any(map(wanted, self.pending)) and time.monotonic() < end:
                self.cond.wait(end - time.monotonic())
            steps = [s for s in self.pending if wanted(s)][:body.get("max", 1)]
            for s in steps:
                self.pending.remove(s)
                self.outstanding.add(s["claim"])
            self.max_outstanding = max(self.max_outstanding, len(self.outstanding))
            return 200, {"steps": steps}, {}

    def calls_of(self, action, claim=None):
        with self.cond:
            return [c for c in self.calls if c[0] == action and (claim is None or c[1] == claim)]

    def wait_for(self, pred, timeout=5.0):
        end = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for the fake server")
                self.cond.wait(min(left, 0.05))


class WorkerTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeServer()
        self.addCleanup(self.server.close)
        self.events = []

    def worker(self, **kw):
        kw.setdefault("poll_wait", 1)
        kw.setdefault("drain_timeout", 2.0)
        on_event = lambda event, fields: self.events.append((event, fields.get("claim")))
        return Worker(self.server.url, "ocr", worker_id="w-1", logger=QUIET, on_event=on_event, **kw)

    def start(self, worker):
        """Run the worker in a thread; the test's cleanup stops it and checks run() returned."""
        self.run_error = None

        def target():
            try:
                worker.run()
            except Exception as e:
                self.run_error = e

        t = threading.Thread(target=target, daemon=True)
        t.start()
        self.addCleanup(lambda: (worker.stop(hard=True), t.join(5)))
        return t

    def stop(self, worker, thread, timeout=5.0):
        worker.stop()
        thread.join(timeout)
        self.assertFalse(thread.is_alive(), "run() did not return after stop()")

    def outcome(self, action, claim):
        self.server.wait_for(lambda: self.server.calls_of(action, claim))
        return self.server.calls_of(action, claim)[0][2]

    def test_step_completes_with_its_output(self):
        w = self.worker()
        seen = {}

        @w.step("ocr.page")
        def page(input, ctx):
            seen.update(task=ctx.task_id, position=ctx.position, attempt=ctx.attempt, name=ctx.name)
            return {"text": f"page {input['page']}"}

        claim = self.server.add_step("ocr.page", {"page": 3})
        t = self.start(w)
        self.assertEqual(self.outcome("complete", claim), {"output": {"text": "page 3"}})
        self.stop(w, t)
        self.assertEqual(seen, {"task": "task-1", "position": 1, "attempt": 1, "name": "ocr.page"})
        self.assertEqual([e for e in self.events if e[0] != "ready"],
                         [("claimed", claim), ("completed", claim)])
        self.assertIsNone(self.run_error)

    def test_exceptions_map_to_error_classes(self):
        w = self.worker(concurrency=3)

        @w.step("transient")
        def transient(input, ctx):
            raise Transient("ocr backend unavailable", kind="Unavailable", status=503,
                            attributes={"page": 3, "host": "ocr-1"}, retry_after=1.5)

        @w.step("permanent")
        def permanent(input, ctx):
            raise Permanent("page is not an image", kind="BadInput")

        @w.step("unmarked")
        def unmarked(input, ctx):
            raise ValueError("unreadable page")

        c1, c2, c3 = (self.server.add_step(n) for n in ("transient", "permanent", "unmarked"))
        t = self.start(w)
        self.assertEqual(self.outcome("fail", c1), {"error": {
            "message": "ocr backend unavailable", "type": "Transient", "class": "transient",
            "kind": "Unavailable", "status": 503, "attributes": {"page": "3", "host": "ocr-1"},
            "retry_after_ms": 1500}})
        self.assertEqual(self.outcome("fail", c2), {"error": {
            "message": "page is not an image", "type": "Permanent", "class": "permanent",
            "kind": "BadInput"}})
        self.assertEqual(self.outcome("fail", c3), {"error": {
            "message": "unreadable page", "type": "ValueError", "class": "", "kind": "ValueError"}})
        self.stop(w, t)
        self.assertEqual(self.server.calls_of("complete"), [])

    def test_concurrency_limit_and_max_is_free_slots(self):
        w = self.worker(concurrency=2)
        lock, running, peak = threading.Lock(), [0], [0]

        @w.step("slow")
        def slow(input, ctx):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.15)
            with lock:
                running[0] -= 1
            return input

        claims = [self.server.add_step("slow", i) for i in range(5)]
        t = self.start(w)
        self.server.wait_for(lambda: len(self.server.calls_of("complete")) == 5)
        self.stop(w, t)
        self.assertEqual(peak[0], 2)
        self.assertEqual(self.server.max_outstanding, 2)
        self.assertEqual(self.server.claims[0][0]["max"], 2)
        for body, _, outstanding in self.server.claims:  # never asks for more than its free slots
            self.assertGreaterEqual(body["max"], 1)
            self.assertLessEqual(body["max"], 2 - outstanding)
        self.assertEqual(sorted(c[1] for c in self.server.calls_of("complete")), sorted(claims))

    def test_heartbeats_and_cancel_requested(self):
        w = self.worker()
        saw = {}

        @w.step("long")
        def long(input, ctx):
            saw["cancelled"] = ctx.cancelled.wait(3)
            return {"partial": True}

        claim = self.server.add_step("long", heartbeat_timeout_ms=300)  # a beat each 100ms
        ok = (200, {"lease_expires_at": "x", "cancel_requested": False}, {})
        self.server.replies[(claim, "heartbeat")] = [
            ok, ok, (200, {"lease_expires_at": "x", "cancel_requested": True}, {})]
        t = self.start(w)
        error = self.outcome("fail", claim)["error"]
        self.stop(w, t)
        self.assertTrue(saw["cancelled"])
        self.assertGreaterEqual(len(self.server.calls_of("heartbeat", claim)), 3)
        self.assertEqual(self.server.calls_of("heartbeat", claim)[0][2], {})
        self.assertEqual((error["class"], error["kind"]), ("permanent", "Cancelled"))
        self.assertEqual(self.server.calls_of("complete"), [])

    def test_claim_lost_on_heartbeat_cancels_and_drops_the_outcome(self):
        w = self.worker()
        done = threading.Event()

        @w.step("s")
        def s(input, ctx):
            ctx.heartbeat()  # manual: the server says the claim is lost
            cancelled = ctx.cancelled.is_set()
            done.set()
            return {"cancelled": cancelled}

        claim = self.server.add_step("s")
        self.server.replies[(claim, "heartbeat")] = [problem(409, "claim_lost")]
        t = self.start(w)
        self.assertTrue(done.wait(5))
        self.server.wait_for(lambda: ("lost", claim) in self.events)
        self.stop(w, t)
        self.assertEqual(self.server.calls_of("complete") + self.server.calls_of("fail"), [])

    def test_claim_lost_on_complete_is_dropped_not_retried(self):
        w = self.worker()
        w.register("s", lambda input, ctx: {"ok": input})
        lost = self.server.add_step("s", 1)
        self.server.replies[(lost, "complete")] = [problem(409, "claim_lost")]
        t = self.start(w)
        self.server.wait_for(lambda: ("lost", lost) in self.events)
        after = self.server.add_step("s", 2)  # the worker goes on working
        self.assertEqual(self.outcome("complete", after), {"output": {"ok": 2}})
        self.stop(w, t)
        self.assertEqual(len(self.server.calls_of("complete", lost)), 1)
        self.assertEqual(self.server.calls_of("fail"), [])

    def test_503_on_complete_is_retried(self):
        w = self.worker()
        w.register("s", lambda input, ctx: {"n": 7})
        claim = self.server.add_step("s")
        self.server.replies[(claim, "complete")] = [
            (503, {"code": "unavailable", "status": 503}, {"Retry-After": "0"}),
            (503, {"code": "unavailable", "status": 503}, {})]  # no Retry-After: backoff
        t = self.start(w)
        self.server.wait_for(lambda: ("completed", claim) in self.events)
        self.stop(w, t)
        calls = self.server.calls_of("complete", claim)
        self.assertEqual([c[2] for c in calls], [{"output": {"n": 7}}] * 3)

    def test_413_on_complete_fails_the_step_instead(self):
        w = self.worker()
        w.register("s", lambda input, ctx: "x" * 1000)
        claim = self.server.add_step("s")
        self.server.replies[(claim, "complete")] = [problem(413, "payload_too_large")]
        t = self.start(w)
        error = self.outcome("fail", claim)["error"]
        self.stop(w, t)
        self.assertEqual((error["type"], error["class"]), ("PayloadTooLarge", "permanent"))

    def test_streamed_chunks_are_sent_before_complete(self):
        w = self.worker()
        seqs = []

        @w.step("s")
        def s(input, ctx):
            seqs.append(ctx.stream("tokens", "Hel"))
            seqs.append(ctx.stream("tokens", "lo"))
            seqs.append(ctx.stream_many("progress", [{"page": 3}, {"page": 4}]))
            return "done"

        claim = self.server.add_step("s")
        t = self.start(w)
        self.outcome("complete", claim)
        self.stop(w, t)
        chunk = lambda stream, data: {"stream": stream, "data": data}
        self.assertEqual([c[::2] for c in self.server.calls if c[1] == claim and c[0] != "heartbeat"], [
            ("stream", {"chunks": [chunk("tokens", "Hel")]}),
            ("stream", {"chunks": [chunk("tokens", "lo")]}),
            ("stream", {"chunks": [chunk("progress", {"page": 3}), chunk("progress", {"page": 4})]}),
            ("complete", {"output": "done"})])
        self.assertEqual(seqs, [1, 2, 4])
        self.assertEqual(self.server.paths.count(PREFIX + "c1%2Fx%20y/stream"), 3)  # the claim escaped

    def test_503_on_stream_is_retried(self):
        w = self.worker()
        w.register("s", lambda input, ctx: ctx.stream("tokens", "a"))
        claim = self.server.add_step("s")
        self.server.replies[(claim, "stream")] = [
            (503, {"code": "database_unavailable", "status": 503}, {"Retry-After": "0"})]
        t = self.start(w)
        self.assertEqual(self.outcome("complete", claim), {"output": 1})  # the seq the handler returned
        self.stop(w, t)
        self.assertEqual([c[2] for c in self.server.calls_of("stream", claim)],
                         [{"chunks": [{"stream": "tokens", "data": "a"}]}] * 2)

    def test_claim_lost_on_stream_stops_the_step_and_drops_its_outcome(self):
        w = self.worker()
        done, saw = threading.Event(), {}

        @w.step("s")
        def s(input, ctx):
            try:
                ctx.stream("tokens", "a")
            except ClaimLost as e:
                saw["lost"] = (e.status, e.code, ctx.cancelled.is_set())
            try:
                ctx.stream("tokens", "b")  # the claim is known lost: nothing is sent
            finally:
                done.set()

        claim = self.server.add_step("s")
        self.server.replies[(claim, "stream")] = [problem(409, "claim_lost")]
        t = self.start(w)
        self.assertTrue(done.wait(5))
        self.server.wait_for(lambda: ("lost", claim) in self.events)
        self.stop(w, t)
        self.assertEqual(saw["lost"], (409, "claim_lost", True))
        self.assertEqual(len(self.server.calls_of("stream", claim)), 1)
        self.assertEqual(self.server.calls_of("complete") + self.server.calls_of("fail"), [])

    def test_413_on_stream_fails_the_step_permanently(self):
        w = self.worker()
        w.register("s", lambda input, ctx: ctx.stream("tokens", "a"))
        claim = self.server.add_step("s")
        self.server.replies[(claim, "stream")] = [problem(413, "payload_too_large", "over 32 MiB")]
        t = self.start(w)
        error = self.outcome("fail", claim)["error"]
        self.stop(w, t)
        self.assertEqual((error["type"], error["class"], error["kind"], error["status"]),
                         ("Permanent", "permanent", "PayloadTooLarge", 413))
        self.assertEqual(len(self.server.calls_of("stream", claim)), 1)
        self.assertEqual(self.server.calls_of("complete"), [])

    def test_bad_stream_names_and_chunks_raise_without_a_request(self):
        w = self.worker()
        limit = 64 << 10
        bad = [("", 1), ("a b", 1), ("a\tb", 1), ("a\u00a0b", 1), ("a\nb", 1), ("x" * 101, 1),
               ("é" * 51, 1), (None, 1), ("ok", "x" * (limit - 1)), ("ok", float("nan")), ("ok", object())]
        raised = []

        @w.step("s")
        def s(input, ctx):
            calls = [lambda n=n, d=d: ctx.stream(n, d) for n, d in bad]
            calls += [lambda: ctx.stream_many("ok", []), lambda: ctx.stream_many("ok", [1] * 1001),
                      lambda: ctx.stream_many("ok", ["a", "x" * limit])]  # checked before any is sent
            for call in calls:
                try:
                    call()
                    raised.append(None)
                except (Permanent, ValueError, TypeError) as e:
                    raised.append(f"{type(e).__name__}:{getattr(e, 'kind', '')}")
            return ctx.stream("é" * 50, "x" * (limit - 2))  # at both limits: sent

        claim = self.server.add_step("s")
        t = self.start(w)
        self.outcome("complete", claim)
        self.stop(w, t)
        name, big = "Permanent:InvalidStreamName", "Permanent:PayloadTooLarge"
        self.assertEqual(raised, [name] * 8 + [big, "ValueError:", "TypeError:"]  # JSON cannot hold nan, object()
                         + ["ValueError:"] * 2 + [big])  # 0 or 1001 chunks: a wrong call
        self.assertEqual([c[2] for c in self.server.calls_of("stream")],
                         [{"chunks": [{"stream": "é" * 50, "data": "x" * (limit - 2)}]}])

    def test_bad_stream_name_or_chunk_fails_the_step_permanently(self):
        w = self.worker()
        w.register("s", lambda input, ctx: ctx.stream("a b", 1))
        w.register("t", lambda input, ctx: ctx.stream("tokens", "x" * (64 << 10)))
        bad_name, too_big = self.server.add_step("s"), self.server.add_step("t")
        t = self.start(w)
        errors = [self.outcome("fail", c)["error"] for c in (bad_name, too_big)]
        self.stop(w, t)
        self.assertEqual([(e["type"], e["class"], e["kind"]) for e in errors],
                         [("Permanent", "permanent", "InvalidStreamName"),
                          ("Permanent", "permanent", "PayloadTooLarge")])
        self.assertEqual(self.server.calls_of("stream"), [])

    def test_stream_many_splits_bodies_over_4_mib(self):
        w = self.worker()
        items = [f"{i:04d}" + "x" * ((64 << 10) - 6) for i in range(130)]  # each 64 KiB of JSON
        seqs = []
        w.register("s", lambda input, ctx: seqs.append(ctx.stream_many("tokens", items)))
        claim = self.server.add_step("s")
        t = self.start(w)
        self.outcome("complete", claim)
        self.stop(w, t)
        bodies = [c[2] for c in self.server.calls_of("stream", claim)]
        sizes = [len(json.dumps(b, separators=(",", ":"))) for b in bodies]
        self.assertEqual([len(b["chunks"]) for b in bodies], [63, 63, 4])  # 64 would pass 4 MiB
        self.assertTrue(all(size <= 4 << 20 for size in sizes), sizes)
        self.assertGreater(sizes[0] + 1 + len(json.dumps(bodies[1]["chunks"][0], separators=(",", ":"))),
                           4 << 20)
        self.assertEqual([c["data"] for b in bodies for c in b["chunks"]], items)
        self.assertEqual(seqs, [130])

    def test_hard_stop_releases_at_once(self):
        w = self.worker(drain_timeout=30)
        began = threading.Event()

        @w.step("s")
        def s(input, ctx):
            began.set()
            return ctx.cancelled.wait(5)

        claim = self.server.add_step("s")
        t = self.start(w)
        self.assertTrue(began.wait(5))
        w.stop(hard=True)
        t.join(3)
        self.assertFalse(t.is_alive(), "a hard stop waited for the drain timeout")
        self.assertEqual(len(self.server.calls_of("release", claim)), 1)

    def test_graceful_stop_finishes_quick_steps_and_releases_the_rest(self):
        w = self.worker(concurrency=2, drain_timeout=0.5)
        started, ended, saw = threading.Barrier(3), threading.Event(), {}

        @w.step("quick")
        def quick(input, ctx):
            started.wait(5)
            time.sleep(0.2)
            return "done"

        @w.step("stuck")
        def stuck(input, ctx):
            started.wait(5)
            saw["cancelled"] = ctx.cancelled.wait(5)
            ended.set()
            return "too late"

        quick_claim = self.server.add_step("quick")
        stuck_claim = self.server.add_step("stuck")
        t = self.start(w)
        started.wait(5)
        began = time.monotonic()
        self.stop(w, t)
        self.assertLess(time.monotonic() - began, 2.0)
        self.assertTrue(ended.wait(5))
        self.assertTrue(saw["cancelled"])
        self.assertEqual(self.server.calls_of("complete", quick_claim)[0][2], {"output": "done"})
        self.assertEqual([c[2] for c in self.server.calls_of("release", stuck_claim)], [{}])
        time.sleep(0.1)  # the stuck handler has returned: its outcome must not be sent
        self.assertEqual(self.server.calls_of("complete", stuck_claim), [])
        self.assertIn(("released", stuck_claim), self.events)

    def test_claim_in_flight_at_stop_releases_its_steps(self):
        w = self.worker(poll_wait=5)
        self.server.max_poll = 5
        ran = []
        w.register("s", lambda input, ctx: ran.append(input))
        t = self.start(w)
        self.server.wait_for(lambda: self.server.claims)  # a long poll is under way
        w.stop()
        claim = self.server.add_step("s", 1)  # answers it after stop
        t.join(5)
        self.assertFalse(t.is_alive())
        self.assertEqual(len(self.server.calls_of("release", claim)), 1)
        self.assertEqual(ran, [])
        self.assertEqual(len(self.server.claims), 1)

    def test_claim_sends_names_auth_and_namespace(self):
        w = Worker(self.server.url, "ocr", token="s3cret", namespace="ns1", worker_id="py-9",
                   poll_wait=1, names=["a.step"], logger=QUIET)
        for name in ("b.step", "a.step", "c.step"):
            w.register(name, lambda input, ctx: None)
        t = self.start(w)
        self.server.wait_for(lambda: self.server.claims)
        self.stop(w, t)
        body, headers, _ = self.server.claims[0]
        self.assertEqual(body, {"queue": "ocr", "worker": "py-9", "names": ["a.step"],
                                "max": 1, "wait_seconds": 1})
        self.assertEqual(headers["Authorization"], "Bearer s3cret")
        self.assertEqual(headers["Cairn-Namespace"], "ns1")

    def test_names_default_to_the_registered_handlers(self):
        w = self.worker()
        for name in ("b.step", "a.step"):
            w.register(name, lambda input, ctx: None)
        t = self.start(w)
        self.server.wait_for(lambda: self.server.claims)
        self.stop(w, t)
        body, headers, _ = self.server.claims[0]
        self.assertEqual(body["names"], ["a.step", "b.step"])
        self.assertNotIn("Authorization", headers)
        self.assertNotIn("Cairn-Namespace", headers)

    def test_claim_503_is_retried_and_401_raised_from_run(self):
        w = self.worker()
        w.register("s", lambda input, ctx: None)
        self.server.claim_replies = [
            (503, {"code": "unavailable"}, {"Retry-After": "0"}),
            problem(401, "unauthenticated", "no token")]
        t = self.start(w)
        t.join(5)
        self.assertFalse(t.is_alive())
        self.assertIsInstance(self.run_error, WorkerError)
        self.assertEqual((self.run_error.status, self.run_error.code, self.run_error.detail),
                         (401, "unauthenticated", "no token"))
        self.assertEqual(len(self.server.claims), 2)

    def test_run_refuses_names_without_handlers(self):
        w = self.worker(names=["missing"])
        with self.assertRaises(ValueError):
            w.run()


class ExampleTest(unittest.TestCase):
    """The example CLI, as the Go integration tests run it: JSON events on stdout, SIGTERM drains."""

    def test_ocr_worker_cli(self):
        server = FakeServer()
        self.addCleanup(server.close)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples", "ocr_worker.py")
        proc = subprocess.Popen(
            [sys.executable, script, "--url", server.url, "--queue", "ocr", "--concurrency", "2",
             "--worker-id", "py-1", "--poll-wait", "1", "--drain-timeout", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "CAIRN_TOKEN": "tok"})
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertEqual(json.loads(proc.stdout.readline()), {"event": "ready"})
        ok = server.add_step("ocr.page", {"page": 4})
        bad = server.add_step("ocr.page", {"page": 5, "error": "transient"})
        server.wait_for(lambda: server.calls_of("complete", ok) and server.calls_of("fail", bad))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        events = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(proc.returncode, 0)
        self.assertIn({"event": "claimed", "claim": ok, "name": "ocr.page", "position": 1,
                       "attempt": 1, "task_id": "task-1"}, events)
        self.assertIn({"event": "completed", "claim": ok}, events)
        self.assertIn({"event": "failed", "claim": bad}, events)
        self.assertEqual(server.calls_of("complete", ok)[0][2],
                         {"output": {"page": 4, "text": "text of page 4", "worker": "py-1"}})
        self.assertEqual([c[::2] for c in server.calls if c[1] == ok and c[0] != "heartbeat"], [
            ("stream", {"chunks": [{"stream": "progress", "data": {"done": 1, "total": 1, "message": "read page 4"}}]}),
            ("complete", {"output": {"page": 4, "text": "text of page 4", "worker": "py-1"}})])
        self.assertEqual(server.calls_of("stream", bad), [])  # it failed before reading the page
        self.assertEqual(server.calls_of("fail", bad)[0][2]["error"]["attributes"], {"page": "5"})
        self.assertEqual(server.claims[0][1]["Authorization"], "Bearer tok")


if __name__ == "__main__":
    unittest.main()
