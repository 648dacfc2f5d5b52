package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// DialogLine is what a model's history window needs of one dialog message (a USER message or an
// ASSISTANT answer): no metadata, no tool calls, no times. ListDialogLinesBefore returns these
// instead of whole messages, so a turn does not decode the citations and excerpts of the answers
// it resends.
type DialogLine struct {
	ID      uint64
	RunID   string
	Role    Role // RoleUser or RoleAssistant
	Content string
	// Interrupted reports a message whose metadata's top-level "interrupted" member is true: the
	// partial text of a run that did not complete, which the agent never resends to a model.
	Interrupted bool
}

// bucketSessionDialog is the dialog projection: for every USER message and ASSISTANT answer, the
// fields of its DialogLine under the same key as its session_messages entry
// ("<sessionID>\x00<big-endian id>"). It is written in the transaction that appends the message,
// updated when MergeMetadata changes "interrupted", deleted with the chat, and built for older
// files when they are opened (schema 3, migrateV3). It costs a second copy of the dialog's text
// (not of tool results or metadata, which are most of a session's bytes).
var bucketSessionDialog = []byte("session_dialog")

// Flags of an encoded dialog line.
const dialogInterrupted byte = 1

// encodeDialogLine encodes m's DialogLine: kind byte, flags byte, uvarint length of the run id,
// the run id, the content.
func encodeDialogLine(m Message) []byte {
	var flags byte
	if metaInterrupted(m.Metadata) {
		flags |= dialogInterrupted
	}
	b := make([]byte, 0, 2+binary.MaxVarintLen64+len(m.RunID)+len(m.Content))
	b = append(b, kindOf(m), flags)
	b = binary.AppendUvarint(b, uint64(len(m.RunID)))
	b = append(b, m.RunID...)
	return append(b, m.Content...)
}

// decodeDialogLine decodes an entry of the dialog projection; id is the message id from its key.
func decodeDialogLine(id uint64, v []byte) (DialogLine, error) {
	if len(v) < 3 {
		return DialogLine{}, errors.New("short dialog line")
	}
	l := DialogLine{ID: id, Interrupted: v[1]&dialogInterrupted != 0}
	switch v[0] {
	case kindUser:
		l.Role = RoleUser
	case kindAnswer:
		l.Role = RoleAssistant
	default:
		return DialogLine{}, fmt.Errorf("dialog line of kind %q", v[0])
	}
	n, k := binary.Uvarint(v[2:])
	if k <= 0 || uint64(len(v)-2-k) < n {
		return DialogLine{}, errors.New("corrupt dialog line")
	}
	rest := v[2+k:]
	l.RunID = string(rest[:n])
	l.Content = string(rest[n:])
	return l, nil
}

// metaInterrupted reports whether stored metadata has a top-level "interrupted" member whose value
// is true (the last one counts when the key repeats, as for encoding/json and jsonb). Most metadata
// never names it, and a byte search settles those without parsing.
func metaInterrupted(meta json.RawMessage) bool {
	if !bytes.Contains(meta, []byte(`"interrupted"`)) {
		return false
	}
	fields, err := parseObject(meta)
	if err != nil {
		return false
	}
	v := false
	for _, f := range fields {
		if f.key == "interrupted" {
			v = bytes.Equal(bytes.TrimSpace(f.val), []byte("true"))
		}
	}
	return v
}

// ListDialogLinesBefore is ListDialogBefore reduced to DialogLines: the same messages (USER
// messages and ASSISTANT answers with ids below beforeID, 0: no bound, the newest limit of them,
// in ascending id order), read from the dialog projection without decoding any message record.
// limit ≤ 0 is ErrInvalid; an unknown session is ErrNotFound.
func (s *Store) ListDialogLinesBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]DialogLine, error) {
	const op = "list dialog lines before"
	if limit <= 0 {
		return nil, fmt.Errorf("store: %s: %w: limit must be positive", op, ErrInvalid)
	}
	out := []DialogLine{}
	err := s.view(ctx, op, func(tx *bolt.Tx) error {
		return walkBack(tx, bucketSessionDialog, sessionID, beforeID, "dialog", func(suffix, v []byte) (bool, error) {
			id := binary.BigEndian.Uint64(suffix)
			l, err := decodeDialogLine(id, v)
			if err != nil {
				return false, fmt.Errorf("message %d: %w", id, err)
			}
			out = append(out, l)
			return len(out) < limit, nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// migrateV3 builds the dialog projection of a file written before schema 3: one entry for every
// indexed USER message and ASSISTANT answer. It reads each such message once inside Open's
// transaction, so a failure leaves the file at its old version. An index entry without a kind (a
// schema-1 leftover migrateV2 could not classify) is decoded to find out.
func migrateV3(tx *bolt.Tx) error {
	msgs := tx.Bucket(bucketMessages)
	dialog := tx.Bucket(bucketSessionDialog)
	c := tx.Bucket(bucketSessionMessages).Cursor()
	type entry struct{ key, val []byte }
	var lines []entry
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(v) == 1 && v[0] != kindUser && v[0] != kindAnswer {
			continue
		}
		i := bytes.IndexByte(k, 0)
		if i < 0 || len(k)-i-1 != 8 {
			continue // a corrupt key stays as it is; the readers report it
		}
		var m Message
		raw := msgs.Get(k[i+1:])
		if raw == nil || json.Unmarshal(raw, &m) != nil {
			continue
		}
		if kind := kindOf(m); kind != kindUser && kind != kindAnswer {
			continue
		}
		lines = append(lines, entry{bytes.Clone(k), encodeDialogLine(m)})
	}
	for _, e := range lines {
		if err := dialog.Put(e.key, e.val); err != nil {
			return fmt.Errorf("dialog line: %w", err)
		}
	}
	return nil
}

// syncDialogLocked rewrites the dialog projection entry of m (already stored) after its metadata
// changed; messages outside the dialog have none.
func syncDialogLocked(tx *bolt.Tx, m Message) error {
	if k := kindOf(m); k != kindUser && k != kindAnswer {
		return nil
	}
	key := prefixKey(m.SessionID, u64(m.ID))
	if tx.Bucket(bucketSessionMessages).Get(key) == nil {
		return nil // not indexed in its session: not part of its dialog either
	}
	if err := tx.Bucket(bucketSessionDialog).Put(key, encodeDialogLine(m)); err != nil {
		return fmt.Errorf("dialog line of message %d: %w", m.ID, err)
	}
	return nil
}
