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
	"strconv"
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
// exit) until ctx ends. It lets the admin commands (`citegate user …`, `citegate backup`) work while
// this process holds the database. Routes (JSON; errors as everywhere, {"error":{"code","message"}}):
//
//	POST /users        {"name","operator"?,"actor"?} → 201 {"id","name","token","operator"} (conflict: name taken)
//	GET  /users        → {"users":[store.UserInfo…]}
//	POST /users/token  {"name"} → {"id","name","token"}        (rotate; closes the user's websockets)
//	POST /users/revoke {"name"} → {"id","name"}                (closes the user's websockets)
//	POST /users/login  {"name"} → {"id","name","url","expiresAt"} (conflict code "revoked")
//	POST /users/operator {"name","operator","actor"} → {"id","name","operator","changed"} (audited)
//	GET  /backup       → the bbolt file, with Content-Length (consistent online copy)
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
	mux.HandleFunc("GET /users", s.handleAdminListUsers)
	mux.HandleFunc("POST /users/token", s.handleAdminRotate)
	mux.HandleFunc("POST /users/revoke", s.handleAdminRevoke)
	mux.HandleFunc("POST /users/login", s.handleAdminLogin)
	mux.HandleFunc("POST /users/operator", s.handleAdminSetOperator)
	mux.HandleFunc("GET /backup", s.handleAdminBackup)
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

// CodeRevoked is the admin API's error code for a login link asked for a revoked user.
const CodeRevoked = "revoked"

type adminUserReq struct {
	Name string `json:"name"`
	// Operator asks for the operator role (POST /users, POST /users/operator).
	Operator bool `json:"operator,omitempty"`
	// Actor names the command line that asks, for the audit log of role changes ("cli:<account>").
	Actor string `json:"actor,omitempty"`
}

// AdminUser is the admin API's answer about one user. Token is set when a token was created
// (add, rotate); URL and ExpiresAt when a login link was (login).
type AdminUser struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Token     string    `json:"token,omitempty"`
	Operator  bool      `json:"operator,omitempty"`
	URL       string    `json:"url,omitempty"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// adminName reads {"name"} from the request body.
func adminName(w http.ResponseWriter, r *http.Request) (string, error) {
	req, err := adminReq(w, r)
	return req.Name, err
}

// adminReq reads the request body (adminUserReq) and checks the name.
func adminReq(w http.ResponseWriter, r *http.Request) (adminUserReq, error) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	var req adminUserReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return req, errBadRequest("body must be {\"name\": \"…\"}")
	}
	req.Name = strings.TrimSpace(req.Name)
	if req.Name == "" {
		return req, errBadRequest("user name is empty")
	}
	return req, nil
}

// adminActor is who asked on the admin socket, for the audit log. The socket is the server
// account's own (mode 0600), so the account name the command line sends is as much as can be known;
// a request that sends none is still recorded, as the socket.
func adminActor(req adminUserReq) store.Actor {
	a := strings.TrimSpace(req.Actor)
	if a == "" || len(a) > 200 || strings.IndexFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		a = "cli:admin-socket"
	}
	return store.Actor{Name: a}
}

// adminStoreErr maps the store's answers to the admin API's codes. Unlike the public API, the admin
// socket is the operator's own: not-found and conflicts are named as they are.
func (s *Server) adminStoreErr(op, name string, err error) *Error {
	switch {
	case errors.Is(err, store.ErrConflict):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: fmt.Sprintf("user name %q is already taken", name)}
	case errors.Is(err, store.ErrRevoked):
		return &Error{Status: http.StatusConflict, Code: CodeRevoked, Message: fmt.Sprintf("user %q is revoked", name)}
	case errors.Is(err, store.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no user named %q", name)}
	case errors.Is(err, store.ErrInvalid):
		// The store's validation messages (empty, too long) are meant for the operator.
		msg := err.Error()
		if i := strings.LastIndex(msg, store.ErrInvalid.Error()+": "); i >= 0 {
			msg = msg[i+len(store.ErrInvalid.Error())+2:]
		}
		return errBadRequest(msg)
	}
	return s.storeErr(op, err)
}

func (s *Server) handleAdminAddUser(w http.ResponseWriter, r *http.Request) {
	req, err := adminReq(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	u, tok, err := s.st.CreateUserRole(r.Context(), req.Name, req.Operator, adminActor(req))
	if err != nil {
		s.writeError(w, r, s.adminStoreErr("create_user", req.Name, err))
		return
	}
	s.log.InfoContext(r.Context(), "user created via admin socket", "user", u.ID, "name", u.Name, "operator", u.Operator)
	writeJSON(w, http.StatusCreated, AdminUser{ID: u.ID, Name: u.Name, Token: tok, Operator: u.Operator})
}

// AdminRole is the admin API's answer to a role change.
type AdminRole struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Operator bool   `json:"operator"`
	// Changed is false when the user already had the role asked for (nothing was recorded).
	Changed bool `json:"changed"`
	// ConsoleURL is the operator console on this server.
	ConsoleURL string `json:"consoleUrl"`
}

func (s *Server) handleAdminSetOperator(w http.ResponseWriter, r *http.Request) {
	req, err := adminReq(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	u, changed, err := s.st.SetOperator(r.Context(), req.Name, req.Operator, adminActor(req))
	if err != nil {
		s.writeError(w, r, s.adminStoreErr("set_operator", req.Name, err))
		return
	}
	if changed {
		s.log.InfoContext(r.Context(), "operator role changed via admin socket", "user", u.ID, "operator", u.Operator)
	}
	writeJSON(w, http.StatusOK, AdminRole{ID: u.ID, Name: u.Name, Operator: u.Operator, Changed: changed,
		ConsoleURL: s.cfg.PublicURL + "/operator"})
}

func (s *Server) handleAdminListUsers(w http.ResponseWriter, r *http.Request) {
	users, err := s.st.ListUsers(r.Context())
	if err != nil {
		s.writeError(w, r, s.storeErr("list_users", err))
		return
	}
	if users == nil {
		users = []store.UserInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"users": users})
}

func (s *Server) handleAdminRotate(w http.ResponseWriter, r *http.Request) {
	name, err := adminName(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	u, tok, err := s.st.RotateToken(r.Context(), name)
	if err != nil {
		s.writeError(w, r, s.adminStoreErr("rotate_token", name, err))
		return
	}
	s.closeUserEverywhere(u.ID)
	s.log.InfoContext(r.Context(), "user token rotated via admin socket", "user", u.ID)
	writeJSON(w, http.StatusOK, AdminUser{ID: u.ID, Name: u.Name, Token: tok})
}

func (s *Server) handleAdminRevoke(w http.ResponseWriter, r *http.Request) {
	name, err := adminName(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	u, err := s.st.RevokeUser(r.Context(), name)
	if err != nil {
		s.writeError(w, r, s.adminStoreErr("revoke_user", name, err))
		return
	}
	s.closeUserEverywhere(u.ID)
	s.log.InfoContext(r.Context(), "user revoked via admin socket", "user", u.ID)
	writeJSON(w, http.StatusOK, AdminUser{ID: u.ID, Name: u.Name})
}

func (s *Server) handleAdminLogin(w http.ResponseWriter, r *http.Request) {
	name, err := adminName(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	u, err := s.st.UserByName(r.Context(), name)
	if err != nil {
		s.writeError(w, r, s.adminStoreErr("user_by_name", name, err))
		return
	}
	code, exp, err := s.st.CreateLoginCode(r.Context(), u.ID, store.MaxLoginCodeTTL)
	if err != nil {
		s.writeError(w, r, s.adminStoreErr("create_login_code", u.Name, err))
		return
	}
	writeJSON(w, http.StatusOK, AdminUser{ID: u.ID, Name: u.Name, URL: LoginURL(s.cfg.PublicURL, code), ExpiresAt: exp})
}

// handleAdminBackup streams a consistent copy of the database. Content-Length is the copy's size,
// so the client can tell a complete copy from one cut short.
func (s *Server) handleAdminBackup(w http.ResponseWriter, r *http.Request) {
	fb, ok := s.st.(store.FileBackup)
	if !ok {
		s.writeError(w, r, &Error{Status: http.StatusNotImplemented, Code: CodeUnavailable, Message: store.ErrNoFileBackup.Error()})
		return
	}
	started := false
	n, err := fb.BackupWith(r.Context(), func(size int64) (io.Writer, error) {
		started = true
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
		return w, nil
	})
	if err != nil {
		if !started {
			s.writeError(w, r, s.storeErr("backup", err))
			return
		}
		// Too late for an error body: the short body (against Content-Length) tells the client.
		s.log.ErrorContext(r.Context(), "backup over the admin socket cut short", "bytes", n, "err", err)
		return
	}
	s.log.InfoContext(r.Context(), "backup written via admin socket", "bytes", n)
}

// AdminError is an error the server answered on the admin socket. It wraps the store error that
// matches its code (store.ErrConflict, store.ErrNotFound, store.ErrRevoked, store.ErrInvalid), so
// callers handle answers from the server and from the store alike.
type AdminError struct {
	Code, Message string
}

func (e *AdminError) Error() string { return e.Message }

func (e *AdminError) Unwrap() error {
	switch e.Code {
	case CodeConflict:
		return store.ErrConflict
	case CodeNotFound:
		return store.ErrNotFound
	case CodeRevoked:
		return store.ErrRevoked
	case CodeBadRequest:
		return store.ErrInvalid
	}
	return nil
}

// adminClient talks HTTP over the data directory's admin socket.
func adminClient(path string, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			DisableKeepAlives: true,
		},
	}
}

// adminDo sends one request to the server on dataDir's admin socket. It returns the response for
// a 2xx answer (the caller closes it), an *AdminError for an error answer, and an error wrapping
// ErrNoAdminServer when nobody listens there.
func adminDo(ctx context.Context, dataDir, method, path string, in any, timeout time.Duration) (*http.Response, error) {
	sock := filepath.Join(dataDir, AdminSocketName)
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://citegate"+path, body)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := adminClient(sock, timeout).Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("admin: %w on %s", ErrNoAdminServer, sock)
		}
		return nil, fmt.Errorf("admin: talk to the server on %s: %w", sock, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb errorBody
	if json.Unmarshal(data, &eb) == nil && eb.Error.Message != "" {
		return nil, &AdminError{Code: eb.Error.Code, Message: eb.Error.Message}
	}
	return nil, fmt.Errorf("admin: server answered %s", resp.Status)
}

// adminJSON is adminDo for JSON answers.
func adminJSON(ctx context.Context, dataDir, method, path string, in, out any) error {
	resp, err := adminDo(ctx, dataDir, method, path, in, 10*time.Second)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return fmt.Errorf("admin: malformed answer from the server: %w", err)
	}
	return nil
}

// AdminAddUser asks the server running on dataDir to create a user and returns the new token. It
// returns an error wrapping ErrNoAdminServer when no server listens there.
func AdminAddUser(ctx context.Context, dataDir, name string) (string, error) {
	var out AdminUser
	if err := adminJSON(ctx, dataDir, http.MethodPost, "/users", adminUserReq{Name: name}, &out); err != nil {
		return "", err
	}
	if out.Token == "" {
		return "", errors.New("admin: malformed answer from the server: no token")
	}
	return out.Token, nil
}

// AdminAddUserRole is AdminAddUser with the operator role given at creation when operator is set;
// actor names the command line in the audit log.
func AdminAddUserRole(ctx context.Context, dataDir, name string, operator bool, actor string) (AdminUser, error) {
	var out AdminUser
	err := adminJSON(ctx, dataDir, http.MethodPost, "/users", adminUserReq{Name: name, Operator: operator, Actor: actor}, &out)
	if err == nil && out.Token == "" {
		err = errors.New("admin: malformed answer from the server: no token")
	}
	return out, err
}

// AdminSetOperator grants (operator=true) or takes away the operator role through the server
// running on dataDir; actor names the command line in the audit log.
func AdminSetOperator(ctx context.Context, dataDir, name string, operator bool, actor string) (AdminRole, error) {
	var out AdminRole
	err := adminJSON(ctx, dataDir, http.MethodPost, "/users/operator", adminUserReq{Name: name, Operator: operator, Actor: actor}, &out)
	return out, err
}

// AdminListUsers lists the users of the server running on dataDir.
func AdminListUsers(ctx context.Context, dataDir string) ([]store.UserInfo, error) {
	var out struct {
		Users []store.UserInfo `json:"users"`
	}
	err := adminJSON(ctx, dataDir, http.MethodGet, "/users", nil, &out)
	return out.Users, err
}

// AdminRotateToken gives the named user a new token through the server running on dataDir; the
// old token, the user's browser sessions and open websockets stop working at once.
func AdminRotateToken(ctx context.Context, dataDir, name string) (AdminUser, error) {
	var out AdminUser
	err := adminJSON(ctx, dataDir, http.MethodPost, "/users/token", adminUserReq{Name: name}, &out)
	if err == nil && out.Token == "" {
		err = errors.New("admin: malformed answer from the server: no token")
	}
	return out, err
}

// AdminRevokeUser removes the named user's credentials through the server running on dataDir and
// closes their open websockets.
func AdminRevokeUser(ctx context.Context, dataDir, name string) (AdminUser, error) {
	var out AdminUser
	err := adminJSON(ctx, dataDir, http.MethodPost, "/users/revoke", adminUserReq{Name: name}, &out)
	return out, err
}

// AdminLoginLink asks the server running on dataDir for a one-time login link for the named user.
func AdminLoginLink(ctx context.Context, dataDir, name string) (AdminUser, error) {
	var out AdminUser
	err := adminJSON(ctx, dataDir, http.MethodPost, "/users/login", adminUserReq{Name: name}, &out)
	if err == nil && out.URL == "" {
		err = errors.New("admin: malformed answer from the server: no link")
	}
	return out, err
}

// AdminBackup copies the database of the server running on dataDir to w and returns the bytes
// written. A copy cut short (fewer bytes than the server announced) is an error.
func AdminBackup(ctx context.Context, dataDir string, w io.Writer) (int64, error) {
	// No overall timeout: a large database takes the time it takes; ctx bounds it.
	resp, err := adminDo(ctx, dataDir, http.MethodGet, "/backup", nil, 0)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("admin: backup: %w", err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("admin: backup: got %d of %d bytes", n, resp.ContentLength)
	}
	return n, nil
}
