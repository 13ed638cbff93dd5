package loadgen

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time, user and system, this process has used so
// far: with the server embedded in the bench, the server's, the
// coordinator's and the agents' alike. Zero where it cannot be read.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPer is the CPU time spent since before, per one of n operations.
func cpuPer(before time.Duration, n int) time.Duration {
	if n <= 0 || before == 0 {
		return 0
	}
	return (ProcessCPU() - before) / time.Duration(n)
}
