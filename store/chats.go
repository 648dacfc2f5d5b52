package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// DeleteChat deletes one of userID's sessions (a chat) with everything that hangs off it: its
// messages, its runs and their indexes, the share links to it (which then open nothing) and any
// chat-platform conversation still bound to it. It is one transaction, so a reader sees the chat
// whole or not at all. It returns how many share links it revoked. A session that does not exist
// or is not userID's is ErrNotFound (callers cannot probe other users' chats).
//
// The cost is linear in the chat's messages and runs, in userID's share links and in the number of
// conversation bindings (a map with no reverse index; deletions are rare and bindings few).
func (s *Store) DeleteChat(ctx context.Context, sessionID, userID string) (int, error) {
	revoked := 0
	err := s.update(ctx, "delete chat", func(tx *bolt.Tx) error {
		revoked = 0
		sessions := tx.Bucket(bucketSessions)
		var sess Session
		if err := getJSON(sessions, []byte(sessionID), "session", &sess); err != nil {
			return err
		}
		if sess.UserID != userID {
			return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
		}
		// Keys are collected first and deleted afterwards: deleting under a bbolt cursor skips keys.
		var msgKeys, runKeys, runMsgKeys [][]byte
		var runIDs []string
		if err := scanPrefix(tx.Bucket(bucketSessionMessages), sessionID, func(suffix, _ []byte) error {
			msgKeys = append(msgKeys, bytes.Clone(suffix))
			return nil
		}); err != nil {
			return err
		}
		if err := scanPrefix(tx.Bucket(bucketSessionRuns), sessionID, func(seq, runID []byte) error {
			runKeys = append(runKeys, bytes.Clone(seq))
			runIDs = append(runIDs, string(runID))
			return nil
		}); err != nil {
			return err
		}
		for _, id := range runIDs {
			if err := scanPrefix(tx.Bucket(bucketRunMessages), id, func(suffix, _ []byte) error {
				runMsgKeys = append(runMsgKeys, prefixKey(id, suffix))
				return nil
			}); err != nil {
				return err
			}
		}
		msgs, sessIdx, dialog := tx.Bucket(bucketMessages), tx.Bucket(bucketSessionMessages), tx.Bucket(bucketSessionDialog)
		for _, k := range msgKeys {
			if err := msgs.Delete(k); err != nil {
				return fmt.Errorf("delete message: %w", err)
			}
			if err := sessIdx.Delete(prefixKey(sessionID, k)); err != nil {
				return fmt.Errorf("delete message index: %w", err)
			}
			if err := dialog.Delete(prefixKey(sessionID, k)); err != nil {
				return fmt.Errorf("delete dialog line: %w", err)
			}
		}
		runMsgs := tx.Bucket(bucketRunMessages)
		for _, k := range runMsgKeys {
			if err := runMsgs.Delete(k); err != nil {
				return fmt.Errorf("delete run message index: %w", err)
			}
		}
		runs, running, sessRuns := tx.Bucket(bucketRuns), tx.Bucket(bucketRunning), tx.Bucket(bucketSessionRuns)
		for i, id := range runIDs {
			if err := runs.Delete([]byte(id)); err != nil {
				return fmt.Errorf("delete run: %w", err)
			}
			if err := running.Delete([]byte(id)); err != nil {
				return fmt.Errorf("delete run: %w", err)
			}
			if err := sessRuns.Delete(prefixKey(sessionID, runKeys[i])); err != nil {
				return fmt.Errorf("delete run index: %w", err)
			}
		}
		n, err := revokeSessionSharesLocked(tx, sessionID, userID)
		if err != nil {
			return err
		}
		revoked = n
		if err := unbindConversationsLocked(tx, sessionID); err != nil {
			return err
		}
		if err := tx.Bucket(bucketUserSessions).Delete(prefixKey(userID, []byte(sessionID))); err != nil {
			return fmt.Errorf("delete session index: %w", err)
		}
		return sessions.Delete([]byte(sessionID))
	})
	if err != nil {
		return 0, err
	}
	return revoked, nil
}

// revokeSessionSharesLocked deletes ownerID's shares of sessionID. Only a session's owner can share
// it, so the owner's index finds them all.
func revokeSessionSharesLocked(tx *bolt.Tx, sessionID, ownerID string) (int, error) {
	shares, idx := tx.Bucket(bucketShares), tx.Bucket(bucketUserShares)
	var hashes [][]byte
	err := scanPrefix(idx, ownerID, func(hash, _ []byte) error {
		var sh Share
		if err := getJSON(shares, hash, "share", &sh); err != nil {
			return fmt.Errorf("share: %w", unwrapNotFound(err))
		}
		if sh.SessionID == sessionID {
			hashes = append(hashes, bytes.Clone(hash))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, h := range hashes {
		if err := shares.Delete(h); err != nil {
			return 0, fmt.Errorf("revoke share: %w", err)
		}
		if err := idx.Delete(prefixKey(ownerID, h)); err != nil {
			return 0, fmt.Errorf("revoke share: %w", err)
		}
	}
	return len(hashes), nil
}

// unbindConversationsLocked removes every conversation binding that points at sessionID, so the
// chat platform's next message starts a fresh session instead of failing on a deleted one.
func unbindConversationsLocked(tx *bolt.Tx, sessionID string) error {
	b := tx.Bucket(bucketConversations)
	var keys [][]byte
	if err := b.ForEach(func(k, v []byte) error {
		if string(v) == sessionID {
			keys = append(keys, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("scan conversations: %w", err)
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("unbind conversation: %w", err)
		}
	}
	return nil
}

// Search bounds. A search reads at most SearchOptions.MaxScan message index entries, so its cost
// does not grow with the size of a user's history past that budget; the answer says when the
// budget ran out (SearchResult.Truncated) so the caller can tell the user the list may be partial.
const (
	DefaultSearchLimit   = 20
	MaxSearchLimit       = 100
	DefaultSearchMaxScan = 20_000
	// MaxSearchQueryBytes bounds a query; longer ones are ErrInvalid.
	MaxSearchQueryBytes = 256
	// searchMessagesPerHit bounds the matching messages returned per session.
	searchMessagesPerHit = 3
)

// SearchOptions bounds a search. Zero values take the defaults.
type SearchOptions struct {
	Limit   int // sessions returned (default DefaultSearchLimit, at most MaxSearchLimit)
	MaxScan int // message index entries read at most (default DefaultSearchMaxScan)
}

func (o SearchOptions) norm() SearchOptions {
	if o.Limit <= 0 {
		o.Limit = DefaultSearchLimit
	}
	o.Limit = min(o.Limit, MaxSearchLimit)
	if o.MaxScan <= 0 {
		o.MaxScan = DefaultSearchMaxScan
	}
	return o
}

// SearchHit is one session that matches: by its title, by some of its messages, or both.
type SearchHit struct {
	Session    Session
	TitleMatch bool
	// Messages are the session's matching USER messages and answers (ASSISTANT messages without
	// tool calls), newest first, at most three. Tool traffic is never searched.
	Messages []Message
}

// SearchResult is a search's answer.
type SearchResult struct {
	Hits []SearchHit
	// Truncated is true when the scan stopped before it had read every candidate: Limit sessions
	// were found, or MaxScan was spent.
	Truncated bool
}

// SearchTerms splits a query into the lower-case terms MatchTerms looks for: the query's
// whitespace-separated words. Chinese text has no spaces, so a Chinese query is one term matched
// as a substring, which is what a reader expects.
func SearchTerms(query string) []string {
	return strings.Fields(strings.ToLower(query))
}

// MatchTerms reports whether text contains every term (terms from SearchTerms), ignoring case.
// Both backends and the gateway use it, so they agree on what matches.
func MatchTerms(text string, terms []string) bool {
	if len(terms) == 0 {
		return false
	}
	lower := strings.ToLower(text)
	for _, t := range terms {
		if !strings.Contains(lower, t) {
			return false
		}
	}
	return true
}

// searchPrefilter turns mayMatch on; the benchmark turns it off for its baseline.
var searchPrefilter = true

// mayMatch reports whether every term may occur in a stored message record, reading its raw
// JSON without decoding it. It never says no when MatchTerms could say yes for the decoded
// content, so a false answer lets a search skip the record: a term it cannot judge from the raw
// bytes (one with a rune that has case outside ASCII, or one JSON escapes) counts as present.
// Stored records are written by encodeJSON, which escapes only the quote, the backslash, control
// characters and U+2028/U+2029, so every other rune of the content appears in the record as its
// UTF-8 bytes.
func mayMatch(raw []byte, terms []string) bool {
	for _, t := range terms {
		if !rawJudgeable(t) {
			continue
		}
		if hasASCIILetter(t) && (bytes.Contains(raw, []byte("\u0130")) || bytes.Contains(raw, []byte("\u212a"))) {
			continue // İ and the Kelvin sign lower-case into ASCII letters
		}
		if !containsFoldASCII(raw, t) {
			return false
		}
	}
	return true
}

// rawJudgeable reports whether a (lower-case) term can be looked for in raw record bytes: every
// rune is ASCII other than the quote, the backslash and control characters, or a non-ASCII rune
// without case that JSON does not escape.
func rawJudgeable(t string) bool {
	for _, r := range t {
		switch {
		case r == '"' || r == '\\' || r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029:
			return false
		case r == utf8.RuneError:
			return false // invalid UTF-8 in content is stored as the escape \ufffd
		case r >= 0x80 && unicode.SimpleFold(r) != r:
			return false
		}
	}
	return true
}

func hasASCIILetter(t string) bool {
	for i := 0; i < len(t); i++ {
		if c := t[i]; c >= 'a' && c <= 'z' {
			return true
		}
	}
	return false
}

// containsFoldASCII reports whether raw contains t with ASCII letters compared without case (t is
// lower case) and every other byte exactly.
func containsFoldASCII(raw []byte, t string) bool {
	if len(t) == 0 {
		return true
	}
	first := t[0]
	upper := first
	if first >= 'a' && first <= 'z' {
		upper = first - 'a' + 'A'
	}
	for i := 0; i+len(t) <= len(raw); i++ {
		if c := raw[i]; c != first && c != upper {
			// Jump to the next byte that can start the term.
			j := bytes.IndexByte(raw[i+1:], first)
			if upper != first {
				if k := bytes.IndexByte(raw[i+1:], upper); k >= 0 && (j < 0 || k < j) {
					j = k
				}
			}
			if j < 0 {
				return false
			}
			i += j // the loop's i++ lands on the candidate
			continue
		}
		if equalFoldASCII(raw[i:i+len(t)], t) {
			return true
		}
	}
	return false
}

func equalFoldASCII(b []byte, t string) bool {
	for i := 0; i < len(t); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != t[i] {
			return false
		}
	}
	return true
}

// checkQuery validates a search query and returns its terms.
func checkQuery(query string) ([]string, error) {
	if len(query) > MaxSearchQueryBytes {
		return nil, fmt.Errorf("%w: search query longer than %d bytes", ErrInvalid, MaxSearchQueryBytes)
	}
	if !utf8.ValidString(query) {
		return nil, fmt.Errorf("%w: search query is not valid UTF-8", ErrInvalid)
	}
	terms := SearchTerms(query)
	if len(terms) == 0 {
		return nil, fmt.Errorf("%w: empty search query", ErrInvalid)
	}
	return terms, nil
}

// SearchSessions finds userID's sessions whose title or whose USER messages and answers contain
// every term of query (SearchTerms, MatchTerms). Sessions are visited most recently updated first
// and messages newest first, so the budget is spent on what a user most likely looks for. Message
// kinds are read from the index, so tool traffic costs an index step but is never decoded.
func (s *Store) SearchSessions(ctx context.Context, userID, query string, opt SearchOptions) (SearchResult, error) {
	terms, err := checkQuery(query)
	if err != nil {
		return SearchResult{}, fmt.Errorf("store: search sessions: %w", err)
	}
	opt = opt.norm()
	res := SearchResult{Hits: []SearchHit{}}
	err = s.view(ctx, "search sessions", func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bucketSessions)
		var list []Session
		if err := scanPrefix(tx.Bucket(bucketUserSessions), userID, func(id, _ []byte) error {
			var sess Session
			if err := getJSON(sessions, id, "session", &sess); err != nil {
				return err
			}
			list = append(list, sess)
			return nil
		}); err != nil {
			return err
		}
		sortSessions(list)
		mc := tx.Bucket(bucketMessages).Cursor()
		c := tx.Bucket(bucketSessionMessages).Cursor()
		budget := opt.MaxScan
		for i, sess := range list {
			if len(res.Hits) >= opt.Limit || budget <= 0 {
				res.Truncated = true
				return nil
			}
			if i%64 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			hit := SearchHit{Session: sess, TitleMatch: MatchTerms(sess.Title, terms)}
			p := prefixKey(sess.ID, nil)
			k, v := c.Seek(append([]byte(sess.ID), 1))
			if k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
			for ; k != nil && bytes.HasPrefix(k, p) && len(hit.Messages) < searchMessagesPerHit; k, v = c.Prev() {
				if budget <= 0 {
					res.Truncated = true
					break
				}
				budget--
				if len(v) == 1 && v[0] != kindUser && v[0] != kindAnswer {
					continue
				}
				// One cursor over the messages serves every look-up: a Get per entry would allocate
				// a cursor of its own each time.
				id := k[len(p):]
				mk, raw := mc.Seek(id)
				if !bytes.Equal(mk, id) {
					return fmt.Errorf("message %x listed in session %q: %w", id, sess.ID, ErrNotFound)
				}
				if searchPrefilter && !mayMatch(raw, terms) {
					continue // no term is anywhere in the record: nothing to decode
				}
				var m Message
				if err := json.Unmarshal(raw, &m); err != nil {
					return fmt.Errorf("decode message %x: %w", id, err)
				}
				if k := kindOf(m); k != kindUser && k != kindAnswer {
					continue
				}
				if MatchTerms(m.Content, terms) {
					hit.Messages = append(hit.Messages, m)
				}
			}
			if hit.TitleMatch || len(hit.Messages) > 0 {
				res.Hits = append(res.Hits, hit)
			}
		}
		return nil
	})
	if err != nil {
		return SearchResult{}, err
	}
	return res, nil
}

// sortSessions orders sessions as ListSessions returns them: most recently updated first.
func sortSessions(list []Session) {
	slices.SortStableFunc(list, func(a, b Session) int {
		if c := b.UpdatedAt.Compare(a.UpdatedAt); c != 0 {
			return c
		}
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}
