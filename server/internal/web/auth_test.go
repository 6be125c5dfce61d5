package web

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		roles []Role
		can   []Role
		not   []Role
	}{
		{roles: []Role{RoleSubmit}, can: []Role{RoleSubmit}, not: []Role{RoleRead, RoleOperate, RoleAdmin}},
		{roles: []Role{RoleRead}, can: []Role{RoleRead}, not: []Role{RoleSubmit, RoleOperate, RoleAdmin}},
		{roles: []Role{RoleOperate}, can: []Role{RoleOperate, RoleRead}, not: []Role{RoleSubmit, RoleAdmin}},
		{roles: []Role{RoleAdmin}, can: []Role{RoleSubmit, RoleRead, RoleOperate, RoleAdmin}},
	} {
		p := &Principal{roles: c.roles, namespaces: []string{"a"}}
		for _, r := range c.can {
			require.True(t, p.Can(r), "%v can %s", c.roles, r)
		}
		for _, r := range c.not {
			require.False(t, p.Can(r), "%v cannot %s", c.roles, r)
		}
	}
	p := &Principal{namespaces: []string{"a", "b"}}
	require.True(t, p.InNamespace("b"))
	require.False(t, p.InNamespace("c"))
	require.Equal(t, "a", p.DefaultNamespace())
	require.True(t, (&Principal{namespaces: []string{AllNamespaces}}).InNamespace("anything"))
}

func TestTokensFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(body string) string {
		path := filepath.Join(dir, "tokens.json")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		return path
	}
	hash := HashToken("secret")
	tokens, err := LoadTokens(write(`{"tokens":[{"name":"bot","sha256":"` + hash + `","namespaces":["default"],"roles":["submit"]}]}`))
	require.NoError(t, err)
	require.Equal(t, []Token{{Name: "bot", SHA256: hash, Namespaces: []string{"default"}, Roles: []Role{RoleSubmit}}}, tokens)

	for body, want := range map[string]string{
		`{"tokens":[{"name":"bot","token":"secret"}]}`:                                                                                                                   `unknown field "token"`,
		`{"tokens":[{"name":"bot","sha256":"abc","namespaces":["a"],"roles":["read"]}]}`:                                                                                 "64 hex digits",
		`{"tokens":[{"name":"bot","sha256":"` + hash + `","roles":["read"]}]}`:                                                                                           "no namespaces",
		`{"tokens":[{"name":"bot","sha256":"` + hash + `","namespaces":["a"]}]}`:                                                                                         "no roles",
		`{"tokens":[{"name":"bot","sha256":"` + hash + `","namespaces":["a"],"roles":["root"]}]}`:                                                                        `unknown role "root"`,
		`{"tokens":[{"sha256":"` + hash + `","namespaces":["a"],"roles":["read"]}]}`:                                                                                     "no name",
		`{"tokens":[{"name":"x","sha256":"` + hash + `","namespaces":["a"],"roles":["read"]},{"name":"x","sha256":"` + hash + `","namespaces":["a"],"roles":["read"]}]}`: "used twice",
	} {
		_, err := LoadTokens(write(body))
		require.ErrorContains(t, err, want, body)
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	tokens := []Token{{Name: "bot", SHA256: HashToken("secret"), Namespaces: []string{"a"}, Roles: []Role{RoleRead}}}
	req := httptest.NewRequest("GET", "/v1/tasks", nil)
	_, p := Authenticate(tokens, req)
	require.Equal(t, CodeUnauthorized, p.Code)
	req.Header.Set("Authorization", "Bearer wrong")
	_, p = Authenticate(tokens, req)
	require.Equal(t, CodeUnauthorized, p.Code)
	require.False(t, strings.Contains(p.Detail, "wrong"), "the token is not echoed")
	req.Header.Set("Authorization", "Bearer secret")
	who, p := Authenticate(tokens, req)
	require.Nil(t, p)
	require.Equal(t, "bot", who.Name())
	require.Equal(t, "api:bot", who.Requester())
	who, p = Authenticate(nil, httptest.NewRequest("GET", "/", nil))
	require.Nil(t, p)
	require.Equal(t, Anonymous, who)
}
