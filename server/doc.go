// Package server is cairn's HTTP API and web console as one http.Handler,
// for `cairn server` and `cairn dev` and for any Go service that mounts
// them: tasks (start, get, history, wait, cancel, retry, compensate,
// list), queues and their diagnosis, audit events, health and Prometheus
// metrics, with API tokens scoped to namespaces and roles; and the console
// (queues, tasks and their timelines, dead letters, schedules), server
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
// API writes must be JSON, console forms must come from the console's own
// origin, and every response carries CSP, frame and nosniff headers. The
// console signs in to server-side sessions (session.go), never keeping the
// token in the browser. docs/guarantees.md ("Security") has the threat model.
//
// The console's Go code is in this package, beside the API, because it
// shares the API's authentication, per-namespace clients and error
// mapping; its templates and static files (htmx, vendored by
// scripts/vendor-htmx.sh) are embedded from console/.
//
// It imports sdk, engine (the [store.Store] it serves, the notifier) and
// history (the events the console reads) of cairn; nothing imports it but
// cmd/cairn and services.
package server
