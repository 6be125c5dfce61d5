//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU is the user and system CPU this process has used so far
// (getrusage), all its threads; 0 when the system does not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
