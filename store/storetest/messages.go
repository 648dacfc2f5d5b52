package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testConcurrentAppendsAcrossSessions(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	const (
		sessions   = 4
		writers    = 12 // three per session
		perWriter  = 40
		totalCount = writers * perWriter
	)
	var sess []store.Session
	for i := range sessions {
		sess = append(sess, newSession(t, s, fmt.Sprintf("u%d", i)))
	}

	ids := make([][]uint64, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			sid := sess[w%sessions].ID
			for i := range perWriter {
				m, err := s.AppendMessage(ctx, store.Message{
					SessionID: sid, Role: store.RoleUser, Content: fmt.Sprintf("w%d-%d", w, i),
				})
				if !assert.NoError(t, err) {
					return
				}
				ids[w] = append(ids[w], m.ID)
			}
		})
	}
	wg.Wait()

	seen := map[uint64]bool{}
	for w, list := range ids {
		require.Len(t, list, perWriter)
		assert.True(t, slices.IsSorted(list), "writer %d saw its ids increase", w)
		for _, id := range list {
			assert.False(t, seen[id], "id %d assigned twice", id)
			seen[id] = true
		}
	}
	require.Len(t, seen, totalCount)

	total := 0
	var last uint64
	for i, se := range sess {
		msgs, err := s.ListMessages(ctx, se.ID)
		require.NoError(t, err)
		total += len(msgs)
		require.Len(t, msgs, perWriter*writers/sessions)
		// Ascending ids, all belonging to this session, and each writer's messages in its order.
		next := map[int]int{}
		for j, m := range msgs {
			assert.Equal(t, se.ID, m.SessionID)
			if j > 0 {
				assert.Greater(t, m.ID, msgs[j-1].ID)
			}
			var w, k int
			_, err := fmt.Sscanf(m.Content, "w%d-%d", &w, &k)
			require.NoError(t, err)
			assert.Equal(t, i, w%sessions, "message from writer %d listed under session %d", w, i)
			assert.Equal(t, next[w], k, "writer %d out of order", w)
			next[w] = k + 1
		}
		lastID, err := s.LastMessageID(ctx, se.ID)
		require.NoError(t, err)
		assert.Equal(t, msgs[len(msgs)-1].ID, lastID)
		last = max(last, lastID)
	}
	assert.Equal(t, totalCount, total)
	assert.Equal(t, uint64(totalCount), last, "no id was skipped or reused")
	h.check(t, s)
}

func testAppendMessage(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess := newSession(t, s, "u1")
	fixed := time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("CST", 8*3600))

	tests := []struct {
		name     string
		msg      store.Message
		wantErr  error
		wantMeta string // expected stored metadata ("" = none)
	}{
		{name: "plain user message", msg: store.Message{Role: store.RoleUser, Content: "hi"}},
		{name: "tool message", msg: store.Message{Role: store.RoleTool, Content: `{"query":"q"}`, ToolCallID: "c1", ToolName: "web_search"}},
		{name: "assistant with tool calls", msg: store.Message{Role: store.RoleAssistant,
			ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"q"}`}}}},
		{name: "metadata object is compacted", msg: store.Message{Role: store.RoleAssistant, Content: "a",
			Metadata: json.RawMessage("{ \"k\" : [1, 2],\n \"h\": \"<b>&amp;</b>\" }")},
			wantMeta: `{"k":[1,2],"h":"<b>&amp;</b>"}`},
		{name: "whitespace metadata counts as none", msg: store.Message{Role: store.RoleUser, Metadata: json.RawMessage(" \n")}},
		{name: "caller CreatedAt kept", msg: store.Message{Role: store.RoleUser, CreatedAt: fixed}},
		{name: "metadata array", msg: store.Message{Role: store.RoleUser, Metadata: json.RawMessage(`[1]`)}, wantErr: store.ErrInvalid},
		{name: "metadata string", msg: store.Message{Role: store.RoleUser, Metadata: json.RawMessage(`"x"`)}, wantErr: store.ErrInvalid},
		{name: "metadata null", msg: store.Message{Role: store.RoleUser, Metadata: json.RawMessage(`null`)}, wantErr: store.ErrInvalid},
		{name: "metadata invalid", msg: store.Message{Role: store.RoleUser, Metadata: json.RawMessage(`{"a":}`)}, wantErr: store.ErrInvalid},
		{name: "metadata trailing data", msg: store.Message{Role: store.RoleUser, Metadata: json.RawMessage(`{} {}`)}, wantErr: store.ErrInvalid},
		{name: "unknown role", msg: store.Message{Role: "SYSTEM"}, wantErr: store.ErrInvalid},
		{name: "unknown session", msg: store.Message{SessionID: "nope", Role: store.RoleUser}, wantErr: store.ErrNotFound},
		{name: "empty session", msg: store.Message{SessionID: "-", Role: store.RoleUser}, wantErr: store.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := s.LastMessageID(ctx, sess.ID)
			require.NoError(t, err)
			clock.Advance(time.Second)
			in := tt.msg
			switch in.SessionID {
			case "":
				in.SessionID = sess.ID
			case "-":
				in.SessionID = ""
			}
			in.ID = 12345 // ignored
			got, err := s.AppendMessage(ctx, in)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				after, err := s.LastMessageID(ctx, sess.ID)
				require.NoError(t, err)
				assert.Equal(t, before, after, "nothing appended")
				return
			}
			require.NoError(t, err)
			assert.Greater(t, got.ID, before)
			if tt.msg.CreatedAt.IsZero() {
				assert.Equal(t, clock.Now(), got.CreatedAt)
			} else {
				// Kept at the backend's time resolution: nanoseconds (bbolt), microseconds (PostgreSQL).
				assert.WithinDuration(t, tt.msg.CreatedAt, got.CreatedAt, time.Microsecond)
			}
			assert.Equal(t, tt.wantMeta, string(got.Metadata))
			stored, err := s.GetMessage(ctx, got.ID)
			require.NoError(t, err)
			assert.Equal(t, got, stored, "the returned message is what was stored")
			se, err := s.GetSession(ctx, sess.ID)
			require.NoError(t, err)
			assert.Equal(t, clock.Now(), se.UpdatedAt, "append bumps the session")
		})
	}
}

func testMessagesNotFound(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	_, err := s.GetMessage(ctx, 1)
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ListMessages(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.LastMessageID(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.ErrorIs(t, s.MergeMetadata(ctx, 7, map[string]json.RawMessage{"a": json.RawMessage(`1`)}), store.ErrNotFound)

	sess := newSession(t, s, "u1")
	msgs, err := s.ListMessages(ctx, sess.ID)
	require.NoError(t, err)
	assert.NotNil(t, msgs)
	assert.Empty(t, msgs)
	last, err := s.LastMessageID(ctx, sess.ID)
	require.NoError(t, err)
	assert.Zero(t, last)
}

// store.Session ids that are prefixes of each other must not see each other's messages.
func testMessageIndexPrefixIsolation(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	ids := []string{"s", "s1", "s10", "t"}
	for _, id := range ids {
		_, err := s.CreateSession(ctx, store.Session{ID: id, UserID: "u"})
		require.NoError(t, err)
	}
	want := map[string][]uint64{}
	for round := range 3 {
		for _, id := range []string{"s10", "s", "s1"} { // "t" stays empty, sorting after all others
			m, err := s.AppendMessage(ctx, store.Message{SessionID: id, Role: store.RoleUser, Content: fmt.Sprint(round)})
			require.NoError(t, err)
			want[id] = append(want[id], m.ID)
		}
	}
	for _, id := range ids {
		msgs, err := s.ListMessages(ctx, id)
		require.NoError(t, err)
		var got []uint64
		for _, m := range msgs {
			got = append(got, m.ID)
		}
		assert.Equal(t, want[id], got, "session %q", id)
		last, err := s.LastMessageID(ctx, id)
		require.NoError(t, err)
		if len(want[id]) == 0 {
			assert.Zero(t, last)
		} else {
			assert.Equal(t, want[id][len(want[id])-1], last, "session %q", id)
		}
	}
}

func testMergeMetadata(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")

	tests := []struct {
		name    string
		stored  string // metadata given to AppendMessage ("" = none)
		patch   map[string]json.RawMessage
		want    string // exact stored metadata afterwards
		wantErr error
	}{
		{
			name:  "empty metadata counts as {}",
			patch: map[string]json.RawMessage{"citations": json.RawMessage(`[{"n":1,"url":"https://a.example/"}]`)},
			want:  `{"citations":[{"n":1,"url":"https://a.example/"}]}`,
		},
		{
			name:   "other keys kept byte for byte and in place",
			stored: `{"zeta":{"b":2,"a":1.50},"html":"<a href=\"x\">&</a>","uni":"来源 \u2028","n":1e3}`,
			patch:  map[string]json.RawMessage{"citations": json.RawMessage(`[]`)},
			want:   `{"zeta":{"b":2,"a":1.50},"html":"<a href=\"x\">&</a>","uni":"来源 \u2028","n":1e3,"citations":[]}`,
		},
		{
			name:   "patched key replaced in place",
			stored: `{"a":1,"citations":[{"n":9}],"b":2}`,
			patch:  map[string]json.RawMessage{"citations": json.RawMessage(` [ {"n" : 1} ] `)},
			want:   `{"a":1,"citations":[{"n":1}],"b":2}`,
		},
		{
			name:   "new keys appended in sorted order",
			stored: `{"m":true}`,
			patch:  map[string]json.RawMessage{"z": json.RawMessage(`1`), "a": json.RawMessage(`null`)},
			want:   `{"m":true,"a":null,"z":1}`,
		},
		{
			name:   "empty patch changes nothing",
			stored: `{"m":true}`,
			patch:  nil,
			want:   `{"m":true}`,
		},
		{
			name:    "invalid patch value",
			stored:  `{"m":true}`,
			patch:   map[string]json.RawMessage{"x": json.RawMessage(`{oops`)},
			want:    `{"m":true}`,
			wantErr: store.ErrInvalid,
		},
		{
			name:    "nil patch value",
			stored:  `{"m":true}`,
			patch:   map[string]json.RawMessage{"x": nil},
			want:    `{"m":true}`,
			wantErr: store.ErrInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: "x [^1^]",
				Metadata: json.RawMessage(tt.stored)})
			require.NoError(t, err)
			err = s.MergeMetadata(ctx, m.ID, tt.patch)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			got, err := s.GetMessage(ctx, m.ID)
			require.NoError(t, err)
			if tt.want == "" {
				assert.Empty(t, got.Metadata)
			} else {
				assert.Equal(t, tt.want, string(got.Metadata))
			}
			// Nothing but metadata changes.
			got.Metadata, m.Metadata = nil, nil
			assert.Equal(t, m, got)
		})
	}
}

func testMergeMetadataConcurrentLosesNoKey(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")
	m, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: "x",
		Metadata: json.RawMessage(`{"orig":"kept"}`)})
	require.NoError(t, err)

	const writers = 16
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range 5 {
				patch := map[string]json.RawMessage{
					fmt.Sprintf("k%02d", w): json.RawMessage(fmt.Sprint(i)),
					"shared":                json.RawMessage(fmt.Sprint(w)),
				}
				assert.NoError(t, s.MergeMetadata(ctx, m.ID, patch))
			}
		})
	}
	wg.Wait()

	got, err := s.GetMessage(ctx, m.ID)
	require.NoError(t, err)
	var meta map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(got.Metadata, &meta))
	assert.Len(t, meta, writers+2)
	assert.Equal(t, `"kept"`, string(meta["orig"]))
	for w := range writers {
		assert.Equal(t, "4", string(meta[fmt.Sprintf("k%02d", w)]), "writer %d's last value", w)
	}
	assert.Len(t, objectKeys(t, got.Metadata), writers+2, "no duplicate keys")
	h.check(t, s)
}

// appendParallel appends from 8 goroutines over 8 sessions (see Bench).
func appendParallel(b *testing.B, s store.Backend, content string) {
	ctx := context.Background()
	var sess []store.Session
	for i := range 8 {
		sess = append(sess, newSession(b, s, fmt.Sprintf("bench-parallel-%d", i)))
	}
	var next sync.Mutex
	n := 0
	b.ReportAllocs()
	b.SetParallelism(8) // many sessions writing at once, as in the gateway
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		sid := sess[n%len(sess)].ID
		n++
		next.Unlock()
		for pb.Next() {
			if _, err := s.AppendMessage(ctx, store.Message{SessionID: sid, Role: store.RoleAssistant, Content: content}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
