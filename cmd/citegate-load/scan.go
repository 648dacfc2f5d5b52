package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// scanFrame fills f with the fields the load generator reads (type, ids, phase, error texts) from
// one server frame, a JSON object, without decoding the rest: answer.final, citations and
// answer.html carry the answer and its HTML, kilobytes the generator has no use for, and decoding
// them with encoding/json was most of its CPU. Skipped values are only scanned for their end
// (strings for their closing quote, objects and arrays for their closing bracket). Keys match
// exactly, as the server writes them. A malformed frame is an error, never a panic.
func scanFrame(data []byte, f *frame) error {
	s := scanner{b: data}
	s.ws()
	if !s.eat('{') {
		return errNotObject
	}
	s.ws()
	if s.eat('}') {
		return s.end()
	}
	for {
		s.ws()
		key, err := s.rawString()
		if err != nil {
			return err
		}
		s.ws()
		if !s.eat(':') {
			return errSyntax
		}
		s.ws()
		if err := s.field(key, f); err != nil {
			return err
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			return s.end()
		}
		return errSyntax
	}
}

var (
	errNotObject = errors.New("frame is not a JSON object")
	errSyntax    = errors.New("malformed JSON frame")
)

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end accepts only trailing whitespace after the object.
func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return errSyntax
	}
	return nil
}

// field reads the value of key into f when f has such a field, and skips it otherwise.
func (s *scanner) field(key []byte, f *frame) error {
	var str *string
	var num *uint64
	switch string(key) { // no allocation: the compiler compares in place
	case "type":
		str = &f.Type
	case "sessionId":
		str = &f.SessionID
	case "runId":
		str = &f.RunID
	case "clientMsgId":
		str = &f.ClientMsgID
	case "phase":
		str = &f.Phase
	case "error":
		str = &f.Error
	case "code":
		str = &f.Code
	case "message":
		str = &f.Message
	case "userMessageId":
		num = &f.UserMessageID
	case "messageId":
		num = &f.MessageID
	default:
		return s.skip(0)
	}
	if s.literal("null") {
		// encoding/json leaves a field alone for null; so does this.
		return nil
	}
	if str != nil {
		start := s.i
		raw, err := s.rawString()
		if err != nil {
			return err
		}
		if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
			*str = string(raw)
			return nil
		}
		// Escapes or invalid UTF-8 (which encoding/json replaces): rare, let encoding/json say.
		return json.Unmarshal(s.b[start:s.i], str)
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == start || (s.b[start] == '0' && s.i-start > 1) || s.i < len(s.b) && bytes.IndexByte([]byte(".eE-+"), s.b[s.i]) >= 0 {
		return errSyntax // not an unsigned integer (json.Unmarshal refuses these for a uint64 too)
	}
	v, err := strconv.ParseUint(string(s.b[start:s.i]), 10, 64)
	if err != nil {
		return errSyntax
	}
	*num = v
	return nil
}

// literal consumes lit when it is next.
func (s *scanner) literal(lit string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		s.i += len(lit)
		return true
	}
	return false
}

// rawString consumes a JSON string and returns its content between the quotes, escapes kept.
func (s *scanner) rawString() ([]byte, error) {
	if !s.eat('"') {
		return nil, errSyntax
	}
	start := s.i
	for {
		j := bytes.IndexAny(s.b[s.i:], "\"\\")
		if j < 0 {
			return nil, errSyntax
		}
		s.i += j
		if s.b[s.i] == '"' {
			raw := s.b[start:s.i]
			s.i++
			for _, c := range raw {
				if c < 0x20 {
					return nil, errSyntax // control characters must be escaped
				}
			}
			return raw, nil
		}
		s.i += 2 // a backslash and the character it escapes
		if s.i > len(s.b) {
			return nil, errSyntax
		}
	}
}

// maxDepth bounds the nesting of a skipped value.
const maxDepth = 512

// skip consumes one JSON value of any kind.
func (s *scanner) skip(depth int) error {
	if depth > maxDepth || s.i >= len(s.b) {
		return errSyntax
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, err := s.rawString()
		return err
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		s.ws()
		if s.eat(closer) {
			return nil
		}
		for {
			s.ws()
			if c == '{' {
				if _, err := s.rawString(); err != nil {
					return err
				}
				s.ws()
				if !s.eat(':') {
					return errSyntax
				}
				s.ws()
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			s.ws()
			if s.eat(',') {
				continue
			}
			if s.eat(closer) {
				return nil
			}
			return errSyntax
		}
	case s.literal("true"), s.literal("false"), s.literal("null"):
		return nil
	case c == '-' || c >= '0' && c <= '9':
		start := s.i
		for s.i < len(s.b) && bytes.IndexByte([]byte("+-.eE0123456789"), s.b[s.i]) >= 0 {
			s.i++
		}
		if !json.Valid(s.b[start:s.i]) {
			return errSyntax
		}
		return nil
	}
	return errSyntax
}
