//go:build !linux

package integration_test

import "os/exec"

// dieWithParent is Linux-only; elsewhere a helper outlives a killed test
// binary until its own test's cleanup or a manual kill.
func dieWithParent(*exec.Cmd) {}
