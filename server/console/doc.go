// Package console is cairn's web console as an embeddable http.Handler:
// server-rendered pages over the calls of [sdk.Client] the API makes,
// with the same tokens and roles. The overview and queue pages with their
// charts (charts.go), the task list, dead letters and schedules
// (console.go), a task's page with its timeline, time axis (timeaxis.go),
// children panel (children.go) and Map item numbers (mapindex.go), and the
// tasks waiting for a signal with the form that sends it (waiting.go). A
// few htmx attributes refresh a page in place; everything works without
// them (forms post and redirect).
//
// server.Server mounts it at /console/ beside the API and hands it its
// per-namespace clients ([Config.Client]), its API tokens and its
// callback signer:
//
//	con, err := console.New(console.Config{Client: clientOf, Tokens: tokens, Prefix: "/cairn"})
//	mux.Handle("/cairn/console/", http.StripPrefix("/cairn", con))
//
// Sign-ins are server-side sessions (session.go: the cookie holds a
// random id, never the token) and a form's notice stays on the server
// (flash.go); both live in the process. Before any page the console
// applies its defences (guard.go): CSP, frame and nosniff headers, the
// host rule of a console without tokens, and forms posted from its own
// origin, URL-encoded and bounded as the API bounds the same request.
// Its templates and static files (htmx, vendored by
// scripts/vendor-htmx.sh) are embedded from templates/ and static/.
//
// It imports sdk (every read and action), history (the events it lays
// out), cairntype (the values sdk returns for queue stats, series and
// schedules) and server/internal/web of cairn; server imports it, and
// cmd/cairn for its defaults.
package console
