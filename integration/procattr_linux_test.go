package integration_test

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a helper process die with the test binary, even one
// killed by a timeout before its cleanups ran.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
