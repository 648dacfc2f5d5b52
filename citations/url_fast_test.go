package citations

import "testing"

// FuzzPlainHTTPURL: the allocation-free check never accepts a URL that net/url would refuse (or
// read without an http(s) scheme or a host). What it does not accept goes to net/url, so it cannot
// change NormalizeURL's answer.
func FuzzPlainHTTPURL(f *testing.F) {
	for _, s := range []string{
		"https://kb.example.com/kb/doc-1-2", "HTTP://A.example:8080/x?y=1&z=%E4%B8%AD", "http://a", "https://-/",
		"http://a:/", "http://a:99999999/", "http://a?@b", "http://a/b:c@d", "http://a%zz/", "http://a/%zz",
		"http://a/%e4", "https://a.example/#frag", "http://[::1]/", "http://user@a/", "http://a b/", "http://a/\x7f",
		"https://", "http:///x", "ftp://a/", "http://a/b?c=d#e", "http://a/.././%2F",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if plainHTTPURL(s) && !parsedHTTPURL(s) {
			t.Fatalf("plainHTTPURL accepts %q, net/url does not", s)
		}
	})
}

func TestPlainHTTPURL(t *testing.T) {
	for s, want := range map[string]bool{
		"https://kb.example.com/kb/doc-1-2":       true,
		"HTTP://A.example:8080/x?y=1&z=%E4%B8%AD": true,
		"http://a/%zz":            false, // left to net/url, which refuses it
		"https://a.example/#frag": false, // left to net/url, which accepts it
		"http://user@a/":          false,
		"ftp://a/":                false,
		"https://":                false,
	} {
		if got := plainHTTPURL(s); got != want {
			t.Errorf("plainHTTPURL(%q) = %v, want %v", s, got, want)
		}
		if _, ok := NormalizeURL(s); ok != parsedHTTPURL(s) {
			t.Errorf("NormalizeURL(%q) = %v, net/url says %v", s, ok, parsedHTTPURL(s))
		}
	}
}
