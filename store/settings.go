package store

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The interface languages a user may choose. The empty language is no choice: the pages follow the
// browser's Accept-Language, as they do for a visitor who is not signed in.
const (
	LangZH = "zh"
	LangEN = "en"
)

// CheckLanguage reports whether lang is a language a user may choose ("" clears the choice); any
// other value is ErrInvalid. Callers check before writing so a bad value is refused with a clear
// message instead of reaching the database constraint.
func CheckLanguage(lang string) error {
	switch lang {
	case "", LangZH, LangEN:
		return nil
	}
	return fmt.Errorf("%w: language %q is not one of %q, %q or empty (follow the browser)", ErrInvalid, lang, LangZH, LangEN)
}

// SetLanguage records the interface language of the user with userID (LangZH, LangEN, or "" to
// follow the browser again) and returns the updated user. Other values are ErrInvalid and unknown
// users ErrNotFound; neither changes anything. Like the operator role, the choice is read with the
// user on every request, so it follows the user to any browser or device at once.
func (s *Store) SetLanguage(ctx context.Context, userID, lang string) (User, error) {
	if err := CheckLanguage(lang); err != nil {
		return User{}, fmt.Errorf("store: set language: %w", err)
	}
	var u User
	err := s.update(ctx, "set language", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketUsers)
		if err := getJSON(b, []byte(userID), "user", &u); err != nil {
			return err
		}
		if u.Language == lang {
			return nil
		}
		u.Language = lang
		if err := putJSON(b, []byte(u.ID), u); err != nil {
			return fmt.Errorf("user %q: %w", u.ID, err)
		}
		return nil
	})
	if err != nil {
		return User{}, err
	}
	return u, nil
}
