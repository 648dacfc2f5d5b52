package feishu

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomText mixes the characters whose JSON escaping differs.
func randomText(r *rand.Rand, n int) string {
	alphabet := []string{"a", "中", "\"", "\\", "\n", "\t", "<", ">", "&", "\u2028", "\x01", "😀", " ", "\xff", "\ufffd"}
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func TestCostMatchesEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		s := randomText(r, r.IntN(200))
		once, err := json.Marshal(s)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, costLen(s, false), len(once)-2, "single %q", s)
		content, err := json.Marshal(map[string]string{"text": s})
		require.NoError(t, err)
		twice, err := json.Marshal(string(content))
		require.NoError(t, err)
		overhead := len(`"{\"text\":\"\"}"`)
		assert.GreaterOrEqual(t, costLen(s, true), len(twice)-overhead, "double %q", s)
	}
}

func TestSplitText(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name string
		text string
	}{
		{"short", "你好"},
		{"plain long", strings.Repeat("一二三四五六七八九十\n", 20000)},
		{"escapes", randomText(r, 120000)},
		{"no breaks", strings.Repeat("x", 400*1024)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts := splitText(tc.text)
			var rebuilt strings.Builder
			for i, p := range parts {
				content, err := json.Marshal(map[string]string{"text": p})
				require.NoError(t, err)
				body, err := json.Marshal(map[string]string{"content": string(content), "msg_type": "text", "uuid": strings.Repeat("u", 36)})
				require.NoError(t, err)
				assert.LessOrEqual(t, len(body), 150*1024, "part %d", i)
				if len(parts) > 1 {
					nl := strings.IndexByte(p, '\n')
					require.Positive(t, nl)
					assert.Contains(t, p[:nl], "part")
					p = p[nl+1:]
				}
				rebuilt.WriteString(p)
			}
			assert.Equal(t, tc.text, rebuilt.String(), "nothing lost")
		})
	}
}

func TestFitCardAndStreamingView(t *testing.T) {
	short := "短回答"
	card, rest := fitCard(short)
	assert.Equal(t, short, card)
	assert.Empty(t, rest)

	long := strings.Repeat("很长的回答，", 10000)
	card, rest = fitCard(long)
	assert.True(t, strings.HasSuffix(card, cardTruncatedNote))
	assert.LessOrEqual(t, jsonLen(card), cardBudget)
	assert.Equal(t, long, strings.TrimSuffix(card, cardTruncatedNote)+rest)

	prev := ""
	for n := 0; n <= len(long); n += 997 {
		k := cutExact(long, n, false) // a rune-aligned prefix
		v := streamingView(long[:k])
		assert.True(t, strings.HasPrefix(v, prev), "views only grow")
		assert.LessOrEqual(t, jsonLen(v), cardBudget)
		prev = v
	}
}

func TestPostText(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"receive form", `{"title":"标题","content":[[{"tag":"text","text":"第一行"}],[{"tag":"a","href":"https://x.y","text":""},{"tag":"code_block","text":"x := 1"}]]}`, "标题\n第一行\nhttps://x.yx := 1"},
		{"language keyed", `{"zh_cn":{"title":"","content":[[{"tag":"text","text":"你好"},{"tag":"at","user_id":"@_user_1"}]]}}`, "你好@_user_1"},
		{"garbage", `[1,2]`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, postText(tc.content))
		})
	}
}

func TestRedact(t *testing.T) {
	in := "connected to wss://x/ws?device_id=d&access_key=SECRET1&service_id=1&ticket=SECRET2"
	out := redact(in)
	assert.NotContains(t, out, "SECRET1")
	assert.NotContains(t, out, "SECRET2")
	assert.Contains(t, out, "device_id=d")
}
