package main

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzDecodeYAML: whatever the file holds, decodeYAML never panics, its errors speak of keys and
// lines (never Go types), and what it accepts a strict yaml.v3 decode reads the same way.
func FuzzDecodeYAML(f *testing.F) {
	for _, s := range []string{
		"", "data: ./d\n", "serch: local\n", "max_rounds: 0x10\n", "max_rounds: 99999999999999999999999\n",
		"channels:\n  feishu: {app_id: a, app_secret: b, mode: webhook}\n  sources_footer: yes\n",
		"llm: &x {model: m}\nchannels: *x\n", "a: [1\n", "data: ./d\n- x\n", "---\ndata: a\n---\ndata: b\n",
		"channels:\n", "llm: [1, 2]\n", "chat_rate_per_minute: ~\n", "addr: {x: 1}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Config
		_, err := decodeYAML("f.yaml", b, &c)
		if err != nil {
			msg := err.Error()
			for _, leak := range []string{"main.", "struct {", "unmarshal", "reflect"} {
				if strings.Contains(msg, leak) {
					t.Fatalf("error leaks %q: %s", leak, msg)
				}
			}
			return
		}
		var strict Config
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&strict); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("accepted what yaml.v3 rejects: %v", err)
		}
		if !reflect.DeepEqual(c, strict) {
			t.Fatalf("read differently:\n%+v\n%+v", c, strict)
		}
	})
}
