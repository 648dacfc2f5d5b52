//go:build unix

package storetest

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used so far; benchmarks report it
// per operation because wall time per operation on a shared, busy machine mostly measures the
// other processes.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
