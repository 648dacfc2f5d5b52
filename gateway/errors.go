package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error codes reaching HTTP clients and websocket frames.
const (
	CodeNotFound     = "not_found"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeBadRequest   = "bad_request"
	CodeRateLimited  = "rate_limited"
	CodeInternal     = "internal"
	CodeUnavailable  = "unavailable"
	CodeFetchFailed  = "fetch_failed"
	CodeConflict     = "conflict"
)

// Error is the one error type that reaches HTTP and websocket clients. Status is the HTTP status;
// Code and Message are what the client sees, never internal details.
type Error struct {
	Status  int
	Code    string
	Message string
	Err     error // the cause, logged but never shown
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// errNotFound is the single answer for anything missing or not the caller's: callers must not be able
// to tell the two apart, so the body never depends on which one it was.
func errNotFound() *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "not found"}
}

func errUnauthorized() *Error {
	return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing or invalid access token"}
}

func errBadRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: msg}
}

func errInternal(err error) *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error", Err: err}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError writes err as {"error":{"code","message"}}. Errors that are not *Error become internal.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = errInternal(err)
	}
	if e.Status >= 500 {
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", e)
	}
	var body errorBody
	body.Error.Code, body.Error.Message = e.Code, e.Message
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, e.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may have gone; nothing left to do about it
}
