package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// knownKeys are frame's JSON names.
var knownKeys = []string{"type", "sessionId", "runId", "clientMsgId", "userMessageId", "messageId", "phase", "error", "code", "message"}

// checkScan compares scanFrame with encoding/json on data: whenever encoding/json decodes data
// into a frame (and no key differs from a known one only in case, which encoding/json accepts and
// the server never writes), scanFrame must decode it too, to the same fields. scanFrame must never
// panic.
func checkScan(t *testing.T, data []byte) {
	var got frame
	err := scanFrame(data, &got)
	var want frame
	if json.Unmarshal(data, &want) != nil {
		return
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(data, &keys) != nil {
		return
	}
	for k := range keys {
		for _, known := range knownKeys {
			if k != known && strings.EqualFold(k, known) {
				return
			}
		}
	}
	require.NoError(t, err, "%q", data)
	require.Equal(t, want, got, "%q", data)
}

func TestScanFrame(t *testing.T) {
	for _, data := range []string{
		`{"type":"answer.final","sessionId":"s1","runId":"r1","messageId":42,"content":"答案 [^1^]","html":"<p>答案<sup>1</sup></p>\n"}`,
		`{"type":"run.started","sessionId":"s","runId":"r","userMessageId":7,"model":"extractive"}`,
		`{"type":"run.finished","sessionId":"s","runId":"r","phase":"FAILED","error":"模型服务暂时不可用，请稍后再试。"}`,
		`{"type":"error","code":"rate_limited","message":"slow down \"please\" \u00e9","clientMsgId":"c-1","retryAfterMs":1200}`,
		`{"type":"citations","messageId":3,"citations":[{"n":1,"url":"https://a/b","quote":"x]}\"{"}],"html":"<p>{}</p>"}`,
		` { "type" : "session.created" , "session" : { "id" : "s" , "title" : null , "tags" : [ 1 , 2.5e3 , true , false ] } , "sessionId" : "s" } `,
		`{"type":"x","messageId":null,"sessionId":null}`,
		`{}`,
	} {
		checkScan(t, []byte(data))
	}
	var f frame
	require.NoError(t, scanFrame([]byte(`{"type":"answer.final","runId":"r9","messageId":12,"html":"`+strings.Repeat("<p>x</p>", 1000)+`"}`), &f))
	assert.Equal(t, frame{Type: "answer.final", RunID: "r9", MessageID: 12}, f)
	for _, bad := range []string{``, `[]`, `{"type":}`, `{"type":"a"`, `{"type":"a",}`, `{"messageId":-1}`, `{"messageId":1.5}`, `{"messageId":01}`, `{"a":[1,}`, `{"a":"\`, `{"a":1} x`} {
		assert.Error(t, scanFrame([]byte(bad), &f), "%q", bad)
	}
}

// TestFrameType: the type comes from the prefix the server writes, or from a scan otherwise.
func TestFrameType(t *testing.T) {
	assert.Equal(t, "answer.delta", string(frameType([]byte(`{"type":"answer.delta","text":"x"}`))))
	assert.Equal(t, "run.finished", string(frameType([]byte(`{ "runId":"r", "type":"run.finished"}`))))
	assert.Equal(t, "a\"b", string(frameType([]byte(`{"type":"a\"b"}`))))
	assert.Empty(t, frameType([]byte(`not json`)))
}

// FuzzScanFrame: for any input scanFrame does not panic and agrees with encoding/json; seeds in
// testdata/fuzz/FuzzScanFrame.
func FuzzScanFrame(f *testing.F) {
	f.Add([]byte(`{"type":"answer.final","sessionId":"s1","runId":"r1","messageId":42,"content":"a","html":"<p>a</p>"}`))
	f.Add([]byte(`{"type":"error","code":"c","message":"\ud83d\ude00 \u0000"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScan(t, data)
	})
}
