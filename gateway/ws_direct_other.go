//go:build !unix

package gateway

import "net"

// rawWriter: without a non-blocking write at hand, every frame goes through the write pump.
func rawWriter(net.Conn) func(p []byte) (int, error) { return nil }
