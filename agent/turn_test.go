package agent

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// writeCounter is the real store with every write method counted: each is one transaction (one
// commit, or one share of a batched commit). before, when set, runs ahead of each write with its
// position (0 for the first) and may fail it.
type writeCounter struct {
	*store.Store
	mu     sync.Mutex
	writes []string
	before func(i int, name string) error
}

func (w *writeCounter) note(name string) error {
	w.mu.Lock()
	i := len(w.writes)
	w.writes = append(w.writes, name)
	before := w.before
	w.mu.Unlock()
	if before != nil {
		return before(i, name)
	}
	return nil
}

func (w *writeCounter) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...)
}

func (w *writeCounter) AppendMessage(ctx context.Context, m store.Message) (store.Message, error) {
	if err := w.note("AppendMessage"); err != nil {
		return store.Message{}, err
	}
	return w.Store.AppendMessage(ctx, m)
}

func (w *writeCounter) AppendMessages(ctx context.Context, ms []store.Message) ([]store.Message, error) {
	if err := w.note("AppendMessages"); err != nil {
		return nil, err
	}
	return w.Store.AppendMessages(ctx, ms)
}

func (w *writeCounter) CreateRun(ctx context.Context, r store.Run) (store.Run, error) {
	if err := w.note("CreateRun"); err != nil {
		return store.Run{}, err
	}
	return w.Store.CreateRun(ctx, r)
}

func (w *writeCounter) StartTurn(ctx context.Context, m store.Message, r store.Run) (store.Message, store.Run, error) {
	if err := w.note("StartTurn"); err != nil {
		return store.Message{}, store.Run{}, err
	}
	return w.Store.StartTurn(ctx, m, r)
}

func (w *writeCounter) ConcludeRun(ctx context.Context, c store.Conclusion) (store.Run, store.Message, error) {
	if err := w.note("ConcludeRun"); err != nil {
		return store.Run{}, store.Message{}, err
	}
	return w.Store.ConcludeRun(ctx, c)
}

func (w *writeCounter) FinishRun(ctx context.Context, id string, phase store.Phase, errMsg string, final uint64) (store.Run, error) {
	if err := w.note("FinishRun"); err != nil {
		return store.Run{}, err
	}
	return w.Store.FinishRun(ctx, id, phase, errMsg, final)
}

func (w *writeCounter) MergeMetadata(ctx context.Context, id uint64, patch map[string]json.RawMessage) error {
	if err := w.note("MergeMetadata"); err != nil {
		return err
	}
	return w.Store.MergeMetadata(ctx, id, patch)
}

func (w *writeCounter) SetRunMarkers(ctx context.Context, id string, seen, kept, dropped int) error {
	if err := w.note("SetRunMarkers"); err != nil {
		return err
	}
	return w.Store.SetRunMarkers(ctx, id, seen, kept, dropped)
}

// TestTurnWriteTransactions counts the store transactions of a turn: one to start it (question and
// run), one per tool round (the tool-calling message with all its results), one to conclude it.
// A turn used to make five for one round with one tool (question, run, tool call, result, end).
func TestTurnWriteTransactions(t *testing.T) {
	search, _ := searchTool(hitInvoice, hitTypes)
	page := pageTool(map[string]hit{pageGuide.url: pageGuide})
	tests := []struct {
		name    string
		replies []reply
		stored  bool
		want    []string
	}{
		{"one round, one tool", []reply{
			toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
			textStream("答案。[^1^]"),
		}, false, []string{"StartTurn", "AppendMessages", "ConcludeRun"}},
		{"two rounds, two tools each", []reply{
			toolStream("先查。", call{id: "c1", name: "web_search", args: []string{`{"query":"a"}`}}, call{id: "c2", name: "open_web_page", args: []string{`{"url":"https://tax.example.cn/guide"}`}}),
			toolStream("", call{id: "c3", name: "web_search", args: []string{`{"query":"b"}`}}, call{id: "c4", name: "web_search", args: []string{`{"query":"c"}`}}),
			textStream("答案。[^1^]"),
		}, false, []string{"StartTurn", "AppendMessages", "AppendMessages", "ConcludeRun"}},
		{"no tools", []reply{textStream("直接回答。")}, false, []string{"StartTurn", "ConcludeRun"}},
		// A turn the caller stored (a chat platform's, store.AcceptInbound) writes no start.
		{"stored turn", []reply{
			toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
			textStream("答案。[^1^]"),
		}, true, []string{"AppendMessages", "ConcludeRun"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t)
			sid := newSession(t, st)
			w := &writeCounter{Store: st}
			llm := newFakeLLM(t, tc.replies...)
			a := newAgent(t, Config{Store: w, Model: llm.model(t), Tools: []Tool{search, page}})
			turn := Turn{SessionID: sid, Text: "电子发票抬头写错了怎么办？", Channel: "desktop"}
			if tc.stored {
				acc, err := st.AcceptInbound(context.Background(), store.Inbound{SeenKey: "msg:1", SeenTTL: time.Hour, Conversation: "feishu:oc_1",
					Create: &store.Session{UserID: "u1", Channel: "feishu"}, Turn: &store.InboundTurn{Channel: "feishu", Text: turn.Text}})
				require.NoError(t, err)
				turn = Turn{SessionID: acc.SessionID, Text: turn.Text, Channel: "feishu", RunID: acc.Run.ID, UserMessageID: acc.UserMessage.ID}
			}
			h, err := a.Submit(context.Background(), turn)
			require.NoError(t, err)
			out := wait(t, h)
			require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
			assert.Equal(t, tc.want, w.list())

			// The record is the same as with one transaction per message: every message of the
			// run, tool calls before their results, in the order the run produced them.
			msgs, err := st.ListRunMessages(context.Background(), h.ID)
			require.NoError(t, err)
			checkRunRecord(t, msgs, out)
		})
	}
}

// checkRunRecord checks one run's stored messages: its question first, each tool-calling message
// followed by exactly its results in call order, and the final answer last.
func checkRunRecord(t *testing.T, msgs []store.Message, out Outcome) {
	t.Helper()
	require.NotEmpty(t, msgs)
	assert.Equal(t, store.RoleUser, msgs[0].Role)
	assert.Equal(t, out.UserMessageID, msgs[0].ID)
	for i := 1; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role != store.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		require.GreaterOrEqual(t, len(msgs), i+1+len(m.ToolCalls), "the round's results are stored")
		for j, c := range m.ToolCalls {
			r := msgs[i+1+j]
			assert.Equal(t, store.RoleTool, r.Role)
			assert.Equal(t, c.ID, r.ToolCallID)
			assert.Equal(t, c.Name, r.ToolName)
		}
	}
	if out.FinalMessageID != 0 {
		assert.Equal(t, out.FinalMessageID, msgs[len(msgs)-1].ID)
	}
}

// TestCrashBetweenTurnWrites stops the database before each of a turn's writes, as a process that
// dies there would (the file is closed, the write never happens), opens it again and checks what
// a restart finds: the run FAILED "interrupted" or absent altogether, never a question without its
// run, never a tool call without its results or results without their call, and the history
// window (the dialog projection) agreeing with the messages.
func TestCrashBetweenTurnWrites(t *testing.T) {
	search, _ := searchTool(hitInvoice, hitTypes)
	for crashAt := range 3 { // before StartTurn, before the tool round, before ConcludeRun
		t.Run([]string{"before start", "before the tool round", "before the conclusion"}[crashAt], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "citegate.db")
			st, err := store.Open(path, store.Options{Now: func() time.Time { return testNow }})
			require.NoError(t, err)
			sid := newSession(t, st)
			seedTurns(t, st, sid, 2, func(i int) string { return "早先的答案" })
			w := &writeCounter{Store: st}
			errDown := errors.New("process died")
			w.before = func(i int, name string) error {
				if i < crashAt {
					return nil
				}
				if i == crashAt {
					require.NoError(t, st.Close())
				}
				return errDown
			}
			llm := newFakeLLM(t,
				toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}, call{id: "c2", name: "web_search", args: []string{`{"query":"专票"}`}}),
				textStream("答案。[^1^]"))
			a := newAgent(t, Config{Store: w, Model: llm.model(t), Tools: []Tool{search}})
			h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "新问题", Channel: "desktop"})
			require.NoError(t, err)
			out := wait(t, h)
			require.Equal(t, store.PhaseFailed, out.Phase)

			st2, err := store.Open(path, store.Options{Now: func() time.Time { return testNow }})
			require.NoError(t, err)
			defer st2.Close()
			ctx := context.Background()
			run, err := st2.GetRun(ctx, h.ID)
			if crashAt == 0 {
				require.ErrorIs(t, err, store.ErrNotFound, "nothing of the turn was written")
			} else {
				require.NoError(t, err)
				assert.Equal(t, store.PhaseFailed, run.Phase)
				assert.Equal(t, "interrupted", run.Error)
				assert.Zero(t, run.FinalMessageID)
			}
			msgs, err := st2.ListMessages(ctx, sid)
			require.NoError(t, err)
			runMsgs, err := st2.ListRunMessages(ctx, h.ID)
			require.NoError(t, err)
			switch crashAt {
			case 0:
				assert.Empty(t, runMsgs)
			case 1:
				require.Len(t, runMsgs, 1, "the question alone")
				assert.Equal(t, run.UserMessageID, runMsgs[0].ID)
			case 2:
				require.Len(t, runMsgs, 4, "question, tool call, both results")
				checkRunRecord(t, runMsgs, Outcome{UserMessageID: run.UserMessageID})
			}
			// Whatever the crash point, every question has its run and every call its result.
			calls, results := map[string]bool{}, map[string]bool{}
			for _, m := range msgs {
				if m.Role == store.RoleUser && m.RunID == h.ID {
					_, err := st2.GetRun(ctx, m.RunID)
					assert.NoError(t, err, "question %d has its run", m.ID)
				}
				for _, c := range m.ToolCalls {
					calls[m.RunID+"/"+c.ID] = true
				}
				if m.Role == store.RoleTool {
					results[m.RunID+"/"+m.ToolCallID] = true
				}
			}
			assert.Equal(t, calls, results, "tool calls and results come in whole rounds")
			full, err := st2.ListDialogBefore(ctx, sid, 0, 100)
			require.NoError(t, err)
			lines, err := st2.ListDialogLinesBefore(ctx, sid, 0, 100)
			require.NoError(t, err)
			require.Len(t, lines, len(full))
			for i := range full {
				assert.Equal(t, full[i].ID, lines[i].ID)
				assert.Equal(t, full[i].Content, lines[i].Content)
			}
		})
	}
}
