package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

// Config is everything citegate reads at start. Precedence: flag > environment > YAML file > default.
type Config struct {
	Data string `yaml:"data"`
	Addr string `yaml:"addr"`
	// Store is empty (bbolt in Data) or a postgres:// URL (PostgreSQL, shared by any number of
	// serve processes).
	Store string `yaml:"store"`
	// RunLease is how far one renewal moves this replica's run leases (several replicas on
	// PostgreSQL), a Go duration; empty → gateway.DefaultRunLease.
	RunLease  string `yaml:"run_lease"`
	PublicURL string `yaml:"public_url"`
	// PublicURLSet: the public URL was configured rather than defaulted from addr (chat /share
	// links are handed out only then).
	PublicURLSet bool   `yaml:"-"`
	LogLevel     string `yaml:"log_level"`
	Lang         string `yaml:"lang"`

	LLM struct {
		BaseURL string `yaml:"base_url"`
		Model   string `yaml:"model"`
		APIKey  string `yaml:"api_key"`
	} `yaml:"llm"`

	Search        string `yaml:"search"`
	SearXNGURL    string `yaml:"searxng_url"`
	TavilyAPIKey  string `yaml:"tavily_api_key"`
	KB            string `yaml:"kb"`
	FetchAllow    string `yaml:"fetch_allow"`
	ChatPerMinute int    `yaml:"chat_rate_per_minute"`
	MaxRounds     int    `yaml:"max_rounds"`

	Channels ChannelsConfig `yaml:"channels"`

	// src says where each enum-valued setting came from ("--search", "CITEGATE_SEARCH",
	// "search (citegate.yaml line 4)"), so an error about its value points at the right place.
	src map[string]string
}

// ChannelsConfig is the `channels:` section (DESIGN §5). Each key may also come from
// CITEGATE_<CHANNEL>_<KEY>.
type ChannelsConfig struct {
	Feishu struct {
		AppID             string `yaml:"app_id"`
		AppSecret         string `yaml:"app_secret"`
		Mode              string `yaml:"mode"`
		VerificationToken string `yaml:"verification_token"`
		EncryptKey        string `yaml:"encrypt_key"`
		BaseURL           string `yaml:"base_url"`
		DisableCardKit    bool   `yaml:"disable_cardkit"`
	} `yaml:"feishu"`
	DingTalk struct {
		ClientID       string `yaml:"client_id"`
		ClientSecret   string `yaml:"client_secret"`
		CardTemplateID string `yaml:"card_template_id"`
		CardContentKey string `yaml:"card_content_key"`
		RobotCode      string `yaml:"robot_code"`
		BotName        string `yaml:"bot_name"`
		APIBaseURL     string `yaml:"api_base_url"`
		StreamBaseURL  string `yaml:"stream_base_url"`
	} `yaml:"dingtalk"`
	WeChat struct {
		AppID          string `yaml:"app_id"`
		AppSecret      string `yaml:"app_secret"`
		Token          string `yaml:"token"`
		EncodingAESKey string `yaml:"encoding_aes_key"`
		APIBaseURL     string `yaml:"api_base_url"`
	} `yaml:"wechat"`
	SourcesFooter bool `yaml:"sources_footer"`
}

// flagValues holds the raw flag values; empty means "not given".
type flagValues struct {
	config, data, store, addr, publicURL, llmBaseURL, llmModel, search, searxngURL, kb, fetchAllow, logLevel, lang string

	// logDefault is the command's own default log level (serve: info; the one-shot commands: warn),
	// used only when neither flag, environment nor file sets one.
	logDefault string
}

// registerFlags adds the shared configuration flags of DESIGN §5 to fs. Secrets have no flags: they
// come from the environment or the config file only.
func registerFlags(fs *flag.FlagSet) *flagValues {
	v := &flagValues{}
	fs.StringVar(&v.config, "config", "", "YAML config file (may set everything below, and the channels)")
	fs.StringVar(&v.data, "data", "", "data directory holding the bbolt file (env CITEGATE_DATA, default ./data)")
	fs.StringVar(&v.store, "store", "", "empty = bbolt in --data; postgres://… = PostgreSQL shared by any number of serve processes (env CITEGATE_STORE; prefer the environment or a passfile for the password)")
	fs.StringVar(&v.addr, "addr", "", "listen address (env CITEGATE_ADDR, default 127.0.0.1:8080)")
	fs.StringVar(&v.publicURL, "public-url", "", "external base URL for links and shares (env CITEGATE_PUBLIC_URL, default http://<addr>)")
	fs.StringVar(&v.llmBaseURL, "llm-base-url", "", "OpenAI-compatible API base URL (env CITEGATE_LLM_BASE_URL); empty = offline extractive model; API key from env CITEGATE_LLM_API_KEY")
	fs.StringVar(&v.llmModel, "llm-model", "", "model name for the OpenAI-compatible API (env CITEGATE_LLM_MODEL)")
	fs.StringVar(&v.search, "search", "", "search provider: local, searxng or tavily (env CITEGATE_SEARCH, default local); Tavily key from env CITEGATE_TAVILY_API_KEY")
	fs.StringVar(&v.searxngURL, "searxng-url", "", "SearXNG base URL (env CITEGATE_SEARXNG_URL)")
	fs.StringVar(&v.kb, "kb", "", "knowledge directory of Markdown/HTML/text for the local search (env CITEGATE_KB, default the bundled sample corpus)")
	fs.StringVar(&v.fetchAllow, "fetch-allow", "", "comma list of CIDRs/hosts open_web_page may reach despite the private-address guard (env CITEGATE_FETCH_ALLOW)")
	fs.StringVar(&v.logLevel, "log-level", "", "debug, info, warn or error (env CITEGATE_LOG_LEVEL, default info)")
	fs.StringVar(&v.lang, "lang", "", "language of the system prompt and CLI output: zh or en (env CITEGATE_LANG, default zh)")
	return v
}

// loadConfig merges defaults, the YAML file, the environment and the flags, in that order of
// increasing precedence, for every setting of every command.
func loadConfig(v *flagValues, getenv func(string) string) (Config, error) {
	var c Config
	lines := map[string]int{}
	path := first(v.config, getenv("CITEGATE_CONFIG"))
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		if lines, err = decodeYAML(path, b, &c); err != nil {
			return c, err
		}
	}
	c.src = map[string]string{}
	// pick applies the precedence rule to one enum-valued setting and remembers where the value
	// came from.
	pick := func(key, flagName, flagVal, envName, fileVal, def string) string {
		switch {
		case strings.TrimSpace(flagVal) != "":
			c.src[key] = flagName
		case strings.TrimSpace(getenv(envName)) != "":
			c.src[key] = envName
		case strings.TrimSpace(fileVal) != "":
			c.src[key] = fmt.Sprintf("%s (%s line %d)", key, path, lines[key])
		default:
			c.src[key] = flagName
		}
		return strings.ToLower(first(flagVal, getenv(envName), fileVal, def))
	}
	c.Data = first(v.data, getenv("CITEGATE_DATA"), c.Data, "./data")
	c.Store = strings.TrimSpace(first(v.store, getenv("CITEGATE_STORE"), c.Store))
	if c.Store != "" && !store.IsPostgresURL(c.Store) {
		return c, fmt.Errorf("--store / CITEGATE_STORE: expected a postgres:// or postgresql:// URL, or nothing for bbolt in --data (got a value starting %q)", prefix(c.Store, 12))
	}
	c.RunLease = strings.TrimSpace(first(getenv("CITEGATE_RUN_LEASE"), c.RunLease))
	if c.RunLease != "" {
		if d, err := time.ParseDuration(c.RunLease); err != nil || d < time.Second || d > 10*time.Minute {
			return c, fmt.Errorf("run_lease / CITEGATE_RUN_LEASE: %q is not a duration between 1s and 10m (e.g. 20s)", c.RunLease)
		}
	}
	c.Addr = first(v.addr, getenv("CITEGATE_ADDR"), c.Addr, "127.0.0.1:8080")
	c.PublicURLSet = first(v.publicURL, getenv("CITEGATE_PUBLIC_URL"), c.PublicURL) != ""
	c.PublicURL = strings.TrimRight(first(v.publicURL, getenv("CITEGATE_PUBLIC_URL"), c.PublicURL, "http://"+c.Addr), "/")
	c.LLM.BaseURL = first(v.llmBaseURL, getenv("CITEGATE_LLM_BASE_URL"), c.LLM.BaseURL)
	c.LLM.Model = first(v.llmModel, getenv("CITEGATE_LLM_MODEL"), c.LLM.Model)
	c.LLM.APIKey = first(getenv("CITEGATE_LLM_API_KEY"), c.LLM.APIKey)
	c.Search = pick("search", "--search", v.search, "CITEGATE_SEARCH", c.Search, "local")
	c.SearXNGURL = first(v.searxngURL, getenv("CITEGATE_SEARXNG_URL"), c.SearXNGURL)
	c.TavilyAPIKey = first(getenv("CITEGATE_TAVILY_API_KEY"), c.TavilyAPIKey)
	c.KB = first(v.kb, getenv("CITEGATE_KB"), c.KB)
	c.FetchAllow = first(v.fetchAllow, getenv("CITEGATE_FETCH_ALLOW"), c.FetchAllow)
	c.LogLevel = pick("log_level", "--log-level", v.logLevel, "CITEGATE_LOG_LEVEL", c.LogLevel, first(v.logDefault, "info"))
	c.Lang = pick("lang", "--lang", v.lang, "CITEGATE_LANG", c.Lang, "zh")

	ch := &c.Channels
	env := func(channel, key, cur string) string {
		return first(getenv("CITEGATE_"+channel+"_"+key), cur)
	}
	ch.Feishu.AppID = env("FEISHU", "APP_ID", ch.Feishu.AppID)
	ch.Feishu.AppSecret = env("FEISHU", "APP_SECRET", ch.Feishu.AppSecret)
	if m := ch.Feishu.Mode; getenv("CITEGATE_FEISHU_MODE") != "" || m != "" {
		ch.Feishu.Mode = pick("channels.feishu.mode", "CITEGATE_FEISHU_MODE", "", "CITEGATE_FEISHU_MODE", m, "")
	}
	ch.Feishu.VerificationToken = env("FEISHU", "VERIFICATION_TOKEN", ch.Feishu.VerificationToken)
	ch.Feishu.EncryptKey = env("FEISHU", "ENCRYPT_KEY", ch.Feishu.EncryptKey)
	ch.Feishu.BaseURL = env("FEISHU", "BASE_URL", ch.Feishu.BaseURL)
	if v := getenv("CITEGATE_FEISHU_DISABLE_CARDKIT"); v != "" {
		ch.Feishu.DisableCardKit = v == "1" || strings.EqualFold(v, "true")
	}
	ch.DingTalk.ClientID = env("DINGTALK", "CLIENT_ID", ch.DingTalk.ClientID)
	ch.DingTalk.ClientSecret = env("DINGTALK", "CLIENT_SECRET", ch.DingTalk.ClientSecret)
	ch.DingTalk.CardTemplateID = env("DINGTALK", "CARD_TEMPLATE_ID", ch.DingTalk.CardTemplateID)
	ch.DingTalk.CardContentKey = env("DINGTALK", "CARD_CONTENT_KEY", ch.DingTalk.CardContentKey)
	ch.DingTalk.RobotCode = env("DINGTALK", "ROBOT_CODE", ch.DingTalk.RobotCode)
	ch.DingTalk.BotName = env("DINGTALK", "BOT_NAME", ch.DingTalk.BotName)
	ch.DingTalk.APIBaseURL = env("DINGTALK", "API_BASE_URL", ch.DingTalk.APIBaseURL)
	ch.DingTalk.StreamBaseURL = env("DINGTALK", "STREAM_BASE_URL", ch.DingTalk.StreamBaseURL)
	ch.WeChat.AppID = env("WECHAT", "APP_ID", ch.WeChat.AppID)
	ch.WeChat.AppSecret = env("WECHAT", "APP_SECRET", ch.WeChat.AppSecret)
	ch.WeChat.Token = env("WECHAT", "TOKEN", ch.WeChat.Token)
	ch.WeChat.EncodingAESKey = env("WECHAT", "ENCODING_AES_KEY", ch.WeChat.EncodingAESKey)
	ch.WeChat.APIBaseURL = env("WECHAT", "API_BASE_URL", ch.WeChat.APIBaseURL)
	if s := getenv("CITEGATE_SOURCES_FOOTER"); s != "" {
		ch.SourcesFooter = s == "1" || strings.EqualFold(s, "true")
	}
	return c, c.validate()
}

func (c Config) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("--addr %q: want host:port", c.Addr))
	}
	if !strings.HasPrefix(c.PublicURL, "http://") && !strings.HasPrefix(c.PublicURL, "https://") {
		errs = append(errs, fmt.Errorf("--public-url %q: want an http(s) URL", c.PublicURL))
	}
	enum := func(key, val string) bool {
		if slices.Contains(enumValues[key], val) {
			return true
		}
		src := c.src[key]
		if src == "" {
			src = key
		}
		errs = append(errs, fmt.Errorf("%s %q is not allowed: want %s", src, val, orList(enumValues[key])))
		return false
	}
	if enum("search", c.Search) {
		switch c.Search {
		case "searxng":
			if c.SearXNGURL == "" {
				errs = append(errs, errors.New("--search searxng needs --searxng-url (env CITEGATE_SEARXNG_URL, file searxng_url)"))
			}
		case "tavily":
			if c.TavilyAPIKey == "" {
				errs = append(errs, errors.New("--search tavily needs CITEGATE_TAVILY_API_KEY"))
			}
		}
	}
	if c.LLM.BaseURL != "" && c.LLM.Model == "" {
		errs = append(errs, errors.New("--llm-base-url needs --llm-model (env CITEGATE_LLM_MODEL)"))
	}
	enum("lang", c.Lang)
	enum("log_level", c.LogLevel)
	if m := c.Channels.Feishu.Mode; m != "" {
		enum("channels.feishu.mode", m)
	}
	return errors.Join(errs...)
}

// orList writes "a, b or c".
func orList(vals []string) string {
	if len(vals) < 2 {
		return strings.Join(vals, "")
	}
	return strings.Join(vals[:len(vals)-1], ", ") + " or " + vals[len(vals)-1]
}

// prefix returns at most n bytes of s, for messages that must not echo a whole secret-bearing value.
func prefix(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// runLease is the run lease of a replica (run_lease, validated by loadConfig).
func (c Config) runLease() time.Duration {
	if d, err := time.ParseDuration(c.RunLease); err == nil && d > 0 {
		return d
	}
	return gateway.DefaultRunLease
}

// usesPostgres reports whether the store is PostgreSQL rather than the bbolt file in Data.
func (c Config) usesPostgres() bool { return c.Store != "" }

// storeName names the store for people: the bbolt file, or the PostgreSQL URL without password.
func (c Config) storeName() string {
	if c.usesPostgres() {
		return "postgresql " + store.RedactURL(c.Store)
	}
	return "bbolt " + c.dbPath()
}

// dbPath is the bbolt file inside the data directory.
func (c Config) dbPath() string { return filepath.Join(c.Data, "citegate.db") }

func first(vals ...string) string {
	for _, v := range vals {
		if strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// splitList splits a comma list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
