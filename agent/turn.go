package agent

import "github.com/citegate/citegate/store"

// startTurn stores a turn the caller did not store: its USER message and its RUNNING run, in one
// transaction (store.StartTurn), so that a crash leaves either both (the run is then recovered as
// FAILED "interrupted" under its question) or neither.
func (rs *runState) startTurn() error {
	h := rs.h
	user, _, err := rs.a.cfg.Store.StartTurn(rs.pctx,
		store.Message{SessionID: h.SessionID, RunID: h.ID, Role: store.RoleUser, Content: h.turn.Text, Metadata: h.turn.Metadata},
		store.Run{ID: h.ID, SessionID: h.SessionID, Channel: h.turn.Channel})
	if err != nil {
		return err
	}
	rs.out.UserMessageID = user.ID
	rs.runCreated = true
	return nil
}
