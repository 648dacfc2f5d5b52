//go:build unix

package gateway

import (
	"errors"
	"net"
	"syscall"
)

// rawWriter returns a function that makes exactly one non-blocking write(2) of p to the
// connection's socket (the runtime keeps sockets in non-blocking mode), or nil when the connection
// is not a plain socket (TLS, a test pipe): such connections always go through the queue.
func rawWriter(c net.Conn) func(p []byte) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return func(p []byte) (int, error) {
		var n int
		var werr error
		// Returning true makes RawConn.Write return after this single attempt instead of waiting
		// for the socket to become writable: the caller must never block.
		err := rc.Write(func(fd uintptr) bool {
			for {
				n, werr = syscall.Write(int(fd), p)
				if !errors.Is(werr, syscall.EINTR) {
					return true
				}
			}
		})
		if err != nil {
			return 0, err
		}
		if errors.Is(werr, syscall.EAGAIN) {
			return 0, nil
		}
		if n < 0 {
			n = 0
		}
		return n, werr
	}
}
