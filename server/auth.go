package server

import "github.com/cairnflow/cairn/server/internal/web"

// The API tokens the API and the console both check. These are aliases:
// the console's configuration takes the same types.

// Role is what a token may do.
type Role = web.Role

// The roles. Admin implies the others; operate implies read.
const (
	RoleSubmit  = web.RoleSubmit  // start tasks
	RoleRead    = web.RoleRead    // read tasks, histories, queues, audit events
	RoleOperate = web.RoleOperate // cancel, retry, compensate
	RoleAdmin   = web.RoleAdmin   // everything
	RoleWork    = web.RoleWork    // do the remote steps of the token's queues, nothing else
)

// AllNamespaces in a token's namespaces lets it act in every namespace.
const AllNamespaces = web.AllNamespaces

// Token is an API token as configured: its SHA-256 (hex), never the token
// itself, so a leaked configuration leaks no credential. Its fields are
// Name (recorded as "api:<name>" in the histories of what it asks),
// SHA256, Namespaces, Roles and, for the role work, Queues, in JSON name,
// sha256, namespaces, roles and queues.
type Token = web.Token

// TokenFile is the JSON a tokens file holds: {"tokens": [Token, …]}.
type TokenFile = web.TokenFile

// LoadTokens reads and checks a tokens file.
func LoadTokens(path string) ([]Token, error) { return web.LoadTokens(path) }

// ValidateTokens checks names are unique, hashes well formed, and every
// token has a namespace and a known role.
func ValidateTokens(tokens []Token) error { return web.ValidateTokens(tokens) }

// HashToken returns the hex SHA-256 a tokens file holds for token.
func HashToken(token string) string { return web.HashToken(token) }
