package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonCheckSeeds are tool arguments and results, well- and ill-formed.
var jsonCheckSeeds = []string{
	`{}`, `{"query":"x"}`, `{"error":"boom"}`, `{"error":null}`, `{"Error":"x"}`, `{"ERROR":1}`,
	`{"\u0065rror":"escaped e"}`, `{"err\u006fr":1}`, `{"e\u0072ror":1}`, `{"err\u006Fr":1}`, `{"\\u0065rror":1}`,
	`{"results":[{"error":"nested"}]}`, `{"a":"\"error\""}`, `{"a":"x\"error"}`, `{"error":1,"error":2}`,
	`{"error":"x"`, `{"error":"x"} trailing`, `[{"error":"x"}]`, `"error"`, `null`, `nul`, ``, ` `, `{"a":1}x`,
	`{"query":"电子发票","results":[{"title":"t","url":"https://a.example/?a=1\u0026b=2","content":"R\u0026D"}],"total_results":1}`,
	"{\"error\":\"\xff\"}", `{"a":{"error":1}}`, `{"a":1,"error":[]}`, `{ "error" : 0 }`,
}

// mapDecodes is what callTool used to ask of its arguments: do they decode into a non-nil map?
func mapDecodes(s string) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &obj) == nil && obj != nil
}

// TestHasErrorKeyMatchesDecoding: the substring shortcut answers as decoding the result does.
func TestHasErrorKeyMatchesDecoding(t *testing.T) {
	for _, s := range jsonCheckSeeds {
		if got, want := hasErrorKey(s), decodedHasErrorKey(s); got != want {
			t.Errorf("hasErrorKey(%q) = %v, decoding says %v", s, got, want)
		}
	}
	for _, s := range []string{`{"error":"boom"}`, `{"\u0065rror":"escaped e"}`, `{"err\u006Fr":1}`, `{"error":null}`} {
		if !hasErrorKey(s) {
			t.Errorf("hasErrorKey(%q) = false", s)
		}
	}
	for _, s := range []string{`{"Error":"x"}`, `{"results":[{"error":"nested"}]}`, `{"a":"\"error\""}`, `[{"error":"x"}]`, `{"error":"x"`} {
		if hasErrorKey(s) {
			t.Errorf("hasErrorKey(%q) = true", s)
		}
	}
}

// TestIsJSONObjectMatchesDecoding: the arguments check accepts what decoding into a map accepts.
func TestIsJSONObjectMatchesDecoding(t *testing.T) {
	for _, s := range jsonCheckSeeds {
		s = strings.TrimSpace(s)
		if got, want := isJSONObject([]byte(s)), mapDecodes(s); got != want {
			t.Errorf("isJSONObject(%q) = %v, decoding says %v", s, got, want)
		}
	}
}

func FuzzHasErrorKey(f *testing.F) {
	for _, s := range jsonCheckSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := hasErrorKey(s), decodedHasErrorKey(s); got != want {
			t.Fatalf("hasErrorKey(%q) = %v, decoding says %v", s, got, want)
		}
		if ts := strings.TrimSpace(s); ts != "" {
			if got, want := isJSONObject([]byte(ts)), mapDecodes(ts); got != want {
				t.Fatalf("isJSONObject(%q) = %v, decoding says %v", ts, got, want)
			}
		}
	})
}
