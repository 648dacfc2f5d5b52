package web

// texts are the server-rendered pages' strings. core.js carries its own copy of the few strings it
// needs, so the pages need no inline script.
var texts = map[string]map[string]string{
	"zh": {
		"app.title":         "citegate",
		"login.heading":     "登录 citegate",
		"login.help.pre":    "请输入访问令牌。令牌由管理员运行",
		"login.help.cmd":    "citegate user add 名字",
		"login.help.post":   "生成；本机首次启动时服务器会打印一个可直接打开的登录链接。",
		"login.token":       "访问令牌",
		"login.submit":      "登录",
		"share.badge":       "只读分享",
		"share.created":     "分享创建于",
		"share.download":    "下载对话记录 (JSONL)",
		"share.empty":       "这个对话还没有消息。",
		"share.note":        "此页面是对话在分享时的快照；来源链接指向回答时实际检索到的网页。",
		"role.USER":         "用户",
		"role.ASSISTANT":    "助手",
		"notfound.title":    "页面不存在",
		"notfound.text":     "这个链接不存在或已被撤销。",
		"notfound.home":     "返回首页",
		"index.new":         "新对话",
		"index.sessions":    "对话",
		"index.logout":      "退出",
		"index.share":       "分享",
		"index.send":        "发送",
		"index.cancel":      "停止",
		"index.placeholder": "输入问题，Enter 发送，Shift+Enter 换行",
		"index.empty":       "问一个问题。回答中的每个来源都可以点开核对。",
		"index.noscript":    "桌面版需要启用 JavaScript。分享链接无需 JavaScript 也能阅读。",
		"index.model":       "模型",
		"index.close":       "关闭",
		"index.copy":        "复制",
		"index.revoke":      "撤销分享",
		"index.menu":        "对话列表和账户",
		"index.retryNow":    "立即重试",
	},
	"en": {
		"app.title":         "citegate",
		"login.heading":     "Sign in to citegate",
		"login.help.pre":    "Enter your access token. An administrator creates one with",
		"login.help.cmd":    "citegate user add NAME",
		"login.help.post":   "; on first local start the server prints a ready login link.",
		"login.token":       "Access token",
		"login.submit":      "Sign in",
		"share.badge":       "Read-only share",
		"share.created":     "Shared on",
		"share.download":    "Download conversation (JSONL)",
		"share.empty":       "This conversation has no messages yet.",
		"share.note":        "This page is a snapshot of the conversation when it was shared; source links point to the pages actually retrieved for each answer.",
		"role.USER":         "User",
		"role.ASSISTANT":    "Assistant",
		"notfound.title":    "Page not found",
		"notfound.text":     "This link does not exist or has been revoked.",
		"notfound.home":     "Home",
		"index.new":         "New chat",
		"index.sessions":    "Chats",
		"index.logout":      "Sign out",
		"index.share":       "Share",
		"index.send":        "Send",
		"index.cancel":      "Stop",
		"index.placeholder": "Ask a question. Enter sends, Shift+Enter adds a line",
		"index.empty":       "Ask a question. Every source in the answer can be opened and checked.",
		"index.noscript":    "The desktop view needs JavaScript. Share links are readable without it.",
		"index.model":       "Model",
		"index.close":       "Close",
		"index.copy":        "Copy",
		"index.revoke":      "Revoke share",
		"index.menu":        "Chats and account",
		"index.retryNow":    "Retry now",
	},
}

// translate looks key up in lang's table, falling back to Chinese and then to the key itself so a
// missing string shows up in review instead of breaking the page.
func translate(lang, key string) string {
	if s, ok := texts[lang][key]; ok {
		return s
	}
	if s, ok := texts["zh"][key]; ok {
		return s
	}
	return key
}
