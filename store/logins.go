package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Browser log-in is two steps so that the long-lived access token never travels in a URL:
//
//  1. An operator (or `serve` at start) creates a one-time login code for a user. Only its hash is
//     stored, with an expiry of at most MaxLoginCodeTTL.
//  2. The browser opens the link; RedeemLoginCode deletes the code and creates a web session in the
//     same transaction, so a code can be used once however many requests race for it. The web
//     session token goes into the HttpOnly cookie; it too is stored only as a hash and expires.
//
// Rotating or revoking a user's token (RotateToken, RevokeUser) deletes the user's web sessions and
// pending codes in the same transaction as the tokens.

// MaxLoginCodeTTL is the longest a login code may live.
const MaxLoginCodeTTL = 15 * time.Minute

// ErrRevoked means the user exists but has no access token (revoked): nothing may log in as them
// until `citegate user token NAME` gives them a new one.
var ErrRevoked = errors.New("user is revoked")

var (
	bucketLoginCodes  = []byte("login_codes")  // sha256(code) hex → loginCode
	bucketWebSessions = []byte("web_sessions") // sha256(session token) hex → webSession
)

func init() {
	// The buckets join the list Open creates; additive, so Open's code stays as it is.
	allBuckets = append(allBuckets, bucketLoginCodes, bucketWebSessions)
}

type loginCode struct {
	UserID    string    `json:"userId"`
	ExpiresAt time.Time `json:"expiresAt"`
}

type webSession struct {
	UserID    string    `json:"userId"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// CreateLoginCode creates a one-time login code for the user with id userID, valid for ttl (at most
// MaxLoginCodeTTL; ttl ≤ 0 means MaxLoginCodeTTL). It returns the code and its expiry. A revoked
// user gets ErrRevoked, an unknown one ErrNotFound. Expired codes of every user are dropped on the way.
func (s *Store) CreateLoginCode(ctx context.Context, userID string, ttl time.Duration) (string, time.Time, error) {
	if ttl <= 0 || ttl > MaxLoginCodeTTL {
		ttl = MaxLoginCodeTTL
	}
	now := s.nowUTC()
	exp := now.Add(ttl)
	code := randToken(tokenBytes)
	err := s.update(ctx, "create login code", func(tx *bolt.Tx) error {
		if err := getJSON(tx.Bucket(bucketUsers), []byte(userID), "user", &User{}); err != nil {
			return err
		}
		if !hasTokenLocked(tx, userID) {
			return fmt.Errorf("user %q: %w", userID, ErrRevoked)
		}
		if err := pruneExpiredLocked(tx.Bucket(bucketLoginCodes), now, func(raw []byte) (time.Time, error) {
			var c loginCode
			err := json.Unmarshal(raw, &c)
			return c.ExpiresAt, err
		}); err != nil {
			return err
		}
		return putJSON(tx.Bucket(bucketLoginCodes), []byte(hashToken(code)), loginCode{UserID: userID, ExpiresAt: exp})
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return code, exp, nil
}

// RedeemLoginCode exchanges a login code for a web session valid for sessionTTL. The code is deleted
// in the same transaction, so it works once. An unknown, used or expired code is ErrNotFound (the
// three are not told apart: the answer to a guess says nothing).
func (s *Store) RedeemLoginCode(ctx context.Context, code string, sessionTTL time.Duration) (User, string, error) {
	var u User
	token := randToken(tokenBytes)
	now := s.nowUTC()
	err := s.update(ctx, "redeem login code", func(tx *bolt.Tx) error {
		if code == "" {
			return fmt.Errorf("login code: %w", ErrNotFound)
		}
		codes := tx.Bucket(bucketLoginCodes)
		key := []byte(hashToken(code))
		raw := codes.Get(key)
		if raw == nil {
			return fmt.Errorf("login code: %w", ErrNotFound)
		}
		var c loginCode
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("decode login code: %w", err)
		}
		if err := codes.Delete(key); err != nil {
			return err
		}
		if !now.Before(c.ExpiresAt) {
			// The deletion above must commit, so the expiry is reported after the transaction.
			return nil
		}
		if err := getJSON(tx.Bucket(bucketUsers), []byte(c.UserID), "user", &u); err != nil {
			return err
		}
		return putJSON(tx.Bucket(bucketWebSessions), []byte(hashToken(token)),
			webSession{UserID: u.ID, CreatedAt: now, ExpiresAt: now.Add(sessionTTL)})
	})
	if err != nil {
		return User{}, "", err
	}
	if u.ID == "" {
		return User{}, "", fmt.Errorf("store: redeem login code: expired: %w", ErrNotFound)
	}
	return u, token, nil
}

// UserBySession returns the user of a live web session, or ErrNotFound (unknown or expired).
func (s *Store) UserBySession(ctx context.Context, token string) (User, error) {
	var u User
	now := s.nowUTC()
	err := s.view(ctx, "user by session", func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucketWebSessions).Get([]byte(hashToken(token)))
		if token == "" || raw == nil {
			return fmt.Errorf("web session: %w", ErrNotFound)
		}
		var ws webSession
		if err := json.Unmarshal(raw, &ws); err != nil {
			return fmt.Errorf("decode web session: %w", err)
		}
		if !now.Before(ws.ExpiresAt) {
			return fmt.Errorf("web session expired: %w", ErrNotFound)
		}
		return getJSON(tx.Bucket(bucketUsers), []byte(ws.UserID), "user", &u)
	})
	return u, err
}

// DeleteSession ends a web session (logout). An unknown token is not an error. Expired sessions of
// every user are dropped on the way.
func (s *Store) DeleteSession(ctx context.Context, token string) error {
	now := s.nowUTC()
	return s.update(ctx, "delete web session", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketWebSessions)
		if err := b.Delete([]byte(hashToken(token))); err != nil {
			return err
		}
		return pruneExpiredLocked(b, now, func(raw []byte) (time.Time, error) {
			var ws webSession
			err := json.Unmarshal(raw, &ws)
			return ws.ExpiresAt, err
		})
	})
}

// pruneExpiredLocked deletes the entries of b whose expiry (read by exp) is not after now. A record
// that does not decode is left alone: it is somebody else's problem to report, not a reason to fail.
func pruneExpiredLocked(b *bolt.Bucket, now time.Time, exp func([]byte) (time.Time, error)) error {
	var dead [][]byte
	if err := b.ForEach(func(k, v []byte) error {
		if t, err := exp(v); err == nil && !now.Before(t) {
			dead = append(dead, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range dead {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// deleteCredentialsLocked removes every access token, web session and login code of the user and
// reports how many access tokens and web sessions there were.
func deleteCredentialsLocked(tx *bolt.Tx, userID string) (tokens, sessions int, err error) {
	id := []byte(userID)
	tokens, err = deleteWhereLocked(tx.Bucket(bucketUserTokens), func(v []byte) bool { return bytes.Equal(v, id) })
	if err != nil {
		return 0, 0, err
	}
	owned := func(v []byte) bool {
		var rec struct {
			UserID string `json:"userId"`
		}
		return json.Unmarshal(v, &rec) == nil && rec.UserID == userID
	}
	if sessions, err = deleteWhereLocked(tx.Bucket(bucketWebSessions), owned); err != nil {
		return 0, 0, err
	}
	if _, err = deleteWhereLocked(tx.Bucket(bucketLoginCodes), owned); err != nil {
		return 0, 0, err
	}
	return tokens, sessions, nil
}

func deleteWhereLocked(b *bolt.Bucket, match func(v []byte) bool) (int, error) {
	var keys [][]byte
	if err := b.ForEach(func(k, v []byte) error {
		if match(v) {
			keys = append(keys, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// hasTokenLocked reports whether the user holds an access token (is not revoked). It scans the
// token bucket: users are few and this runs only for logins and administration.
func hasTokenLocked(tx *bolt.Tx, userID string) bool {
	id := []byte(userID)
	found := false
	_ = tx.Bucket(bucketUserTokens).ForEach(func(_, v []byte) error {
		if bytes.Equal(v, id) {
			found = true
			return errStop
		}
		return nil
	})
	return found
}

var errStop = errors.New("stop")

// CreateWebSession starts a browser session for the user with id userID (the token form's log-in:
// the person proved they hold the access token) and returns the session token for the cookie.
func (s *Store) CreateWebSession(ctx context.Context, userID string, ttl time.Duration) (string, error) {
	token := randToken(tokenBytes)
	now := s.nowUTC()
	err := s.update(ctx, "create web session", func(tx *bolt.Tx) error {
		if err := getJSON(tx.Bucket(bucketUsers), []byte(userID), "user", &User{}); err != nil {
			return err
		}
		b := tx.Bucket(bucketWebSessions)
		if err := pruneExpiredLocked(b, now, func(raw []byte) (time.Time, error) {
			var ws webSession
			err := json.Unmarshal(raw, &ws)
			return ws.ExpiresAt, err
		}); err != nil {
			return err
		}
		return putJSON(b, []byte(hashToken(token)), webSession{UserID: userID, CreatedAt: now, ExpiresAt: now.Add(ttl)})
	})
	if err != nil {
		return "", err
	}
	return token, nil
}
