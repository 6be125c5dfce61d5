package sdk

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cairnflow/cairn/internal/errmark"
)

// A worker's health, for an orchestrator's probes (a Kubernetes
// livenessProbe and readinessProbe) and a load balancer's checks: live
// while it runs, ready while it runs and can claim work. A worker's own
// claims do not tell: an idle worker woken by notifications may not claim
// for a long while, so readiness asks each of its cells' databases, as
// the server's /readyz does.

// ErrNotReady marks [Worker.Ready]'s answer when the worker cannot claim
// work: not started, stopping, or no cell's database answers.
var ErrNotReady = errors.New("the worker is not ready")

// ReadyTimeout bounds [Worker.Ready]'s wait for each cell's database: one
// that has not answered by then counts as unreachable, so a probe learns
// of a database lost, or a network cut, within it.
const ReadyTimeout = 500 * time.Millisecond

// Live reports nil from the worker's start until its stop is over: a
// worker that is stopping is still live, finishing its steps. An error
// means it was never started or has stopped; an orchestrator restarts
// such a process.
func (w *Worker) Live() error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	switch {
	case !started:
		return errors.New("the worker has not started")
	case isClosed(w.stopped):
		return errors.New("the worker has stopped")
	}
	return nil
}

// Ready reports nil while the worker can claim work: started, not
// stopping, and its database (one of its cells', with Cells) answers a
// ping within [ReadyTimeout]. Otherwise the error, marked [ErrNotReady],
// says why; a load balancer or an orchestrator sends the worker nothing
// meanwhile, and it becomes ready again by itself once the database
// answers.
func (w *Worker) Ready(ctx context.Context) error {
	_, err := w.readiness(ctx)
	return err
}

// readiness is Ready with each cell's state ("ready" or "unreachable", by
// cell name; "" without Cells).
func (w *Worker) readiness(ctx context.Context) (map[string]string, error) {
	if err := w.Live(); err != nil {
		return nil, errmark.Mark(err, ErrNotReady)
	}
	if isClosed(w.stopping) {
		return nil, errmark.Mark(errors.New("the worker is stopping"), ErrNotReady)
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	errs := make([]error, len(w.cells))
	var wg sync.WaitGroup
	for i, c := range w.cells {
		wg.Go(func() { errs[i] = c.store.Engine().Ping(ctx) })
	}
	wg.Wait()
	states := make(map[string]string, len(w.cells))
	var down []string
	for i, c := range w.cells {
		states[c.name] = "ready"
		if errs[i] != nil {
			states[c.name] = "unreachable"
			down = append(down, cellName(c.name)+": "+oneLine(errs[i].Error()))
		}
	}
	if len(down) == len(w.cells) {
		return states, errmark.Mark(errors.Newf("no database answers: %s", strings.Join(down, "; ")), ErrNotReady)
	}
	return states, nil
}

// HealthOpts are the options of [Worker.HealthHandler]; nil takes the
// defaults.
type HealthOpts struct {
	// Gatherer, when set, is served at /metrics (the registry the
	// worker's [Metrics] were made on, usually).
	Gatherer prometheus.Gatherer
}

// HealthHandler returns the worker's health over HTTP, for a worker
// process to serve on a port of its own: GET /healthz answers 200 while
// [Worker.Live] is nil, else 503; GET /readyz answers 200 with each
// cell's state while [Worker.Ready] is nil, else 503 with the reason;
// GET /metrics serves opts.Gatherer when set. Bodies are JSON, as the
// server's.
func (w *Worker) HealthHandler(opts *HealthOpts) http.Handler {
	o := orZero(opts)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.Live(); err != nil {
			writeHealth(rw, http.StatusServiceUnavailable, map[string]any{"status": "not live", "reason": err.Error()})
			return
		}
		writeHealth(rw, http.StatusOK, map[string]any{"status": "live", "worker_id": w.WorkerID()})
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		states, err := w.readiness(r.Context())
		if err != nil {
			writeHealth(rw, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": err.Error(), "cells": states})
			return
		}
		writeHealth(rw, http.StatusOK, map[string]any{"status": "ready", "worker_id": w.WorkerID(), "cells": states})
	})
	if o.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

func writeHealth(rw http.ResponseWriter, status int, body map[string]any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(body)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// cellName names a cell in a message: "the database" without Cells.
func cellName(name string) string {
	if name == "" {
		return "the database"
	}
	return "cell " + name
}

// oneLine joins an error's lines, so a log line stays one.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
