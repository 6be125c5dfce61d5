package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
)

// Role is what a token may do.
type Role string

// The roles. Admin implies the others; operate implies read.
const (
	RoleSubmit  Role = "submit"  // start tasks
	RoleRead    Role = "read"    // read tasks, histories, queues, audit events
	RoleOperate Role = "operate" // cancel, retry, compensate
	RoleAdmin   Role = "admin"   // everything
	// RoleWork does the remote steps of the token's queues (the remote
	// step protocol) and nothing else.
	RoleWork Role = "work"
)

// knownRoles are the roles a tokens file may give.
var knownRoles = []Role{RoleSubmit, RoleRead, RoleOperate, RoleAdmin, RoleWork}

// AllNamespaces in a token's namespaces lets it act in every namespace.
const AllNamespaces = "*"

// Token is an API token as configured: its SHA-256 (hex), never the token
// itself, so a leaked configuration leaks no credential.
type Token struct {
	Name       string   `json:"name"` // recorded as "api:<name>" in the histories of what it asks
	SHA256     string   `json:"sha256"`
	Namespaces []string `json:"namespaces"`
	Roles      []Role   `json:"roles"`
	// Queues are the queues a token with the role work may claim remote
	// steps of ("*": all); required with it, refused without it.
	Queues []string `json:"queues,omitempty"`
}

// TokenFile is the JSON a tokens file holds.
type TokenFile struct {
	Tokens []Token `json:"tokens"`
}

// LoadTokens reads and checks a tokens file.
func LoadTokens(path string) ([]Token, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.Wrap(err, "read tokens file")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var f TokenFile
	if err := dec.Decode(&f); err != nil {
		return nil, errors.Wrapf(err, "tokens file %s", path)
	}
	if err := ValidateTokens(f.Tokens); err != nil {
		return nil, errors.Wrapf(err, "tokens file %s", path)
	}
	return f.Tokens, nil
}

// ValidateTokens checks names are unique, hashes well formed, and every
// token has a namespace and a known role.
func ValidateTokens(tokens []Token) error {
	seen, hashes := map[string]bool{}, map[string]string{}
	for i, t := range tokens {
		what := "token " + t.Name
		if t.Name == "" {
			return errors.Newf("token %d has no name", i+1)
		}
		if seen[t.Name] {
			return errors.Newf("%s: name used twice", what)
		}
		seen[t.Name] = true
		if b, err := hex.DecodeString(t.SHA256); err != nil || len(b) != sha256.Size {
			return errors.Newf("%s: sha256 must be 64 hex digits (cairn token hash prints it)", what)
		}
		if other, dup := hashes[strings.ToLower(t.SHA256)]; dup {
			return errors.Newf("%s: same token hash as token %s", what, other)
		}
		hashes[strings.ToLower(t.SHA256)] = t.Name
		if len(t.Namespaces) == 0 {
			return errors.Newf("%s: no namespaces (use %q for all)", what, AllNamespaces)
		}
		if len(t.Roles) == 0 {
			return errors.Newf("%s: no roles (submit, read, operate, admin, work)", what)
		}
		for _, r := range t.Roles {
			if !slices.Contains(knownRoles, r) {
				return errors.Newf("%s: unknown role %q (submit, read, operate, admin, work)", what, r)
			}
		}
		works := slices.Contains(t.Roles, RoleWork)
		switch {
		case works && len(t.Queues) == 0:
			return errors.Newf("%s: the role work needs the queues it may work (use %q for all)", what, AllNamespaces)
		case !works && len(t.Queues) > 0:
			return errors.Newf("%s: queues are for the role work, which the token does not have", what)
		}
		for _, q := range t.Queues {
			if q == "" || len(q) > 200 {
				return errors.Newf("%s: a queue name is 1 to 200 characters", what)
			}
		}
	}
	return nil
}

// HashToken returns the hex SHA-256 a tokens file holds for token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Principal is who a request acts for: a token's name, namespaces and
// roles, or [Anonymous].
type Principal struct {
	name       string // "" when tokens are off
	namespaces []string
	roles      []Role
	queues     []string // the queues of the role work
}

// NewPrincipal is who a request with token acts for.
func NewPrincipal(t Token) *Principal {
	return &Principal{name: t.Name, namespaces: t.Namespaces, roles: t.Roles, queues: t.Queues}
}

// Anonymous acts for every request when no tokens are configured: a local
// server, everything allowed.
var Anonymous = &Principal{namespaces: []string{AllNamespaces}, roles: []Role{RoleAdmin}}

// Name is the token's name; "" for [Anonymous].
func (p *Principal) Name() string { return p.name }

// Can reports whether p's roles allow role.
func (p *Principal) Can(role Role) bool {
	if slices.Contains(p.roles, RoleAdmin) || slices.Contains(p.roles, role) {
		return true
	}
	return role == RoleRead && slices.Contains(p.roles, RoleOperate)
}

// CanWork reports whether p may claim remote steps of queue: an admin,
// or a token with the role work and the queue (or "*").
func (p *Principal) CanWork(queue string) bool {
	if slices.Contains(p.roles, RoleAdmin) {
		return true
	}
	return slices.Contains(p.roles, RoleWork) && (slices.Contains(p.queues, AllNamespaces) || slices.Contains(p.queues, queue))
}

// WorkQueues are the queues p's calls under a claim are held to: nil
// (any) for an admin or a token of every queue.
func (p *Principal) WorkQueues() []string {
	if slices.Contains(p.roles, RoleAdmin) || slices.Contains(p.queues, AllNamespaces) {
		return nil
	}
	return p.queues
}

// InNamespace reports whether p may act in namespace ns.
func (p *Principal) InNamespace(ns string) bool {
	return slices.Contains(p.namespaces, AllNamespaces) || slices.Contains(p.namespaces, ns)
}

// DefaultNamespace is where a request that names none acts.
func (p *Principal) DefaultNamespace() string {
	if len(p.namespaces) == 0 || p.namespaces[0] == AllNamespaces {
		return "default"
	}
	return p.namespaces[0]
}

// Requester is recorded as "by" in the histories of what p asks through
// the API.
func (p *Principal) Requester() string {
	if p.name == "" {
		return "api"
	}
	return "api:" + p.name
}

// Authenticate resolves the bearer token of r to its principal among
// tokens, comparing hashes in constant time. With no tokens configured,
// everyone is [Anonymous].
func Authenticate(tokens []Token, r *http.Request) (*Principal, *Problem) {
	if len(tokens) == 0 {
		return Anonymous, nil
	}
	scheme, raw, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	raw = strings.TrimSpace(raw)
	if !strings.EqualFold(scheme, "Bearer") || raw == "" {
		return nil, NewProblem(http.StatusUnauthorized, CodeUnauthorized, "send an API token as Authorization: Bearer <token>")
	}
	sum := sha256.Sum256([]byte(raw))
	for _, t := range tokens {
		want, _ := hex.DecodeString(t.SHA256)
		if subtle.ConstantTimeCompare(sum[:], want) == 1 {
			return NewPrincipal(t), nil
		}
	}
	return nil, NewProblem(http.StatusUnauthorized, CodeUnauthorized, "the API token is not known")
}
