//go:build tools

// Package main pins the modules the packages of this repository use, so that go.mod and go.sum are
// complete before every package imports them. It is never built.
package main

import (
	_ "codeberg.org/readeck/go-readability/v2"
	_ "github.com/blevesearch/bleve/v2"
	_ "github.com/blevesearch/bleve/v2/analysis/lang/cjk"
	_ "github.com/chromedp/cdproto/emulation"
	_ "github.com/chromedp/chromedp"
	_ "github.com/gorilla/websocket"
	_ "github.com/larksuite/oapi-sdk-go/v3"
	_ "github.com/larksuite/oapi-sdk-go/v3/core/httpserverext"
	_ "github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	_ "github.com/larksuite/oapi-sdk-go/v3/service/cardkit/v1"
	_ "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"
	_ "github.com/larksuite/oapi-sdk-go/v3/ws"
	_ "github.com/microcosm-cc/bluemonday"
	_ "github.com/open-dingtalk/dingtalk-stream-sdk-go/chatbot"
	_ "github.com/open-dingtalk/dingtalk-stream-sdk-go/client"
	_ "github.com/open-dingtalk/dingtalk-stream-sdk-go/payload"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/openai/openai-go/v3/option"
	_ "github.com/openai/openai-go/v3/packages/ssestream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/silenceper/wechat/v2"
	_ "github.com/silenceper/wechat/v2/cache"
	_ "github.com/silenceper/wechat/v2/officialaccount/config"
	_ "github.com/silenceper/wechat/v2/officialaccount/message"
	_ "github.com/silenceper/wechat/v2/util"
	_ "github.com/stretchr/testify/require"
	_ "github.com/yuin/goldmark"
	_ "github.com/yuin/goldmark/extension"
	_ "go.etcd.io/bbolt"
	_ "golang.org/x/time/rate"
	_ "gopkg.in/yaml.v3"
)
