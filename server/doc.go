// Package server is cairn's HTTP API, with the web console mounted beside
// it, as one http.Handler, for `cairn server` and `cairn dev` and for any
// Go service that mounts them: tasks (start, get, history, wait, cancel,
// retry, compensate, list), queues and their diagnosis, audit events,
// health and Prometheus metrics, with API tokens scoped to namespaces and
// roles; and, under /console/, the console (package server/console:
// queues, tasks and their timelines, dead letters, schedules), server
// rendered over the same calls. Errors are RFC 9457 problem details with a
// stable code.
//
// A service mounts it under a path of its own, says so in
// [Config.Prefix] so the URLs it sends back (links, redirects, assets,
// Location headers) carry that path, and runs its background work
// between Start and Stop:
//
//	// New is pure: it checks cfg, opens nothing and starts no goroutine.
//	srv, err := server.New(server.Config{Store: store, Prefix: "/cairn"})
//	// Start runs the notifier that wakes long polls.
//	err = srv.Start(ctx)
//	mux.Handle("/cairn/", http.StripPrefix("/cairn", srv.Handler()))
//	// ... serve mux with the service's http.Server; on shutdown:
//	srv.Drain()                    // /readyz answers 503, open long polls answer at once
//	err = httpServer.Shutdown(ctx) // requests in flight finish
//	err = srv.Stop(ctx)            // idempotent; waits for the background work
//
// Every request passes the web defences of guard.go first: without
// tokens only loopback Hosts (and [Config.AllowedHosts]) are answered,
// API writes must be JSON, and every response carries CSP, frame and
// nosniff headers; the console then checks that its forms come from its
// own origin. The console signs in to server-side sessions, never keeping
// the token in the browser. docs/guarantees.md ("Security") has the
// threat model.
//
// The server hands the console (package server/console) its
// per-namespace clients, its tokens and its callback signer; what the two
// share, problem details, tokens and principals, the host rule, is in
// server/internal/web ([Token], [Role] and [Problem] are aliases of its
// types).
//
// It imports sdk (the clients, the notifier its long polls share),
// engine/store (only for the [store.Store] it is configured with),
// cairntype (the values it serves), history, server/console and
// server/internal/web of cairn; nothing imports it but cmd/cairn and
// services.
package server
