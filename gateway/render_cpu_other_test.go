//go:build !unix

package gateway

import "time"

// processCPU is not measured here; benchmarks then report 0 CPU per operation.
func processCPU() time.Duration { return 0 }
