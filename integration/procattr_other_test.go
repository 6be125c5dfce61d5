//go:build !linux

package integration_test

import (
	"os/exec"
	"testing"
)

// dieWithParent is Linux-only; elsewhere a helper outlives a killed test
// binary until its own test's cleanup or a manual kill.
func dieWithParent(*exec.Cmd) {}

// runAs is Linux-only; elsewhere the test runs cmd as itself.
func runAs(*testing.T, *exec.Cmd, string) {}
