package integration_test

import (
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// dieWithParent makes a helper process die with the test binary, even one
// killed by a timeout before its cleanups ran.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// runAs makes cmd (after dieWithParent) run as the named user.
func runAs(t *testing.T, cmd *exec.Cmd, name string) {
	t.Helper()
	u, err := user.Lookup(name)
	require.NoError(t, err)
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	require.NoError(t, err)
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	require.NoError(t, err)
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}
