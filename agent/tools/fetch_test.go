package tools

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/citegate/citegate/citations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
	"golang.org/x/text/encoding/charmap"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// allowLoopback is what tests need to reach their own httptest servers on 127.0.0.1.
var allowLoopback = []string{"127.0.0.1"}

func newFetcher(t *testing.T, opt FetchOptions, c *Corpus) *Fetcher {
	t.Helper()
	f, err := NewFetcher(opt, c)
	require.NoError(t, err)
	return f
}

func serve(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestPublicAddr(t *testing.T) {
	tests := []struct {
		ip   string
		want bool
	}{
		{"93.184.216.34", true},
		{"2606:4700::6810:85e5", true},
		{"8.8.8.8", true},
		{"127.0.0.1", false},
		{"127.1.2.3", false},
		{"::1", false},
		{"::ffff:127.0.0.1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"169.254.1.1", false},
		{"100.64.0.1", false},
		{"100.100.100.200", false},
		{"0.0.0.0", false},
		{"::", false},
		{"224.0.0.1", false},
		{"ff02::1", false},
		{"fc00::1", false},
		{"fd00:ec2::254", false},
		{"fe80::1", false},
		{"255.255.255.255", false},
		{"198.18.0.1", false},
		{"64:ff9b::7f00:1", false},  // NAT64 of 127.0.0.1
		{"64:ff9b::808:808", true},  // NAT64 of 8.8.8.8
		{"2002:7f00:1::", false},    // 6to4 of 127.0.0.1
		{"2002:0808:0808::1", true}, // 6to4 of 8.8.8.8

		// IPv4-compatible ::a.b.c.d (RFC 4291 §2.5.5.1, deprecated): refused whatever it embeds.
		{"::127.0.0.1", false},
		{"::10.0.0.1", false},
		{"::169.254.169.254", false},
		{"::8.8.8.8", false},
		// IPv4-mapped ::ffff:a.b.c.d (::ffff:0:0/96): the IPv4 address itself.
		{"::ffff:10.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:8.8.8.8", true},
		// SIIT IPv4-translated ::ffff:0:a.b.c.d (RFC 2765): judged by the embedded address.
		{"::ffff:0:127.0.0.1", false},
		{"::ffff:0:10.1.2.3", false},
		{"::ffff:0:169.254.169.254", false},
		{"::ffff:0:8.8.8.8", true},
		// NAT64 well-known prefix (RFC 6052) with private, metadata and CGNAT IPv4 inside.
		{"64:ff9b::10.0.0.1", false},
		{"64:ff9b::192.168.0.1", false},
		{"64:ff9b::169.254.169.254", false},
		{"64:ff9b::100.100.100.200", false},
		{"64:ff9b::1.1.1.1", true},
		// Local-use NAT64 (RFC 8215): refused whatever it embeds.
		{"64:ff9b:1::8.8.8.8", false},
		{"64:ff9b:1:7f00:0:100::", false}, // 127.0.0.1 in the /48 format of RFC 6052 §2.2
		{"64:ff9b:1:ffff::1", false},
		// Teredo (RFC 4380): server 65.54.227.120 public; client is the last 32 bits inverted.
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", true},  // client 8.8.8.8
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", false}, // client 127.0.0.1
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", false}, // client 10.0.0.1
		{"2001:0:4136:e378:8000:63bf:5601:5601", false}, // client 169.254.169.254 (metadata)
		{"2001:0:a00:1:8000:63bf:f7f7:f7f7", false},     // server 10.0.0.1
		{"2001:0:7f00:1:0:0:f7f7:f7f7", false},          // server 127.0.0.1
		// Other IETF special-purpose IPv6 ranges that are not globally reachable.
		{"2001:2::1", false},      // benchmarking, RFC 5180
		{"2001:10::1", false},     // ORCHID, RFC 4843
		{"2001:20::1", false},     // ORCHIDv2, RFC 7343
		{"3fff::1", false},        // documentation, RFC 9637
		{"5f00::1", false},        // SRv6 SIDs, RFC 9602
		{"192.88.99.1", false},    // 6to4 relay anycast, RFC 7526
		{"2001:4860::8888", true}, // ordinary global unicast right after 2001::/23
		// ISATAP interface identifiers (RFC 5214) embed the tunnel's IPv4 endpoint.
		{"2606:4700::5efe:10.0.0.1", false},
		{"2606:4700::200:5efe:192.168.1.1", false},
		{"2606:4700::200:5efe:8.8.8.8", true},
	}
	for _, tc := range tests {
		t.Run(tc.ip, func(t *testing.T) {
			assert.Equal(t, tc.want, publicAddr(netip.MustParseAddr(tc.ip)))
		})
	}
}

func TestNewFetcherAllowEntries(t *testing.T) {
	for _, ok := range [][]string{nil, {"127.0.0.1"}, {"10.0.0.0/8", "fd00::/8"}, {"intranet.example.com", "Docs.Example.COM."}, {" ::1 ", ""}} {
		_, err := NewFetcher(FetchOptions{Allow: ok}, nil)
		assert.NoError(t, err, "%v", ok)
	}
	for _, bad := range []string{"10.0.0.0/33", "not a host!", "http://example.com", "1.2.3.4/x", "-bad.example"} {
		_, err := NewFetcher(FetchOptions{Allow: []string{bad}}, nil)
		assert.Error(t, err, bad)
	}
}

func TestFetchGuard(t *testing.T) {
	hits := 0
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		hits++
		switch r.URL.Path {
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/to-private":
			http.Redirect(w, r, "http://10.0.0.1/admin", http.StatusFound)
		case "/to-ipv6-loopback":
			http.Redirect(w, r, "http://[::1]:"+r.Host[strings.LastIndex(r.Host, ":")+1:]+"/", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, "secret internal page")
		}
	})
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]

	guarded := newFetcher(t, FetchOptions{Timeout: 3 * time.Second}, nil)
	allowed := newFetcher(t, FetchOptions{Timeout: 3 * time.Second, Allow: allowLoopback}, nil)
	byName := newFetcher(t, FetchOptions{Timeout: 3 * time.Second, Allow: []string{"localhost"}}, nil)
	byCIDR := newFetcher(t, FetchOptions{Timeout: 3 * time.Second, Allow: []string{"127.0.0.0/8"}}, nil)

	tests := []struct {
		name string
		f    *Fetcher
		url  string
		ok   bool
	}{
		{"127.0.0.1 refused", guarded, srv.URL + "/", false},
		{"localhost refused", guarded, "http://localhost:" + port + "/", false},
		{"0.0.0.0 refused", guarded, "http://0.0.0.0:" + port + "/", false},
		{"IPv4-mapped IPv6 refused", guarded, "http://[::ffff:127.0.0.1]:" + port + "/", false},
		{"allowed server redirecting to metadata", allowed, srv.URL + "/to-metadata", false},
		{"allowed server redirecting to a private address", allowed, srv.URL + "/to-private", false},
		{"allowed server redirecting to ::1", allowed, srv.URL + "/to-ipv6-loopback", false},
		{"allowed by IP", allowed, srv.URL + "/", true},
		{"allowed by CIDR", byCIDR, srv.URL + "/", true},
		{"allowed by host name", byName, "http://localhost:" + port + "/", true},
		{"IP allowance does not open other loopback IPs", allowed, "http://127.0.0.2:" + port + "/", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.f.Fetch(context.Background(), tc.url)
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, "secret internal page", p.Content)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrForbiddenAddress)
			assert.Contains(t, err.Error(), "refusing to connect")
		})
	}
	assert.Equal(t, 6, hits, "refused connections never reach the server")
}

func TestFetchURLChecks(t *testing.T) {
	f := newFetcher(t, FetchOptions{}, nil)
	for _, u := range []string{"file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "/relative", "", "http://"} {
		_, err := f.Fetch(context.Background(), u)
		require.Error(t, err, u)
		assert.ErrorIs(t, err, ErrUnsupportedURL, u)
	}
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	_, err := newFetcher(t, FetchOptions{Allow: allowLoopback}, nil).Fetch(context.Background(), srv.URL)
	assert.ErrorIs(t, err, ErrUnsupportedURL)
}

func TestFetchRedirectLimit(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if n > 0 {
			http.Redirect(w, r, "/r/"+strconv.Itoa(n-1), http.StatusFound)
			return
		}
		fmt.Fprint(w, "landed")
	})
	f := newFetcher(t, FetchOptions{MaxRedirects: 2, Allow: allowLoopback}, nil)
	p, err := f.Fetch(context.Background(), srv.URL+"/r/2")
	require.NoError(t, err)
	assert.Equal(t, "landed", p.Content)
	assert.Equal(t, srv.URL+"/r/2", p.URL, "the page keeps the URL asked for")

	_, err = f.Fetch(context.Background(), srv.URL+"/r/3")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrTooManyRedirects)

	_, err = newFetcher(t, FetchOptions{MaxRedirects: -1, Allow: allowLoopback}, nil).Fetch(context.Background(), srv.URL+"/r/1")
	assert.ErrorIs(t, err, ErrTooManyRedirects)
}

func TestFetchSizeAndCharLimits(t *testing.T) {
	big := strings.Repeat("数据安全很重要。", 2000) // 8 runes × 2000, 24 bytes × 2000
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, big)
	})
	t.Run("byte limit", func(t *testing.T) {
		f := newFetcher(t, FetchOptions{MaxBytes: 1001, Allow: allowLoopback}, nil)
		p, err := f.Fetch(context.Background(), srv.URL)
		require.NoError(t, err)
		assert.True(t, p.Truncated)
		assert.True(t, utf8.ValidString(p.Content), "a cut in the middle of a character is dropped")
		assert.Equal(t, 333, utf8.RuneCountInString(p.Content))
		assert.Equal(t, 333, p.ContentLength)
	})
	t.Run("char limit", func(t *testing.T) {
		f := newFetcher(t, FetchOptions{MaxChars: 100, Allow: allowLoopback}, nil)
		p, err := f.Fetch(context.Background(), srv.URL)
		require.NoError(t, err)
		assert.True(t, p.Truncated)
		assert.Equal(t, 100, utf8.RuneCountInString(p.Content))
		assert.Equal(t, 16000, p.ContentLength)
	})
	t.Run("within limits", func(t *testing.T) {
		f := newFetcher(t, FetchOptions{Allow: allowLoopback}, nil)
		p, err := f.Fetch(context.Background(), srv.URL)
		require.NoError(t, err)
		assert.False(t, p.Truncated)
		assert.Equal(t, big, p.Content)
	})
}

func TestFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "partial")
		w.(http.Flusher).Flush()
		select { // the body never ends
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	f := newFetcher(t, FetchOptions{Timeout: 300 * time.Millisecond, Allow: allowLoopback}, nil)
	start := time.Now()
	out, err := NewOpenWebPage(f).Call(context.Background(), `{"url":"`+srv.URL+`"}`)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 20*time.Second, "the timeout ended the call (the server never answers)")
	m := decodeObject(t, out)
	assert.ElementsMatch(t, []string{"error", "url"}, keys(m))
	assert.Contains(t, m["error"], "timed out")
	assert.Equal(t, srv.URL, m["url"])
}

func TestFetchReadabilityArticle(t *testing.T) {
	page, err := os.ReadFile("testdata/article.html")
	require.NoError(t, err)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	f := newFetcher(t, FetchOptions{Allow: allowLoopback}, nil)
	out, err := NewOpenWebPage(f).Call(context.Background(), `{"url":"`+srv.URL+`/news/red-invoice"}`)
	require.NoError(t, err)
	m := decodeObject(t, out)
	assert.ElementsMatch(t, []string{"url", "title", "content", "content_length", "truncated"}, keys(m))
	assert.Equal(t, srv.URL+"/news/red-invoice", m["url"])
	assert.Contains(t, m["title"], "数电发票红字开具操作指引")
	content := m["content"].(string)
	for _, want := range []string{"数电发票不能作废", "先开具红字发票将原蓝字发票全额冲销", "72 小时内", "选择需要冲红的蓝字发票"} {
		assert.Contains(t, content, want)
	}
	for _, junk := range []string{"免费注册", "热门文章", "代理记账", "沪ICP备", "dataLayer", "tracker.js"} {
		assert.NotContains(t, content, junk)
	}
	assert.EqualValues(t, utf8.RuneCountInString(content), m["content_length"])
	assert.Equal(t, false, m["truncated"])

	const golden = "testdata/article.golden.txt"
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(content+"\n"), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSuffix(string(want), "\n"), content, "extracted text differs from %s (run with -update to accept)", golden)

	// The registry accepts this result as a source.
	reg := citations.BuildRegistry([]citations.ToolResult{{Tool: "open_web_page", Content: out}})
	assert.Equal(t, 1, reg.Len())
}

func TestFetchFallbackPlainExtraction(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><head><title>状态页</title><style>p{}</style></head><body><div>服务正常</div><span>更新于 10:00</span><script>x()</script></body></html>`)
	})
	p, err := newFetcher(t, FetchOptions{Allow: allowLoopback}, nil).Fetch(context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, "状态页", p.Title)
	assert.Contains(t, p.Content, "服务正常")
	assert.Contains(t, p.Content, "更新于 10:00")
	assert.NotContains(t, p.Content, "x()")
	assert.NotContains(t, p.Content, "p{}")
}

func TestFetchCharsets(t *testing.T) {
	gbkHTML := gbk(t, `<html><head><meta http-equiv="Content-Type" content="text/html; charset=gbk"><title>通知公告</title></head><body><p>关于春节放假安排的通知：2 月 10 日至 17 日放假调休，共 8 天。</p></body></html>`)
	gbkHeaderOnly := gbk(t, `<html><head><title>通知公告</title></head><body><p>关于春节放假安排的通知：2 月 10 日至 17 日放假调休，共 8 天。</p></body></html>`)
	latin1, err := charmap.ISO8859_1.NewEncoder().Bytes([]byte("Café crème à la française, naïve résumé"))
	require.NoError(t, err)
	tests := []struct {
		name, ctype string
		body        []byte
		want        string
	}{
		{"gbk via meta", "text/html", gbkHTML, "关于春节放假安排的通知"},
		{"gbk via header", "text/html; charset=GBK", gbkHeaderOnly, "关于春节放假安排的通知"},
		{"gb2312 label", "text/plain; charset=gb2312", gbk(t, "放假通知"), "放假通知"},
		{"latin-1 via header", "text/plain; charset=iso-8859-1", latin1, "Café crème à la française"},
		{"undeclared gbk guessed", "text/plain", gbk(t, "关于春节放假安排的通知"), "关于春节放假安排的通知"},
		{"invalid bytes replaced", "text/plain; charset=utf-8", []byte("ok \xff\xfe end"), "ok \uFFFD end"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				w.Write(tc.body)
			})
			out, err := NewOpenWebPage(newFetcher(t, FetchOptions{Allow: allowLoopback}, nil)).Call(context.Background(), `{"url":"`+srv.URL+`"}`)
			require.NoError(t, err)
			require.True(t, utf8.ValidString(out))
			m := decodeObject(t, out)
			require.NotContains(t, m, "error")
			assert.Contains(t, m["content"], tc.want)
		})
	}
}

func TestFetchContentTypes(t *testing.T) {
	tests := []struct {
		name, ctype, body string
		wantErr           string
		wantTitle         string
	}{
		{"markdown", "text/markdown; charset=utf-8", "# 发布说明\n\n    code stays indented\n", "", "发布说明"},
		{"plain", "text/plain", "just text", "", ""},
		{"sniffed html", "", "<!DOCTYPE html><html><head><title>Sniffed</title></head><body><p>hello</p></body></html>", "", "Sniffed"},
		{"pdf", "application/pdf", "%PDF-1.7", "unsupported content type application/pdf", ""},
		{"image", "image/png", "\x89PNG", "unsupported content type image/png", ""},
		{"json", "application/json", `{"a":1}`, "unsupported content type", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = []string{tc.ctype}
				fmt.Fprint(w, tc.body)
			})
			p, err := newFetcher(t, FetchOptions{Allow: allowLoopback}, nil).Fetch(context.Background(), srv.URL)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrUnsupportedContentType)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantTitle, p.Title)
			if tc.name == "markdown" {
				assert.Contains(t, p.Content, "\n    code stays indented", "Markdown is passed through")
			}
		})
	}
}

func TestFetchHTTPErrors(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		http.Error(w, "nope", code)
	})
	f := newFetcher(t, FetchOptions{Allow: allowLoopback}, nil)
	_, err := f.Fetch(context.Background(), srv.URL+"/404")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = f.Fetch(context.Background(), srv.URL+"/503")
	assert.ErrorContains(t, err, "HTTP 503 Service Unavailable")
	out, err := NewOpenWebPage(f).Call(context.Background(), `{"url":"`+srv.URL+`/500"}`)
	require.NoError(t, err)
	assert.JSONEq(t, `{"error":"cannot open the page: the server answered HTTP 500 Internal Server Error","url":"`+srv.URL+`/500"}`, out)
}

func TestFetchCorpusInProcess(t *testing.T) {
	// kb.example.test does not resolve and the guard would refuse it anyway: these answers can
	// only come from the corpus itself.
	c := loadSample(t)
	f := newFetcher(t, FetchOptions{MaxChars: 200}, c)
	p, err := f.Fetch(context.Background(), testPublicURL+"/kb/einvoice-title-correction")
	require.NoError(t, err)
	assert.Equal(t, "电子发票抬头开错了怎么办", p.Title)
	assert.Equal(t, testPublicURL+"/kb/einvoice-title-correction", p.URL)
	assert.True(t, p.Truncated)
	assert.Equal(t, 200, utf8.RuneCountInString(p.Content))
	d, _ := c.Lookup(p.URL)
	assert.Equal(t, utf8.RuneCountInString(d.Text), p.ContentLength)

	p, err = newFetcher(t, FetchOptions{}, c).Fetch(context.Background(), testPublicURL+"/kb/")
	require.NoError(t, err)
	assert.Equal(t, "知识库目录", p.Title)
	assert.Contains(t, p.Content, testPublicURL+"/kb/annual-leave")

	_, err = f.Fetch(context.Background(), testPublicURL+"/kb/no-such-doc")
	assert.ErrorIs(t, err, ErrNotFound)

	out, err := NewOpenWebPage(f).Call(context.Background(), `{"url":"`+testPublicURL+`/kb/vpn-access"}`)
	require.NoError(t, err)
	m := decodeObject(t, out)
	assert.Equal(t, "Remote Access via VPN", m["title"])
}

func TestOpenWebPageArguments(t *testing.T) {
	tool := NewOpenWebPage(newFetcher(t, FetchOptions{}, nil))
	spec := tool.Spec()
	assert.Equal(t, "open_web_page", spec.Name)
	assert.True(t, strings.HasSuffix(spec.Description, "引用本工具结果时，在句末使用 [^n^] 标记，n 为结果中的 ref 编号。"))
	tests := []struct{ args, want, url string }{
		{`nope`, "invalid arguments", ""},
		{`{}`, `"url" is required`, ""},
		{`{"url":"  "}`, `"url" is required`, ""},
		{`{"url":5}`, "invalid arguments", ""},
		{`{"url":"ftp://example.com/f"}`, "only http and https", "ftp://example.com/f"},
		{`{"url":"http://127.0.0.1:1/"}`, "refusing to connect", "http://127.0.0.1:1/"},
	}
	for _, tc := range tests {
		t.Run(tc.args, func(t *testing.T) {
			out, err := tool.Call(context.Background(), tc.args)
			require.NoError(t, err)
			m := decodeObject(t, out)
			assert.ElementsMatch(t, []string{"error", "url"}, keys(m))
			assert.Contains(t, m["error"], tc.want)
			assert.Equal(t, tc.url, m["url"])
			// Failure shapes never enter the registry.
			assert.Equal(t, 0, citations.BuildRegistry([]citations.ToolResult{{Tool: "open_web_page", Content: out}}).Len())
		})
	}
}

// deepPage builds an HTML page nested depth <div>s deep with text at the top, in the middle of the
// nesting and at the bottom, plus script, style and comment content a reader never sees.
func deepPage(depth int) string {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><title>深层 &amp; 嵌套页面</title><script>var secret = "token";</script><style>.x{color:red}</style></head><body>`)
	b.WriteString("<h1>数电发票红冲指引</h1>")
	for i := 0; i < depth; i++ {
		b.WriteString(`<div class="wrap">`)
		if i == depth/2 {
			b.WriteString("<p>第一步：在税务数字账户中选择需要冲红的蓝字发票。</p><script>evil()</script><!-- hidden comment -->")
		}
	}
	b.WriteString("<p>第二步：确认红字信息表后开具红字发票&nbsp;&lt;全额冲销&gt;。</p>")
	for i := 0; i < depth; i++ {
		b.WriteString("</div>")
	}
	b.WriteString("<p>页尾说明。</p></body></html>")
	return b.String()
}

func TestFetchDeeplyNestedPage(t *testing.T) {
	page := deepPage(5000)
	// The page really is beyond the tree builder, so this test exercises the fallback.
	_, err := html.Parse(strings.NewReader(page))
	require.Error(t, err, "html.Parse must refuse the page for this test to mean anything")

	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	})
	out, err := NewOpenWebPage(newFetcher(t, FetchOptions{Allow: allowLoopback}, nil)).Call(context.Background(), `{"url":"`+srv.URL+`"}`)
	require.NoError(t, err)
	m := decodeObject(t, out)
	require.NotContains(t, m, "error")
	assert.Equal(t, "深层 & 嵌套页面", m["title"])
	content := m["content"].(string)
	for _, want := range []string{"数电发票红冲指引", "第一步：在税务数字账户中选择需要冲红的蓝字发票。", "第二步：确认红字信息表后开具红字发票 <全额冲销>。", "页尾说明。"} {
		assert.Contains(t, content, want)
	}
	for _, junk := range []string{"<div", "class=", "</", "secret", "evil()", "color:red", "hidden comment", "&lt;", "&amp;"} {
		assert.NotContains(t, content, junk)
	}
	assert.Less(t, utf8.RuneCountInString(content), 200, "text only, no markup: %q", content)
	// The source counts like any other page.
	assert.Equal(t, 1, citations.BuildRegistry([]citations.ToolResult{{Tool: "open_web_page", Content: out}}).Len())
}

func TestTokenText(t *testing.T) {
	tests := []struct {
		name, src, title, text string
	}{
		{"head without end tag", `<html><head><title>T</title><meta charset=utf-8><body><p>正文</p>`, "T", "正文"},
		{"invisible islands", `<p>a</p><noscript>enable js</noscript><svg><text>chart</text></svg><template><p>t</p></template><select><option>opt</option></select><p>b</p>`, "", "a\n\nb"},
		{"nested invisible of the same kind", `<object><object>x</object>y</object><p>z</p>`, "", "z"},
		{"entities and breaks", `<p>x&nbsp;&amp;&#x4e2d;</p>line<br>next`, "", "x &中\nline\nnext"},
		{"unterminated script swallows nothing after its end", `<script>if (a < b) { x() }</script><p>after</p>`, "", "after"},
		{"plain text", `just words`, "", "just words"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			title, text := tokenText(tc.src)
			assert.Equal(t, tc.title, title)
			assert.Equal(t, tc.text, text)
		})
	}
}

// FuzzTokenText checks the fallback extractor on arbitrary bytes: it never panics, its output is
// valid UTF-8, and it is linear in size (no input makes it produce more than a bounded multiple).
func FuzzTokenText(f *testing.F) {
	f.Add(deepPage(600))
	f.Add(`<html><head><title>T</title><body><p>x&amp;y</p><script>z</script>`)
	f.Add("<svg><script>a</svg><p>b\xff</p>")
	f.Fuzz(func(t *testing.T, src string) {
		title, text := tokenText(src)
		if !utf8.ValidString(title) || !utf8.ValidString(text) {
			t.Fatalf("invalid UTF-8 out of %q", src)
		}
		if len(title)+len(text) > 4*len(src)+16 {
			t.Fatalf("output %d bytes for %d bytes of input", len(title)+len(text), len(src))
		}
	})
}

func TestFetchLiveForms(t *testing.T) {
	page, err := os.ReadFile("testdata/article.html")
	require.NoError(t, err)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	f := newFetcher(t, FetchOptions{Allow: allowLoopback}, nil)
	live, err := f.FetchLive(context.Background(), srv.URL)
	require.NoError(t, err)
	p, err := f.Fetch(context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, p, live.Page, "the page part is exactly what open_web_page gets")
	assert.Contains(t, live.Full, "热门文章", "the full text keeps what readability leaves out")
	assert.Contains(t, live.Passages, "数电发票不能作废")

	// A corpus document: passages are its own blocks, the lines search excerpts are made of.
	c := loadSample(t)
	live, err = newFetcher(t, FetchOptions{}, c).FetchLive(context.Background(), testPublicURL+"/kb/annual-leave")
	require.NoError(t, err)
	res, err := c.Search(context.Background(), "年假有多少天", 1)
	require.NoError(t, err)
	require.NotEmpty(t, res)
	for _, line := range strings.Split(res[0].Content, "\n") {
		assert.Contains(t, live.Passages, line, "every line of a passage is a line (or a cut line) of the page's passages")
	}
	assert.True(t, strings.HasPrefix(live.Full, "年假"), live.Full[:40])
}

// BenchmarkExtractHTML compares the tree-based extraction of an ordinary article (the baseline)
// with the tokenizer fallback on the same page and on a page too deep for the tree builder.
func BenchmarkExtractHTML(b *testing.B) {
	article, err := os.ReadFile("testdata/article.html")
	require.NoError(b, err)
	deep := deepPage(5000)
	u, _ := url.Parse("https://example.com/a")
	b.Run("tree/article", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			extractHTML(string(article), u, false)
		}
	})
	b.Run("tokenizer/article", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tokenText(string(article))
		}
	})
	b.Run("tokenizer/deep-5000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tokenText(deep)
		}
	})
	b.Run("fallback/deep-5000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			extractHTML(deep, u, false)
		}
	})
}
