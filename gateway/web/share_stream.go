package web

import (
	"bufio"
	"fmt"
	"io"
)

// shareMsg is what the share.msg template places: one message and the page language.
type shareMsg struct {
	Lang string
	M    MessageView
}

// ShareStream writes a share page in parts, so that a conversation of any length is sent a page of
// messages at a time instead of being held whole: StartShare writes everything above the messages,
// Message one message, End the empty-conversation notice when nothing was written and everything
// below. Output is buffered (a template error mid-page cannot be taken back anyway, since earlier
// parts are already sent); Flush hands what is buffered to the writer.
type ShareStream struct {
	w    *bufio.Writer
	lang string
	n    int
}

// StartShare writes the head of the share page described by d (d.Messages is ignored).
func StartShare(w io.Writer, d ShareData) (*ShareStream, error) {
	if initErr != nil {
		return nil, initErr
	}
	d.Lang = normLang(d.Lang)
	d.Messages = nil
	s := &ShareStream{w: bufio.NewWriterSize(w, 32<<10), lang: d.Lang}
	if err := s.exec("share.head", d); err != nil {
		return nil, err
	}
	return s, nil
}

// Message writes one message.
func (s *ShareStream) Message(m MessageView) error {
	s.n++
	return s.exec("share.msg", shareMsg{Lang: s.lang, M: m})
}

// Count is how many messages were written.
func (s *ShareStream) Count() int { return s.n }

// Flush sends what is buffered.
func (s *ShareStream) Flush() error { return s.w.Flush() }

// End writes the rest of the page and flushes it.
func (s *ShareStream) End() error {
	if s.n == 0 {
		if err := s.exec("share.empty", struct{ Lang string }{s.lang}); err != nil {
			return err
		}
	}
	if err := s.exec("share.foot", struct{ Lang string }{s.lang}); err != nil {
		return err
	}
	return s.w.Flush()
}

func (s *ShareStream) exec(name string, data any) error {
	if err := tmpl.ExecuteTemplate(s.w, name, data); err != nil {
		return fmt.Errorf("web: render %s: %w", name, err)
	}
	return nil
}
