package gateway

import (
	"bufio"
	"net"
	"net/http"
	"time"
)

// Defaults for the limits on what a client may send (Config).
const (
	defaultWebhookBodyLimit  = 1 << 20
	defaultReadHeaderTimeout = 10 * time.Second
	defaultBodyReadTimeout   = 30 * time.Second
)

// bodyDeadline cuts request bodies that arrive too slowly: a request with a body gets a read
// deadline of timeout on its connection, so a client trickling a declared body (one byte every few
// seconds) cannot hold a connection and a handler open indefinitely. The deadline is network time,
// hence the real clock.
//
// The deadline must not outlive the body: after the body, net/http reads the connection in the
// background to notice a client that goes away, and a deadline expiring there would cancel the
// request's context, cutting long answers (exports, rechecks) that have nothing left to read.
// net/http clears the deadline itself when it starts that read at the end of the body; requests
// without a body, whose background read starts before the handler, get no deadline at all (their
// headers are bounded by the server's ReadHeaderTimeout). A connection hijacked by a websocket
// upgrade gets its deadline cleared: from then on the websocket's own keepalive deadlines apply.
func bodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			// Not a real connection (a test recorder, an embedding): nothing to bound.
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&clearOnHijack{ResponseWriter: w}, r)
	})
}

// clearOnHijack clears the body deadline on a hijacked connection (a websocket upgrade of a request
// that carried a body).
type clearOnHijack struct {
	http.ResponseWriter
}

func (c *clearOnHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err == nil {
		_ = conn.SetReadDeadline(time.Time{})
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush, deadlines).
func (c *clearOnHijack) Unwrap() http.ResponseWriter { return c.ResponseWriter }
