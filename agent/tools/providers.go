package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxProviderBody bounds what a search provider may send back.
const maxProviderBody = 4 << 20

// defaultProviderClient is used when a provider has no Client; the tool's context deadline is the
// real limit, this timeout only guards direct callers.
var defaultProviderClient = &http.Client{Timeout: 30 * time.Second}

// SearXNG searches a SearXNG instance through its JSON API: GET {BaseURL}/search?q=…&format=json.
// The instance must have "json" among search.formats in its settings.yml.
type SearXNG struct {
	BaseURL string
	Client  *http.Client
}

type searxngResponse struct {
	Results []struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	} `json:"results"`
}

// Search implements Searcher.
func (s *SearXNG) Search(ctx context.Context, query string, max int) ([]SearchResult, error) {
	base := strings.TrimRight(strings.TrimSpace(s.BaseURL), "/")
	if base == "" {
		return nil, errors.New("searxng: no base URL configured")
	}
	u, err := url.Parse(base + "/search")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("searxng: invalid base URL %q", redactURL(base))
	}
	v := u.Query()
	v.Set("q", query)
	v.Set("format", "json")
	v.Set("safesearch", "1")
	u.RawQuery = v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("searxng: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	body, err := doProvider(client(s.Client), req, "searxng")
	if err != nil {
		return nil, err
	}
	var resp searxngResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("searxng: the response is not valid JSON (is the json format enabled in settings.yml?): %w", err)
	}
	out := make([]SearchResult, 0, len(resp.Results))
	for _, r := range resp.Results {
		if len(out) == max {
			break
		}
		out = append(out, SearchResult{Title: r.Title, URL: r.URL, Content: r.Content})
	}
	return out, nil
}

// Tavily searches with the Tavily API: POST {BaseURL or https://api.tavily.com}/search with the
// key as a bearer token. The key never appears in errors or logs.
type Tavily struct {
	APIKey, BaseURL string
	Client          *http.Client
}

type tavilyResponse struct {
	Results *[]struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	} `json:"results"`
}

// Search implements Searcher.
func (t *Tavily) Search(ctx context.Context, query string, max int) ([]SearchResult, error) {
	if strings.TrimSpace(t.APIKey) == "" {
		return nil, errors.New("tavily: no API key configured (CITEGATE_TAVILY_API_KEY)")
	}
	base := strings.TrimRight(strings.TrimSpace(t.BaseURL), "/")
	if base == "" {
		base = "https://api.tavily.com"
	}
	payload, err := json.Marshal(map[string]any{
		"query":          query,
		"max_results":    max,
		"search_depth":   "basic",
		"include_answer": false,
	})
	if err != nil {
		return nil, fmt.Errorf("tavily: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/search", bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("tavily: invalid base URL %q", redactURL(base))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+t.APIKey)
	body, err := doProvider(client(t.Client), req, "tavily")
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), t.APIKey, "[redacted]"))
	}
	var resp tavilyResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("tavily: the response is not valid JSON: %w", err)
	}
	if resp.Results == nil {
		return nil, errors.New("tavily: the response has no results field")
	}
	out := make([]SearchResult, 0, len(*resp.Results))
	for _, r := range *resp.Results {
		if len(out) == max {
			break
		}
		out = append(out, SearchResult{Title: r.Title, URL: r.URL, Content: r.Content})
	}
	return out, nil
}

func client(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return defaultProviderClient
}

// doProvider sends req and returns the body of a 200 answer; any other status becomes an error
// naming the provider, the status and the start of the provider's message.
func doProvider(c *http.Client, req *http.Request, name string) ([]byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, fmt.Errorf("%s: %w", name, ctxErr)
		}
		return nil, fmt.Errorf("%s: request failed: %w", name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProviderBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the response: %w", name, err)
	}
	if len(body) > maxProviderBody {
		return nil, fmt.Errorf("%s: the response is larger than %d bytes", name, maxProviderBody)
	}
	if resp.StatusCode != http.StatusOK {
		msg := providerMessage(body)
		if msg != "" {
			msg = ": " + msg
		}
		hint := ""
		if name == "searxng" && resp.StatusCode == http.StatusForbidden {
			hint = " (enable the json format under search.formats in SearXNG's settings.yml)"
		}
		if name == "tavily" && resp.StatusCode == http.StatusUnauthorized {
			hint = " (check CITEGATE_TAVILY_API_KEY)"
		}
		return nil, fmt.Errorf("%s: HTTP %d %s%s%s", name, resp.StatusCode, http.StatusText(resp.StatusCode), msg, hint)
	}
	return body, nil
}

// providerMessage extracts a short error text from a provider's error body: the usual JSON keys
// ("detail", "error", "message"), else the start of the body when it is short text.
func providerMessage(body []byte) string {
	var obj map[string]any
	if json.Unmarshal(body, &obj) == nil {
		for _, k := range []string{"detail", "error", "message"} {
			switch v := obj[k].(type) {
			case string:
				return shorten(v)
			case map[string]any:
				for _, kk := range []string{"error", "message"} {
					if s, ok := v[kk].(string); ok {
						return shorten(s)
					}
				}
			}
		}
		return ""
	}
	s := strings.TrimSpace(string(body))
	if s == "" || strings.HasPrefix(s, "<") {
		return ""
	}
	return shorten(s)
}

func shorten(s string) string {
	s, cut := truncateRunes(cleanText(s), 200)
	if cut {
		s += "…"
	}
	return s
}

// redactURL drops user information from a URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
