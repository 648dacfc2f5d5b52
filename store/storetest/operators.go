package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testOperatorRoleGrantRevokeAudited(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)

	alice, _, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)
	assert.False(t, alice.Operator)

	op, opTok, err := s.CreateUserRole(ctx, "Olga", true, cli)
	require.NoError(t, err)
	assert.True(t, op.Operator)
	got, err := s.UserByToken(ctx, opTok)
	require.NoError(t, err)
	assert.True(t, got.Operator, "the role is stored with the user")

	clock.Advance(time.Minute)
	u, changed, err := s.SetOperator(ctx, "ALICE", true, store.Actor{ID: op.ID, Name: op.Name})
	require.NoError(t, err)
	assert.True(t, changed)
	assert.True(t, u.Operator)
	got, err = s.GetUser(ctx, alice.ID)
	require.NoError(t, err)
	assert.True(t, got.Operator)

	_, changed, err = s.SetOperator(ctx, "alice", true, cli)
	require.NoError(t, err)
	assert.False(t, changed, "granting a role the user has changes nothing")

	clock.Advance(time.Minute)
	u, changed, err = s.SetOperator(ctx, "alice", false, cli)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.False(t, u.Operator)

	_, _, err = s.SetOperator(ctx, "nobody", true, cli)
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.SetOperator(ctx, "alice", true, store.Actor{})
	assert.ErrorIs(t, err, store.ErrInvalid, "a role change must name who made it")
	got, err = s.GetUser(ctx, alice.ID)
	require.NoError(t, err)
	assert.False(t, got.Operator, "a refused change leaves the role alone")
	_, _, err = s.CreateUserRole(ctx, "anon-op", true, store.Actor{})
	assert.ErrorIs(t, err, store.ErrInvalid)
	_, err = s.UserByName(ctx, "anon-op")
	assert.ErrorIs(t, err, store.ErrNotFound, "the user is not created without its audit entry")

	users, err := s.ListUsers(ctx)
	require.NoError(t, err)
	roles := map[string]bool{}
	for _, u := range users {
		roles[u.Name] = u.Operator
	}
	assert.Equal(t, map[string]bool{"alice": false, "Olga": true}, roles)

	log, err := s.ListAudit(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, log, 3, "creation as operator, grant, revoke; the no-op and the refused ones are not there")
	assert.Equal(t, store.AuditOperatorRevoke, log[0].Action)
	assert.Equal(t, "alice", log[0].Target)
	assert.Equal(t, "cli:test", log[0].Actor)
	assert.Empty(t, log[0].ActorID)
	assert.Equal(t, clock.Now(), log[0].Time)
	assert.Equal(t, store.AuditOperatorGrant, log[1].Action)
	assert.Equal(t, op.ID, log[1].ActorID)
	assert.Equal(t, "Olga", log[1].Actor)
	assert.Equal(t, store.AuditOperatorGrant, log[2].Action)
	assert.Equal(t, "Olga", log[2].Target)
	assert.Greater(t, log[0].ID, log[1].ID)
	assert.Greater(t, log[1].ID, log[2].ID)
}

func testAuditListingAndPaging(t *testing.T, h Harness) {
	ctx := context.Background()
	path, clock := h.NewDB(t), newClock()
	s := h.openAt(t, path, clock)

	empty, err := s.ListAudit(ctx, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, empty)
	none, err := s.AuditSince(ctx, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, none)

	var ids []uint64
	for i := range 7 {
		clock.Advance(time.Second)
		e, err := s.AppendAudit(ctx, store.AuditEntry{ID: 999, Actor: "op", Action: store.AuditShareView, Target: strings.Repeat("x", i+1)})
		require.NoError(t, err)
		assert.Equal(t, clock.Now(), e.Time, "the store stamps the time")
		ids = append(ids, e.ID)
	}
	assert.Equal(t, uint64(1), ids[0], "ids come from the store, not the caller")

	page, err := s.ListAudit(ctx, 0, 3)
	require.NoError(t, err)
	assert.Equal(t, []uint64{7, 6, 5}, auditIDs(page))
	page, err = s.ListAudit(ctx, 5, 3)
	require.NoError(t, err)
	assert.Equal(t, []uint64{4, 3, 2}, auditIDs(page))
	page, err = s.ListAudit(ctx, 2, 3)
	require.NoError(t, err)
	assert.Equal(t, []uint64{1}, auditIDs(page))
	page, err = s.ListAudit(ctx, 1000, 2)
	require.NoError(t, err)
	assert.Equal(t, []uint64{7, 6}, auditIDs(page), "a cursor past the end starts at the newest")

	page, err = s.AuditSince(ctx, 0, 4)
	require.NoError(t, err)
	assert.Equal(t, []uint64{1, 2, 3, 4}, auditIDs(page))
	page, err = s.AuditSince(ctx, 4, 100)
	require.NoError(t, err)
	assert.Equal(t, []uint64{5, 6, 7}, auditIDs(page))
	page, err = s.AuditSince(ctx, 7, 100)
	require.NoError(t, err)
	assert.Empty(t, page)
	page, err = s.AuditSince(ctx, ^uint64(0), 100)
	require.NoError(t, err)
	assert.Empty(t, page)

	for _, bad := range []store.AuditEntry{
		{Action: store.AuditShareView},
		{Actor: "op"},
		{Actor: "op", Action: store.AuditShareView, Target: strings.Repeat("t", 256+1)},
		{Actor: "op\nforged line", Action: store.AuditShareView},
		{Actor: "op", Action: store.AuditShareView, Detail: "\xff"},
	} {
		_, err := s.AppendAudit(ctx, bad)
		assert.ErrorIs(t, err, store.ErrInvalid, "%+v", bad)
	}
	all, err := s.AuditSince(ctx, 0, 100)
	require.NoError(t, err)
	assert.Len(t, all, 7, "refused entries are not stored")

	// The log survives a reopen.
	require.NoError(t, s.Close())
	s = h.openAt(t, path, clock)
	all, err = s.ListAudit(ctx, 0, 100)
	require.NoError(t, err)
	assert.Len(t, all, 7)
	h.check(t, s)
}

func testListAllSharesAndOperatorRevoke(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	alice, _, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)
	bob, _, err := s.CreateUser(ctx, "bob")
	require.NoError(t, err)
	sa := newSession(t, s, alice.ID)
	require.NoError(t, s.SetSessionTitle(ctx, sa.ID, "alice's chat"))
	sb := newSession(t, s, bob.ID)
	newSession(t, s, bob.ID) // never shared: appears nowhere below

	tokA, shA, err := s.CreateShare(ctx, sa.ID, alice.ID, 3)
	require.NoError(t, err)
	clock.Advance(time.Minute)
	_, shB, err := s.CreateShare(ctx, sb.ID, bob.ID, 5)
	require.NoError(t, err)

	all, err := s.ListAllShares(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, shB.TokenHash, all[0].ID(), "newest first")
	assert.Equal(t, "bob", all[0].Owner.Name)
	assert.Equal(t, sb.ID, all[0].Session.ID)
	assert.Equal(t, "alice", all[1].Owner.Name)
	assert.Equal(t, "alice's chat", all[1].Session.Title)
	assert.Equal(t, uint64(3), all[1].Watermark)

	got, err := s.GetShareByID(ctx, shA.TokenHash)
	require.NoError(t, err)
	assert.Equal(t, shA, got)
	_, err = s.GetShareByID(ctx, tokA)
	assert.ErrorIs(t, err, store.ErrNotFound, "the id is the hash, not the token")
	_, err = s.GetShareByID(ctx, "")
	assert.ErrorIs(t, err, store.ErrNotFound)

	op := store.AuditEntry{ActorID: "op-id", Actor: "olga", Detail: "alice's chat"}
	_, err = s.RevokeShareAsOperator(ctx, shA.TokenHash, store.AuditEntry{})
	assert.ErrorIs(t, err, store.ErrInvalid, "no revocation without its audit entry")
	_, err = s.GetShare(ctx, tokA)
	require.NoError(t, err, "the refused revocation left the share alone")

	revoked, err := s.RevokeShareAsOperator(ctx, shA.TokenHash, op)
	require.NoError(t, err)
	assert.Equal(t, alice.ID, revoked.OwnerID)
	_, err = s.GetShare(ctx, tokA)
	assert.ErrorIs(t, err, store.ErrNotFound, "the owner's link stops working")
	own, err := s.ListShares(ctx, alice.ID)
	require.NoError(t, err)
	assert.Empty(t, own, "and it leaves the owner's list")
	_, err = s.RevokeShareAsOperator(ctx, shA.TokenHash, op)
	assert.ErrorIs(t, err, store.ErrNotFound)

	log, err := s.ListAudit(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, log, 1)
	assert.Equal(t, store.AuditShareRevoke, log[0].Action)
	assert.Equal(t, shA.TokenHash, log[0].Target)
	assert.Equal(t, "olga", log[0].Actor)

	all, err = s.ListAllShares(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, shB.TokenHash, all[0].ID())
}

var cli = store.Actor{Name: "cli:test"}

func auditIDs(es []store.AuditEntry) []uint64 {
	out := []uint64{}
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}
