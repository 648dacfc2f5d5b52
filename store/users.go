package store

import (
	"context"
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
	name = strings.TrimSpace(name)
	if err := checkUserName(name); err != nil {
		return User{}, "", fmt.Errorf("store: create user: %w", err)
	}
	u := User{ID: newID(), Name: name, CreatedAt: s.nowUTC()}
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
