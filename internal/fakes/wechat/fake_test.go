package wechatfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/silenceper/wechat/v2/util"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fake's crypto is written independently of the SDK; these checks keep both in agreement.
func TestCryptoMatchesSDK(t *testing.T) {
	c := &Client{Token: "tok", AppID: "wxapp", EncodingAESKey: NewAESKey()}
	assert.Equal(t, util.Signature("tok", "123", "456", "enc"), Sign("tok", "123", "456", "enc"))

	for _, msg := range []string{"", "<xml>a</xml>", strings.Repeat("长", 100)} {
		enc, err := c.encrypt([]byte(msg))
		require.NoError(t, err)
		_, plain, err := util.DecryptMsg("wxapp", enc, c.EncodingAESKey)
		require.NoError(t, err)
		assert.Equal(t, msg, string(plain))

		sdkEnc, err := util.EncryptMsg([]byte("0123456789abcdef"), []byte(msg), "wxapp", c.EncodingAESKey)
		require.NoError(t, err)
		body := fmt.Sprintf("<xml><Encrypt>%s</Encrypt><MsgSignature>%s</MsgSignature><TimeStamp>9</TimeStamp><Nonce>n</Nonce></xml>",
			cdata(string(sdkEnc)), Sign("tok", "9", "n", string(sdkEnc)))
		got, err := c.decryptReply(body)
		require.NoError(t, err)
		assert.Equal(t, msg, got)
	}
}

func TestServerTokenAndErrors(t *testing.T) {
	s := NewServer("wxapp", "secret")
	defer s.Close()
	get := func(path string) map[string]any {
		resp, err := http.Get(s.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return out
	}
	post := func(path, body string) map[string]any {
		resp, err := http.Post(s.URL+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return out
	}
	assert.EqualValues(t, 40125, get("/cgi-bin/token?grant_type=client_credential&appid=wxapp&secret=nope")["errcode"])
	assert.EqualValues(t, 40013, get("/cgi-bin/token?grant_type=client_credential&appid=other&secret=secret")["errcode"])
	tok := get("/cgi-bin/token?grant_type=client_credential&appid=wxapp&secret=secret")
	assert.EqualValues(t, 7200, tok["expires_in"])
	at := tok["access_token"].(string)

	msg := `{"touser":"u1","msgtype":"text","text":{"content":"hi"}}`
	assert.EqualValues(t, 41001, post(PathSend, msg)["errcode"])
	assert.EqualValues(t, 0, post(PathSend+"?access_token="+at, msg)["errcode"])
	s.InjectError(PathSend, 45015, "window", 1)
	assert.EqualValues(t, 45015, post(PathSend+"?access_token="+at, msg)["errcode"])
	long := fmt.Sprintf(`{"touser":"u1","msgtype":"text","text":{"content":%q}}`, strings.Repeat("x", 2049))
	assert.EqualValues(t, 45002, post(PathSend+"?access_token="+at, long)["errcode"])
	s.ExpireTokens()
	assert.EqualValues(t, 40001, post(PathSend+"?access_token="+at, msg)["errcode"])

	assert.Equal(t, []TextMessage{{ToUser: "u1", Content: "hi"}}, s.Messages())
	assert.Equal(t, 8, len(s.Requests()))
	assert.Equal(t, 1, s.TokenFetches())
}
