package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/citegate/citegate/store"
)

// AdminSocketName is the admin socket's file name inside the data directory.
const AdminSocketName = "citegate.sock"

// ErrNoAdminServer means no citegate server is listening on the data directory's admin socket: the
// caller may open the database itself.
var ErrNoAdminServer = errors.New("no citegate server is listening")

// ServeAdmin serves the admin API on the unix socket DataDir/citegate.sock (mode 0600, removed on
// exit) until ctx ends. It lets `citegate user add` work while this process holds the database.
// Routes: POST /users {"name"} → 201 {"id","name","token"}.
func (s *Server) ServeAdmin(ctx context.Context) error {
	if s.cfg.DataDir == "" {
		return errors.New("gateway: admin socket: Config.DataDir is required")
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("gateway: admin socket: %w", err)
	}
	path := filepath.Join(s.cfg.DataDir, AdminSocketName)
	if err := clearStaleSocket(ctx, path); err != nil {
		return err
	}
	ln, err := listenUnixPrivate(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)

	mux := http.NewServeMux()
	mux.HandleFunc("POST /users", s.handleAdminAddUser)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { s.writeError(w, r, errNotFound()) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: admin socket: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	<-errc
	return nil
}

// listenUnixPrivate creates the socket with no group/other permissions from the start (umask is
// process-wide, so the socket is created in a private temporary directory and renamed into place).
func listenUnixPrivate(path string) (net.Listener, error) {
	tmpDir, err := os.MkdirTemp(filepath.Dir(path), ".admin-")
	if err != nil {
		return nil, fmt.Errorf("gateway: admin socket: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	if err := os.Chmod(tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("gateway: admin socket: %w", err)
	}
	tmp := filepath.Join(tmpDir, AdminSocketName)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("gateway: admin socket: %w", err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // the file is renamed; ServeAdmin removes it by its final name
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("gateway: admin socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("gateway: admin socket: %w", err)
	}
	return ln, nil
}

// clearStaleSocket removes a socket file left by a crashed server; a live one is an error.
func clearStaleSocket(ctx context.Context, path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gateway: admin socket: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("gateway: admin socket: %s exists and is not a socket; remove it", path)
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if c, err := d.DialContext(dctx, "unix", path); err == nil {
		c.Close()
		return fmt.Errorf("gateway: admin socket: another citegate server is listening on %s", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("gateway: admin socket: remove stale %s: %w", path, err)
	}
	return nil
}

type adminUserReq struct {
	Name string `json:"name"`
}

type adminUserResp struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Token string `json:"token"`
}

func (s *Server) handleAdminAddUser(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	var req adminUserReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.writeError(w, r, errBadRequest("body must be {\"name\": \"…\"}"))
		return
	}
	name := strings.TrimSpace(req.Name)
	if name == "" {
		s.writeError(w, r, errBadRequest("user name must not be empty"))
		return
	}
	u, tok, err := s.st.CreateUser(r.Context(), name)
	switch {
	case errors.Is(err, store.ErrConflict):
		s.writeError(w, r, &Error{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()})
		return
	case errors.Is(err, store.ErrInvalid):
		// The store's validation messages (empty, too long) are meant for the operator.
		s.writeError(w, r, errBadRequest(err.Error()))
		return
	case err != nil:
		s.writeError(w, r, s.storeErr("create_user", err))
		return
	}
	s.log.InfoContext(r.Context(), "user created via admin socket", "user", u.ID, "name", u.Name)
	writeJSON(w, http.StatusCreated, adminUserResp{ID: u.ID, Name: u.Name, Token: tok})
}

// AdminAddUser asks the server running on dataDir to create a user and returns the new token. It
// returns an error wrapping ErrNoAdminServer when no server listens there.
func AdminAddUser(ctx context.Context, dataDir, name string) (string, error) {
	path := filepath.Join(dataDir, AdminSocketName)
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			DisableKeepAlives: true,
		},
	}
	body, _ := json.Marshal(adminUserReq{Name: name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://citegate/users", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("admin: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return "", fmt.Errorf("admin: %w on %s", ErrNoAdminServer, path)
		}
		return "", fmt.Errorf("admin: talk to the server on %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", fmt.Errorf("admin: read answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		var eb errorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error.Message != "" {
			return "", fmt.Errorf("admin: %s", eb.Error.Message)
		}
		return "", fmt.Errorf("admin: server answered %s", resp.Status)
	}
	var out adminUserResp
	if err := json.Unmarshal(data, &out); err != nil || out.Token == "" {
		return "", fmt.Errorf("admin: malformed answer from the server")
	}
	return out.Token, nil
}
