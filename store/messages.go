package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// AppendMessage stores m as the next message of its session. It assigns the ID (global and strictly
// increasing; any ID in m is ignored), sets CreatedAt when zero and bumps the session's UpdatedAt.
// A non-empty Metadata must be a JSON object (ErrInvalid otherwise); it is stored compacted. An
// unknown session is ErrNotFound.
func (s *Store) AppendMessage(ctx context.Context, m Message) (Message, error) {
	in, err := s.prepareMessage(m)
	if err != nil {
		return Message{}, fmt.Errorf("store: append message: %w", err)
	}
	var out Message
	// Batch is safe here: every run starts from the caller's message and recomputes the id inside
	// the transaction that commits it, so a retry cannot leave a duplicate behind.
	err = s.batchSized(ctx, "append message", payloadSize(in), func(tx *bolt.Tx) error {
		var err error
		out, err = s.appendLocked(tx, in)
		return err
	})
	if err != nil {
		return Message{}, err
	}
	return out, nil
}

// prepareMessage checks m and puts its metadata and time in stored form, outside any transaction.
func (s clock) prepareMessage(m Message) (Message, error) {
	if err := checkID("session", m.SessionID); err != nil {
		return Message{}, err
	}
	switch m.Role {
	case RoleUser, RoleAssistant, RoleTool:
	default:
		return Message{}, fmt.Errorf("%w: unknown role %q", ErrInvalid, m.Role)
	}
	if m.RunID != "" {
		if err := checkID("run", m.RunID); err != nil {
			return Message{}, err
		}
	}
	if len(bytes.TrimSpace(m.Metadata)) == 0 {
		m.Metadata = nil
	} else {
		fields, err := parseObject(m.Metadata)
		if err != nil {
			return Message{}, fmt.Errorf("%w: metadata must be a JSON object: %w", ErrInvalid, err)
		}
		m.Metadata = writeObject(fields)
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = s.nowUTC()
	} else {
		m.CreatedAt = s.norm(m.CreatedAt)
	}
	return m, nil
}

// appendLocked writes a prepared message with the next id, its session and run index entries, and
// bumps the session's UpdatedAt. It derives everything from in and the transaction, so a retry
// recomputes the same result.
func (s *Store) appendLocked(tx *bolt.Tx, in Message) (Message, error) {
	out, err := s.appendManyLocked(tx, []Message{in})
	if err != nil {
		return Message{}, err
	}
	return out[0], nil
}

// appendManyLocked is appendLocked for several prepared messages of one session, in order: the
// session is read and its UpdatedAt written once. Dialog messages (USER, ASSISTANT answers) also
// get their entry in the session's dialog projection (dialog.go).
func (s *Store) appendManyLocked(tx *bolt.Tx, in []Message) ([]Message, error) {
	if len(in) == 0 {
		return nil, nil
	}
	sessionID := in[0].SessionID
	sessions := tx.Bucket(bucketSessions)
	var sess Session
	if err := getJSON(sessions, []byte(sessionID), "session", &sess); err != nil {
		return nil, err
	}
	msgs := tx.Bucket(bucketMessages)
	idx := tx.Bucket(bucketSessionMessages)
	byRun := tx.Bucket(bucketRunMessages)
	dialog := tx.Bucket(bucketSessionDialog)
	out := make([]Message, len(in))
	for i, msg := range in {
		if msg.SessionID != sessionID {
			return nil, fmt.Errorf("%w: messages of sessions %q and %q in one append", ErrInvalid, sessionID, msg.SessionID)
		}
		id, err := msgs.NextSequence()
		if err != nil {
			return nil, fmt.Errorf("next message id: %w", err)
		}
		msg.ID = id
		if err := putJSON(msgs, u64(id), msg); err != nil {
			return nil, fmt.Errorf("message %d: %w", id, err)
		}
		kind := kindOf(msg)
		key := prefixKey(msg.SessionID, u64(id))
		if err := idx.Put(key, []byte{kind}); err != nil {
			return nil, fmt.Errorf("index message %d: %w", id, err)
		}
		if kind == kindUser || kind == kindAnswer {
			if err := dialog.Put(key, encodeDialogLine(msg)); err != nil {
				return nil, fmt.Errorf("dialog line of message %d: %w", id, err)
			}
		}
		if msg.RunID != "" {
			if err := byRun.Put(prefixKey(msg.RunID, u64(id)), runIndexValue(msg, kind)); err != nil {
				return nil, fmt.Errorf("index message %d by run: %w", id, err)
			}
		}
		out[i] = msg
	}
	if now := s.nowUTC(); now.After(sess.UpdatedAt) {
		sess.UpdatedAt = now
		if err := putJSON(sessions, []byte(sess.ID), sess); err != nil {
			return nil, fmt.Errorf("session %q: %w", sess.ID, err)
		}
	}
	return out, nil
}

// Message kinds, stored as the value of a session_messages index entry so that a window of the
// conversation can skip tool traffic without decoding it. An entry written before schema 2 that was
// not migrated has no kind (empty value) and is decoded to find out.
const (
	kindUser      byte = 'u' // USER
	kindAnswer    byte = 'a' // ASSISTANT without tool calls (a final or interrupted answer)
	kindToolCalls byte = 'c' // ASSISTANT with tool calls
	kindTool      byte = 't' // TOOL
)

func kindOf(m Message) byte {
	switch {
	case m.Role == RoleUser:
		return kindUser
	case m.Role == RoleTool:
		return kindTool
	case len(m.ToolCalls) > 0:
		return kindToolCalls
	default:
		return kindAnswer
	}
}

// migrateV2 fills in what schema 2 added for a file written by schema 1: the kind of every
// session_messages entry and the run_messages index. It reads every message once; it runs inside
// Open's transaction, so a failure leaves the file at version 1.
func migrateV2(tx *bolt.Tx) error {
	idx := tx.Bucket(bucketSessionMessages)
	byRun := tx.Bucket(bucketRunMessages)
	type entry struct {
		key  []byte
		kind byte
	}
	var kinds []entry
	c := tx.Bucket(bucketMessages).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var m Message
		if len(k) != 8 || json.Unmarshal(v, &m) != nil {
			continue // a corrupt record stays as it is; GetMessage reports it
		}
		kinds = append(kinds, entry{prefixKey(m.SessionID, k), kindOf(m)})
		if m.RunID != "" {
			if err := byRun.Put(prefixKey(m.RunID, k), nil); err != nil {
				return fmt.Errorf("index message %d by run: %w", m.ID, err)
			}
		}
	}
	for _, e := range kinds {
		if idx.Get(e.key) == nil {
			continue // not indexed in its session: leave it out as before
		}
		if err := idx.Put(e.key, []byte{e.kind}); err != nil {
			return fmt.Errorf("message kind: %w", err)
		}
	}
	return nil
}

// GetMessage returns the message with id, or ErrNotFound.
func (s *Store) GetMessage(ctx context.Context, id uint64) (Message, error) {
	var m Message
	err := s.view(ctx, "get message", func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketMessages), u64(id), "message", &m)
	})
	return m, err
}

// ListMessages returns a session's messages in ascending id order (empty slice when it has none).
// An unknown session is ErrNotFound.
func (s *Store) ListMessages(ctx context.Context, sessionID string) ([]Message, error) {
	out := []Message{}
	err := s.view(ctx, "list messages", func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get([]byte(sessionID)) == nil {
			return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
		}
		var err error
		out, err = readIndexed(tx, bucketSessionMessages, "session", sessionID, out)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListMessagesBefore returns up to limit of a session's messages with ids below beforeID (0: no
// bound), the newest ones, in ascending id order; the next older page is ListMessagesBefore(…,
// out[0].ID, …). It reads the session's index backwards from the cursor, so its cost depends on
// limit, not on the session's length. limit ≤ 0 is ErrInvalid; an unknown session is ErrNotFound.
func (s *Store) ListMessagesBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]Message, error) {
	return s.listBefore(ctx, "list messages before", sessionID, beforeID, limit, nil)
}

// ListDialogBefore is ListMessagesBefore restricted to the conversation itself: USER messages and
// ASSISTANT messages without tool calls (final or interrupted answers). Tool traffic is skipped
// without being decoded, which is what keeps a model's history window cheap in long sessions.
func (s *Store) ListDialogBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]Message, error) {
	return s.listBefore(ctx, "list dialog before", sessionID, beforeID, limit, func(kind byte) bool {
		return kind == kindUser || kind == kindAnswer
	})
}

// listBefore implements the backward page reads. keep, when set, selects entries by their kind; an
// entry without a kind (a schema-1 leftover) is decoded and classified.
func (s *Store) listBefore(ctx context.Context, op, sessionID string, beforeID uint64, limit int, keep func(kind byte) bool) ([]Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("store: %s: %w: limit must be positive", op, ErrInvalid)
	}
	out := []Message{}
	err := s.view(ctx, op, func(tx *bolt.Tx) error {
		msgs := tx.Bucket(bucketMessages)
		return walkBack(tx, bucketSessionMessages, sessionID, beforeID, "message index", func(suffix, v []byte) (bool, error) {
			if keep != nil && len(v) == 1 && !keep(v[0]) {
				return true, nil
			}
			var m Message
			if err := getJSON(msgs, suffix, "message", &m); err != nil {
				return false, err
			}
			if keep != nil && len(v) != 1 && !keep(kindOf(m)) {
				return true, nil
			}
			out = append(out, m)
			return len(out) < limit, nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// walkBack visits, newest first, the entries of a session's index bucket (keys sessionID\x00 +
// big-endian message id) with ids below beforeID (0: no bound), until visit returns false or an
// error. An unknown session is ErrNotFound; what names the index in a corrupt-key error.
func walkBack(tx *bolt.Tx, index []byte, sessionID string, beforeID uint64, what string, visit func(suffix, v []byte) (bool, error)) error {
	if tx.Bucket(bucketSessions).Get([]byte(sessionID)) == nil {
		return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
	}
	p := prefixKey(sessionID, nil)
	c := tx.Bucket(index).Cursor()
	var k, v []byte
	if beforeID == 0 {
		// "<prefix>\x01" sorts right after every "<prefix>\x00…" key.
		k, v = c.Seek(append([]byte(sessionID), 1))
	} else {
		k, v = c.Seek(prefixKey(sessionID, u64(beforeID)))
	}
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, p); k, v = c.Prev() {
		suffix := k[len(p):]
		if len(suffix) != 8 {
			return fmt.Errorf("corrupt %s key for session %q", what, sessionID)
		}
		more, err := visit(suffix, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// readIndexed appends to out, in ascending id order, the messages an index bucket lists under
// owner (a session or a run): keys owner\x00 + big-endian message id.
func readIndexed(tx *bolt.Tx, index []byte, kind, owner string, out []Message) ([]Message, error) {
	msgs := tx.Bucket(bucketMessages)
	err := scanPrefix(tx.Bucket(index), owner, func(suffix, _ []byte) error {
		if len(suffix) != 8 {
			return fmt.Errorf("corrupt message index key for %s %q", kind, owner)
		}
		var m Message
		if err := getJSON(msgs, suffix, "message", &m); err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	return out, err
}

// ListRunMessages returns the messages of one run in ascending id order through the run → messages
// index, without reading the rest of its session (empty slice for an unknown run or one without
// messages).
func (s *Store) ListRunMessages(ctx context.Context, runID string) ([]Message, error) {
	out := []Message{}
	err := s.view(ctx, "list run messages", func(tx *bolt.Tx) error {
		var err error
		out, err = readIndexed(tx, bucketRunMessages, "run", runID, out)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LastMessageID returns the id of a session's newest message, 0 when it has none. An unknown
// session is ErrNotFound.
func (s *Store) LastMessageID(ctx context.Context, sessionID string) (uint64, error) {
	var id uint64
	err := s.view(ctx, "last message id", func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get([]byte(sessionID)) == nil {
			return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
		}
		suffix := lastWithPrefix(tx.Bucket(bucketSessionMessages), sessionID)
		if suffix == nil {
			return nil
		}
		if len(suffix) != 8 {
			return fmt.Errorf("corrupt message index key for session %q", sessionID)
		}
		id = binary.BigEndian.Uint64(suffix)
		return nil
	})
	return id, err
}

// MergeMetadata merges patch into one message's metadata in a single transaction: patched keys are
// replaced or appended, every other key keeps its position and its bytes. Empty or absent metadata
// counts as {}. Stored metadata that is not a JSON object is ErrBadMetadata and nothing is written;
// a patch value that is not valid JSON is ErrInvalid.
func (s *Store) MergeMetadata(ctx context.Context, id uint64, patch map[string]json.RawMessage) error {
	compacted := make(map[string]json.RawMessage, len(patch))
	for k, v := range patch {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return fmt.Errorf("store: merge metadata: %w: value of %q is not valid JSON: %w", ErrInvalid, k, err)
		}
		compacted[k] = buf.Bytes()
	}
	// Applying the same patch twice yields the same record, so a retry is harmless.
	return s.batch(ctx, "merge metadata", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMessages)
		var m Message
		if err := getJSON(b, u64(id), "message", &m); err != nil {
			return err
		}
		var fields []field
		if len(bytes.TrimSpace(m.Metadata)) > 0 {
			var err error
			if fields, err = parseObject(m.Metadata); err != nil {
				return fmt.Errorf("message %d: %w: %w", id, ErrBadMetadata, err)
			}
		}
		m.Metadata = writeObject(mergeFields(fields, compacted))
		if err := putJSON(b, u64(id), m); err != nil {
			return err
		}
		return syncDialogLocked(tx, m)
	})
}

// field is one member of a JSON object with its value's raw bytes.
type field struct {
	key string
	val json.RawMessage
}

// parseObject splits a JSON object into its members in document order, keeping each value's bytes.
func parseObject(raw []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	fields := []field{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		fields = append(fields, field{key: key, val: val})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON object")
	}
	return fields, nil
}

// mergeFields replaces patched keys in place (dropping later duplicates of them) and appends new
// keys in sorted order so the result does not depend on map iteration.
func mergeFields(fields []field, patch map[string]json.RawMessage) []field {
	out := make([]field, 0, len(fields)+len(patch))
	done := make(map[string]bool, len(patch))
	for _, f := range fields {
		v, patched := patch[f.key]
		switch {
		case !patched:
			out = append(out, f)
		case !done[f.key]:
			out = append(out, field{key: f.key, val: v})
			done[f.key] = true
		}
	}
	var added []string
	for k := range patch {
		if !done[k] {
			added = append(added, k)
		}
	}
	slices.Sort(added)
	for _, k := range added {
		out = append(out, field{key: k, val: patch[k]})
	}
	return out
}

// writeObject serialises fields as a compact JSON object, copying values verbatim.
func writeObject(fields []field) json.RawMessage {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := encodeJSON(f.key) // a Go string always encodes.
		buf.Write(k)
		buf.WriteByte(':')
		var c bytes.Buffer
		if json.Compact(&c, f.val) == nil {
			buf.Write(c.Bytes())
		} else {
			buf.Write(f.val)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes()
}
