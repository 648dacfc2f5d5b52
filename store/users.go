package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// maxUserName bounds user names (in characters).
const maxUserName = 64

// tokenBytes is the entropy of user and share tokens (256 bits).
const tokenBytes = 32

// CreateUser creates a desktop/API user and returns it with its access token (32 random bytes,
// base64url without padding). Only sha256(token) is stored, so the token cannot be shown again.
// The name is trimmed; it must be non-empty, at most 64 characters and free of control characters
// (ErrInvalid), and unique ignoring case (ErrConflict).
func (s *Store) CreateUser(ctx context.Context, name string) (User, string, error) {
	return s.CreateUserRole(ctx, name, false, Actor{})
}

// CreateUserRole is CreateUser with the operator role given at creation when operator is set. Such a
// grant is a role change like SetOperator's: it is written to the audit log in the same transaction,
// as done by by (who must then be named, ErrInvalid otherwise).
func (s *Store) CreateUserRole(ctx context.Context, name string, operator bool, by Actor) (User, string, error) {
	name = strings.TrimSpace(name)
	if err := checkUserName(name); err != nil {
		return User{}, "", fmt.Errorf("store: create user: %w", err)
	}
	u := User{ID: newID(), Name: name, CreatedAt: s.nowUTC(), Operator: operator}
	token := randToken(tokenBytes)
	nameKey := []byte(strings.ToLower(name))
	err := s.update(ctx, "create user", func(tx *bolt.Tx) error {
		names := tx.Bucket(bucketUserNames)
		if names.Get(nameKey) != nil {
			return fmt.Errorf("user name %q is already taken: %w", name, ErrConflict)
		}
		if err := putJSON(tx.Bucket(bucketUsers), []byte(u.ID), u); err != nil {
			return fmt.Errorf("user %q: %w", u.ID, err)
		}
		if err := names.Put(nameKey, []byte(u.ID)); err != nil {
			return err
		}
		if operator {
			if _, err := s.appendAuditLocked(tx, roleAudit(by, u, true, "created as operator")); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketUserTokens).Put([]byte(hashToken(token)), []byte(u.ID))
	})
	if err != nil {
		return User{}, "", err
	}
	return u, token, nil
}

func checkUserName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: user name is empty", ErrInvalid)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: user name is not valid UTF-8", ErrInvalid)
	}
	if n := utf8.RuneCountInString(name); n > maxUserName {
		return fmt.Errorf("%w: user name has %d characters, at most %d allowed", ErrInvalid, n, maxUserName)
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w: user name contains control characters", ErrInvalid)
	}
	return nil
}

// UserByToken returns the user whose access token is token, or ErrNotFound.
func (s *Store) UserByToken(ctx context.Context, token string) (User, error) {
	var u User
	err := s.view(ctx, "user by token", func(tx *bolt.Tx) error {
		if token == "" {
			return fmt.Errorf("user token: %w", ErrNotFound)
		}
		id := tx.Bucket(bucketUserTokens).Get([]byte(hashToken(token)))
		if id == nil {
			// The token itself never goes into an error message or a log.
			return fmt.Errorf("user token: %w", ErrNotFound)
		}
		return getJSON(tx.Bucket(bucketUsers), id, "user", &u)
	})
	return u, err
}

// GetUser returns the user with id, or ErrNotFound.
func (s *Store) GetUser(ctx context.Context, id string) (User, error) {
	var u User
	err := s.view(ctx, "get user", func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketUsers), []byte(id), "user", &u)
	})
	return u, err
}

// CountUsers returns the number of users.
func (s *Store) CountUsers(ctx context.Context) (int, error) {
	n := 0
	err := s.view(ctx, "count users", func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketUsers).Stats().KeyN
		return nil
	})
	return n, err
}

// UserByName returns the user with this name (ignoring case and surrounding space), or ErrNotFound.
func (s *Store) UserByName(ctx context.Context, name string) (User, error) {
	var u User
	err := s.view(ctx, "user by name", func(tx *bolt.Tx) error {
		var err error
		u, err = userByNameLocked(tx, name)
		return err
	})
	return u, err
}

func userByNameLocked(tx *bolt.Tx, name string) (User, error) {
	var u User
	name = strings.TrimSpace(name)
	id := tx.Bucket(bucketUserNames).Get([]byte(strings.ToLower(name)))
	if id == nil {
		return u, fmt.Errorf("user %q: %w", name, ErrNotFound)
	}
	err := getJSON(tx.Bucket(bucketUsers), id, "user", &u)
	return u, err
}

// UserInfo is a user as `citegate user list` shows it.
type UserInfo struct {
	User
	// Active is false when the user is revoked (holds no access token).
	Active bool `json:"active"`
	// WebSessions counts the browser sessions that have not expired.
	WebSessions int `json:"webSessions"`
}

// ListUsers returns every user ordered by name (case-insensitive), with its state.
func (s *Store) ListUsers(ctx context.Context) ([]UserInfo, error) {
	var out []UserInfo
	now := s.nowUTC()
	err := s.view(ctx, "list users", func(tx *bolt.Tx) error {
		active := map[string]bool{}
		if err := tx.Bucket(bucketUserTokens).ForEach(func(_, v []byte) error {
			active[string(v)] = true
			return nil
		}); err != nil {
			return err
		}
		sessions := map[string]int{}
		if err := tx.Bucket(bucketWebSessions).ForEach(func(_, v []byte) error {
			var ws webSession
			if json.Unmarshal(v, &ws) == nil && now.Before(ws.ExpiresAt) {
				sessions[ws.UserID]++
			}
			return nil
		}); err != nil {
			return err
		}
		// user_names is keyed by the lower-case name, so walking it yields the order we want.
		return tx.Bucket(bucketUserNames).ForEach(func(_, id []byte) error {
			var u User
			if err := getJSON(tx.Bucket(bucketUsers), id, "user", &u); err != nil {
				return err
			}
			out = append(out, UserInfo{User: u, Active: active[u.ID], WebSessions: sessions[u.ID]})
			return nil
		})
	})
	return out, err
}

// RotateToken gives the named user a new access token and returns it. Every earlier credential of
// the user (access tokens, browser sessions, pending login codes) stops working in the same
// transaction. It also re-activates a revoked user. Unknown names are ErrNotFound.
func (s *Store) RotateToken(ctx context.Context, name string) (User, string, error) {
	var u User
	token := randToken(tokenBytes)
	err := s.update(ctx, "rotate token", func(tx *bolt.Tx) error {
		var err error
		if u, err = userByNameLocked(tx, name); err != nil {
			return err
		}
		if _, _, err := deleteCredentialsLocked(tx, u.ID); err != nil {
			return err
		}
		return tx.Bucket(bucketUserTokens).Put([]byte(hashToken(token)), []byte(u.ID))
	})
	if err != nil {
		return User{}, "", err
	}
	return u, token, nil
}

// RevokeUser removes every credential of the named user (access tokens, browser sessions, pending
// login codes). The user and their history stay; RotateToken gives them a token again. Revoking a
// revoked user changes nothing and is not an error. Unknown names are ErrNotFound.
func (s *Store) RevokeUser(ctx context.Context, name string) (User, error) {
	var u User
	err := s.update(ctx, "revoke user", func(tx *bolt.Tx) error {
		var err error
		if u, err = userByNameLocked(tx, name); err != nil {
			return err
		}
		_, _, err = deleteCredentialsLocked(tx, u.ID)
		return err
	})
	if err != nil {
		return User{}, err
	}
	return u, nil
}
