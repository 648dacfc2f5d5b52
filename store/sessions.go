package store

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// CreateSession stores a new session. It assigns a random url-safe ID when sess.ID is empty and sets
// CreatedAt (when zero) and UpdatedAt. An ID that already exists is ErrConflict.
func (s *Store) CreateSession(ctx context.Context, sess Session) (Session, error) {
	sess, err := s.prepareSession(sess)
	if err != nil {
		return Session{}, fmt.Errorf("store: create session: %w", err)
	}
	err = s.update(ctx, "create session", func(tx *bolt.Tx) error {
		return insertSessionLocked(tx, sess)
	})
	if err != nil {
		return Session{}, err
	}
	return sess, nil
}

// prepareSession assigns a new session its ID (when empty) and timestamps, outside any transaction.
func (s clock) prepareSession(sess Session) (Session, error) {
	if sess.ID == "" {
		sess.ID = newID()
	}
	if err := checkID("session", sess.ID); err != nil {
		return Session{}, err
	}
	now := s.nowUTC()
	if sess.CreatedAt.IsZero() {
		sess.CreatedAt = now
	} else {
		sess.CreatedAt = s.norm(sess.CreatedAt)
	}
	sess.UpdatedAt = now
	return sess, nil
}

// insertSessionLocked stores a prepared session and its user index entry; an existing ID is
// ErrConflict.
func insertSessionLocked(tx *bolt.Tx, sess Session) error {
	b := tx.Bucket(bucketSessions)
	if b.Get([]byte(sess.ID)) != nil {
		return fmt.Errorf("session %q: %w", sess.ID, ErrConflict)
	}
	if err := putJSON(b, []byte(sess.ID), sess); err != nil {
		return fmt.Errorf("session %q: %w", sess.ID, err)
	}
	return tx.Bucket(bucketUserSessions).Put(prefixKey(sess.UserID, []byte(sess.ID)), nil)
}

// GetSession returns the session with id, or ErrNotFound.
func (s *Store) GetSession(ctx context.Context, id string) (Session, error) {
	var sess Session
	err := s.view(ctx, "get session", func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketSessions), []byte(id), "session", &sess)
	})
	return sess, err
}

// ListSessions returns userID's sessions, most recently updated first (ties: newest created first).
// A user without sessions gets an empty slice.
func (s *Store) ListSessions(ctx context.Context, userID string) ([]Session, error) {
	out := []Session{}
	err := s.view(ctx, "list sessions", func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bucketSessions)
		return scanPrefix(tx.Bucket(bucketUserSessions), userID, func(id, _ []byte) error {
			var sess Session
			if err := getJSON(sessions, id, "session", &sess); err != nil {
				return err
			}
			out = append(out, sess)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sortSessions(out)
	return out, nil
}

// SetSessionTitle replaces a session's title. It does not bump UpdatedAt: the list order follows
// conversation activity, not renames.
func (s *Store) SetSessionTitle(ctx context.Context, id, title string) error {
	return s.update(ctx, "set session title", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		var sess Session
		if err := getJSON(b, []byte(id), "session", &sess); err != nil {
			return err
		}
		sess.Title = title
		return putJSON(b, []byte(id), sess)
	})
}

// BindConversation points a chat-channel conversation key (e.g. "feishu:oc_123") at sessionID,
// replacing any earlier binding (that is how /new starts a fresh session). An unknown session is
// ErrNotFound.
func (s *Store) BindConversation(ctx context.Context, key, sessionID string) error {
	if key == "" {
		return fmt.Errorf("store: bind conversation: %w: empty conversation key", ErrInvalid)
	}
	return s.update(ctx, "bind conversation", func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get([]byte(sessionID)) == nil {
			return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
		}
		return tx.Bucket(bucketConversations).Put([]byte(key), []byte(sessionID))
	})
}

// ConversationSession returns the session currently bound to a conversation key, or ErrNotFound.
func (s *Store) ConversationSession(ctx context.Context, key string) (string, error) {
	var id string
	err := s.view(ctx, "conversation session", func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketConversations).Get([]byte(key))
		if v == nil {
			return fmt.Errorf("conversation %q: %w", key, ErrNotFound)
		}
		id = string(v)
		return nil
	})
	return id, err
}
