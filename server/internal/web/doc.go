// Package web holds what cairn's HTTP API (package server) and its
// console (package server/console) share at the HTTP edge, so neither
// imports the other for it: problem details (RFC 9457) and the mapping
// of sdk and cairntype errors to them (problem.go); API tokens, roles and who
// a request acts for (auth.go); the defences both apply (guard.go: the
// response headers, the host rule of a server without tokens, Origin
// checks); and request and response bodies (body.go).
//
// The server re-exports its public names (Token, Role, Problem, …) as
// aliases. It imports sdk, cairntype and payload of cairn (for the errors
// it maps); only server and server/console import it.
package web
