package store

import (
	"context"
	"fmt"
)

// SetLanguage records the user's interface language (see Store.SetLanguage).
func (p *PG) SetLanguage(ctx context.Context, userID, lang string) (User, error) {
	if err := CheckLanguage(lang); err != nil {
		return User{}, fmt.Errorf("store: set language: %w", err)
	}
	var u User
	err := p.q(ctx, "set language", func(q pgq) error {
		var err error
		u, err = scanUser(q.QueryRow(ctx, `UPDATE users SET language = $2 WHERE id = $1 RETURNING `+pgUserCols, userID, lang))
		return notFound(err, "user", userID)
	})
	return u, err
}
