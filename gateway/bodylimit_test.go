package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// servedEnv runs the gateway through Serve (the real http.Server with its timeouts) with short
// limits, a webhook that reads its body, and returns the listen address.
type servedEnv struct {
	*testEnv
	addr    string
	hookCtx chan error // the webhook reports its request context's state after a pause
	release chan struct{}
}

const testBodyTimeout = 300 * time.Millisecond

func newServedEnv(t *testing.T) *servedEnv {
	t.Helper()
	se := &servedEnv{hookCtx: make(chan error, 16), release: make(chan struct{})}
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, "too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "unreadable", http.StatusBadRequest)
			return
		}
		if string(b) == "wait" {
			// A handler that keeps working after its body was read: the lifted deadline must not
			// cancel it.
			<-se.release
			se.hookCtx <- r.Context().Err()
		}
		_, _ = w.Write([]byte("got " + string(b)))
	})
	se.testEnv = newEnv(t, func(c *Config, _ *agentCfg) {
		c.BodyReadTimeout = testBodyTimeout
		c.ReadHeaderTimeout = testBodyTimeout
		c.WebhookBodyLimit = 1024
		c.Webhooks = map[string]http.Handler{"/channels/test": hook}
	})
	ln, err := netListen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- se.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return")
		}
	})
	se.addr = ln.Addr().String()
	return se
}

// trickle opens a raw connection, sends head, then one byte of the declared body at a time until
// the server hangs up. It returns nil once the server closed the connection, or an error when the
// connection was still open after the bound (a generous one, only there to end a hang).
func trickle(addr, head string) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, err := conn.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.Copy(io.Discard, conn) // a response (if any), then the close
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("connection still open after 30 s")
	}
	return nil
}

func TestSlowBodiesAreCut(t *testing.T) {
	e := newServedEnv(t)
	heads := map[string]string{
		"login":       "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n\r\n",
		"webhook":     "POST /channels/test HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nContent-Length: 4096\r\n\r\n",
		"chunked":     "POST /channels/test HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n",
		"api":         "POST /api/sessions/x/shares HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n",
		"slow header": "POST /login HTTP/1.1\r\nHost: x\r\nX-Slow: ",
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for name, head := range heads {
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := trickle(e.addr, head); err != nil {
					errs <- errors.New(name + ": " + err.Error())
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Clients that send at a normal pace are served, and a connection stays usable.
	c := &http.Client{Timeout: 30 * time.Second}
	for range 2 {
		resp, err := c.Post("http://"+e.addr+"/channels/test", "text/plain", strings.NewReader("hello"))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "got hello", string(b))
	}
	// Webhook bodies are capped.
	resp, err := c.Post("http://"+e.addr+"/channels/test", "text/plain", strings.NewReader(strings.Repeat("x", 2048)))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
}

// TestBodyDeadlineLiftedAfterBody: a handler still working long after its body was read is not
// cancelled by the body deadline.
func TestBodyDeadlineLiftedAfterBody(t *testing.T) {
	e := newServedEnv(t)
	c := &http.Client{Timeout: 30 * time.Second}
	result := make(chan error, 1)
	go func() {
		resp, err := c.Post("http://"+e.addr+"/channels/test", "text/plain", strings.NewReader("wait"))
		if err == nil {
			resp.Body.Close()
		}
		result <- err
	}()
	// Several body timeouts pass while the handler works.
	time.Sleep(5 * testBodyTimeout)
	close(e.release)
	select {
	case err := <-e.hookCtx:
		assert.NoError(t, err, "the request context was cancelled")
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook handler never finished")
	}
	require.NoError(t, <-result)
}

// TestWebsocketOutlivesBodyTimeouts: an upgraded websocket idles for many header and body
// timeouts and still works.
func TestWebsocketOutlivesBodyTimeouts(t *testing.T) {
	e := newServedEnv(t)
	_, tok := e.user("alice")
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+e.addr+"/ws", h)
	require.NoError(t, err)
	defer conn.Close()
	time.Sleep(6 * testBodyTimeout)
	require.NoError(t, conn.WriteJSON(map[string]any{"type": "chat.send", "text": "还在吗"}))
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var f map[string]any
		require.NoError(t, conn.ReadJSON(&f), "the websocket was cut")
		if f["type"] == "run.finished" {
			assert.Equal(t, "COMPLETED", f["phase"])
			break
		}
	}
}
