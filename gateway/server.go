// Package gateway is citegate's HTTP server: the desktop view and its websocket hub, the REST API,
// read-only share pages, JSONL export, the authorised excerpt preview, token auth, Prometheus
// metrics and the admin unix socket used by `citegate user add` while the server holds the database.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/gateway/web"
	"github.com/citegate/citegate/store"
)

// Config configures a Server. Store and Agent are required.
type Config struct {
	// Addr is the listen address; it decides whether EnsureLocalUser may create a local user.
	Addr string
	// PublicURL is how browsers reach the server (share links, Origin checks); default "http://"+Addr.
	PublicURL string
	// DataDir holds the admin socket (citegate.sock).
	DataDir string
	Store   Store // any store.Backend
	Agent   Agent // *agent.Agent
	// KB serves the local corpus, mounted at /kb/ (nil → 404).
	KB http.Handler
	// SiteName names the site of a source URL where its domain says nothing (the corpus' own
	// /kb/ pages: their document's title); "" means the domain. Nil names none.
	SiteName func(url string) string
	// Fetch returns a page's current text for the preview recheck (open_web_page's guarded fetcher),
	// in the forms the tools extract at retrieval time (see LivePage). Nil makes recheck answer 503
	// unavailable.
	Fetch func(ctx context.Context, url string) (LivePage, error)
	// Webhooks are channel webhook routes, mounted as given (path → handler), each behind a body cap
	// of WebhookBodyLimit bytes.
	Webhooks map[string]http.Handler
	// ChannelStates reports each configured chat channel's state for /readyz and the
	// citegate_channel_state metric; nil means no channels.
	ChannelStates func() []channels.State
	// WebhookBodyLimit caps a webhook request body; past it the body reader fails and the channel
	// answers its rejection. Default 1 MiB (platform events are a few kilobytes).
	WebhookBodyLimit int64
	// ReadHeaderTimeout bounds how long a client may take to send a request's headers; default 10 s.
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds how long a client may take to send a request body, on every route; a
	// body that arrives slower is cut and the connection closed. A websocket, once upgraded, keeps
	// its own keepalive deadlines instead. Default 30 s.
	BodyReadTimeout time.Duration
	// ChatRatePerMinute limits chat.send per user; default 20. The burst is one second's worth of
	// the rate and at least 5 (chatBurst).
	ChatRatePerMinute int
	// MaxConnsPerUser caps a user's open websocket connections; past it an upgrade is refused
	// with 429 and a plain message. Default 16.
	MaxConnsPerUser int
	// AllowedOrigins are extra Origins (scheme://host[:port]) allowed for cookie-authenticated
	// websocket upgrades; PublicURL's origin is always allowed.
	AllowedOrigins []string
	// Bus joins this server to the other replicas on the same database (bus.go); nil → LocalBus,
	// one process. With a shared bus, desktop clients see runs executing on any replica and
	// chat.cancel reaches them (Store must then also be shared).
	Bus Bus
	// Registry receives the gateway's metrics and is exposed at /metrics; nil → a new one.
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// Now is the clock. Part of the contract for time-dependent behaviour; the preview recheck
	// stamps its checkedAt with it.
	Now func() time.Time
	// ShareViewFlush is how long share page views are batched before they are written (share_views.go); default 2 s.
	ShareViewFlush time.Duration
}

// Server is the gateway. Create it with New; serve it with Serve or mount Handler.
type Server struct {
	cfg       Config
	st        Store
	ag        Agent
	log       *slog.Logger
	publicURL *url.URL
	origins   map[string]bool // allowed Origins, lower-case scheme://host[:port]
	reg       *prometheus.Registry
	m         *metrics
	hub       *hub
	bus       Bus
	renders   *renderCache // answer HTML, rendered once per content and citations (render.go)
	views     *viewCounter // share page views, written in batches (share_views.go)
	handler   http.Handler
	unsub     func()
	// Websocket keepalive: a client that answers nothing for pongWait is dropped; pings go out
	// every pingPeriod (pongWait/2 when zero). Fields so that a test can drop a silent client
	// quickly while pinging often enough that an answering client has nearly all of pongWait to
	// answer, however busy the machine.
	pongWait   time.Duration
	pingPeriod time.Duration

	limMu    sync.Mutex
	limiters map[string]*rate.Limiter // user id → chat.send limiter
	limRate  rate.Limit
	limBurst int
}

// New validates cfg and builds a Server. It subscribes to the agent's events at once, so runs started
// by channels are counted in the metrics too.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("gateway: Config.Store is required")
	}
	if cfg.Agent == nil {
		return nil, errors.New("gateway: Config.Agent is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ChatRatePerMinute <= 0 {
		cfg.ChatRatePerMinute = 20
	}
	if cfg.WebhookBodyLimit <= 0 {
		cfg.WebhookBodyLimit = defaultWebhookBodyLimit
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = defaultReadHeaderTimeout
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = defaultBodyReadTimeout
	}
	if cfg.PublicURL == "" {
		if cfg.Addr == "" {
			return nil, errors.New("gateway: Config.PublicURL or Config.Addr is required")
		}
		cfg.PublicURL = "http://" + cfg.Addr
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	pu, err := url.Parse(cfg.PublicURL)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, fmt.Errorf("gateway: public URL %q must be an absolute http(s) URL", cfg.PublicURL)
	}
	s := &Server{
		cfg:       cfg,
		st:        cfg.Store,
		ag:        cfg.Agent,
		log:       cfg.Logger.With("component", "gateway"),
		publicURL: pu,
		origins:   map[string]bool{strings.ToLower(pu.Scheme + "://" + pu.Host): true},
		reg:       cfg.Registry,
		limiters:  make(map[string]*rate.Limiter),
		limRate:   rate.Limit(float64(cfg.ChatRatePerMinute) / 60),
		limBurst:  chatBurst(cfg.ChatRatePerMinute),
		pongWait:  defaultPongWait,
		renders:   newRenderCache(defaultRenderCacheBytes),
	}
	for _, o := range cfg.AllowedOrigins {
		u, err := url.Parse(strings.TrimSpace(o))
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("gateway: allowed origin %q must look like https://host[:port]", o)
		}
		s.origins[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	if s.m, err = newMetrics(s.reg); err != nil {
		return nil, err
	}
	if s.views, err = newViewCounter(cfg.Store, s.log, cfg.ShareViewFlush, s.reg); err != nil {
		return nil, err
	}
	if cfg.ChannelStates != nil {
		if err := s.reg.Register(newChannelStateCollector(cfg.ChannelStates)); err != nil {
			return nil, fmt.Errorf("gateway: channel state metric: %w", err)
		}
	}
	s.bus = cfg.Bus
	if s.bus == nil {
		s.bus = LocalBus{}
	}
	s.hub = newHub(s, cfg.Store, ClusterAgent(cfg.Agent, s.bus, cfg.Store, s.log), cfg.MaxConnsPerUser)
	if s.handler, err = s.routes(); err != nil {
		return nil, err
	}
	s.unsub = s.ag.Subscribe(s.hub.onEvent)
	return s, nil
}

// Handler returns the HTTP handler with every route.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() (_ http.Handler, err error) {
	// ServeMux panics on malformed or conflicting patterns; those come from configuration
	// (webhook paths), so they become an error.
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("gateway: routes: %v", v)
		}
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.handleIndex)
	mux.HandleFunc("POST /login", s.handleLogin)
	mux.HandleFunc("GET "+LoginPath, s.handleLoginCode)
	mux.HandleFunc("POST /logout", s.handleLogout)
	mux.HandleFunc("GET /ws", s.handleWS)
	mux.HandleFunc("GET /healthz", s.handleHealthz)
	mux.HandleFunc("GET /readyz", s.handleReadyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))

	mux.HandleFunc("GET /api/me", s.api(s.handleMe))
	mux.HandleFunc("GET /api/sessions", s.api(s.handleSessions))
	mux.HandleFunc("GET /api/sessions/{id}/messages", s.api(s.handleMessages))
	mux.HandleFunc("POST /api/sessions/{id}/shares", s.api(s.handleCreateShare))
	mux.HandleFunc("GET /api/shares", s.api(s.handleListShares))
	mux.HandleFunc("DELETE /api/shares/{token}", s.api(s.handleRevokeShare))
	mux.HandleFunc("GET /api/sessions/{id}/shares", s.api(s.handleChatShares)) // share_api.go
	mux.HandleFunc("PATCH /api/shares/{token}", s.api(s.handleUpdateShare))
	mux.HandleFunc("GET /api/sessions/{id}/export.jsonl", s.api(s.handleExport))
	mux.HandleFunc("GET /api/messages/{id}/citations/{n}/preview", s.api(s.handlePreview))
	// Message and chat actions (actions.go, chats.go, feedback.go, export_md.go).
	mux.HandleFunc("PATCH /api/sessions/{id}", s.api(s.handleRenameSession))
	mux.HandleFunc("DELETE /api/sessions/{id}", s.api(s.handleDeleteSession))
	mux.HandleFunc("GET /api/search", s.api(s.handleSearch))
	mux.HandleFunc("GET /api/sessions/{id}/export.md", s.api(s.handleExportMarkdown))
	mux.HandleFunc("GET /api/messages/{id}/text", s.api(s.handleMessageText))
	mux.HandleFunc("PUT /api/messages/{id}/feedback", s.api(s.handleSetFeedback))
	mux.HandleFunc("DELETE /api/messages/{id}/feedback", s.api(s.handleClearFeedback))
	s.settingsRoutes(mux)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) { s.writeError(w, r, errNotFound()) })

	mux.HandleFunc("GET /s/{token}", s.handleSharePage)
	mux.HandleFunc("GET /s/{token}/export.jsonl", s.handleShareExport)
	s.operatorRoutes(mux)

	mux.Handle("GET /assets/", http.StripPrefix("/assets/", web.Assets()))
	if s.cfg.KB != nil {
		mux.Handle("/kb/", s.cfg.KB)
	}
	for path, h := range s.cfg.Webhooks {
		if !strings.HasPrefix(path, "/") || h == nil {
			return nil, fmt.Errorf("gateway: webhook route %q: need an absolute path and a handler", path)
		}
		mux.Handle(path, http.MaxBytesHandler(h, s.cfg.WebhookBodyLimit))
	}
	return securityHeaders(bodyDeadline(mux, s.cfg.BodyReadTimeout)), nil
}

// securityHeaders adds the headers no page of ours should go without: no framing (a meta CSP cannot
// say frame-ancestors), no MIME sniffing, and no referrer beyond the origin.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "strict-origin-when-cross-origin")
		next.ServeHTTP(w, r)
	})
}

// Serve serves HTTP on ln until ctx ends, then shuts down gracefully: websocket clients get a close
// frame, in-flight requests get a few seconds to finish.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.hub.closeAll()
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	// Hijacked websocket connections are not tracked by Shutdown; the hub closes them itself.
	s.hub.closeAll()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	<-errc
	_ = s.views.close(shutdownCtx) // a failure is logged; the views of one interval are all it costs
	if err != nil {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	return nil
}

// Close stops routing agent events to this server's clients and closes them. Serve calls the
// client part itself; Close is for servers mounted through Handler (tests, embedding).
func (s *Server) Close() {
	if s.unsub != nil {
		s.unsub()
	}
	s.hub.closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.views.close(ctx)
}

// chatBurst is the chat.send burst for a per-minute rate: 5 for a person's pace, one second's worth
// of the rate when that is more. A fixed 5 let a high limit (a load test, an integration sending for
// many people through one account) refuse a few sends that arrived in the same moment even though
// the minute's budget was nowhere near spent.
func chatBurst(perMinute int) int {
	return max(5, (perMinute+59)/60)
}

// limiter returns the user's chat.send limiter.
func (s *Server) limiter(userID string) *rate.Limiter {
	s.limMu.Lock()
	defer s.limMu.Unlock()
	l, ok := s.limiters[userID]
	if !ok {
		l = rate.NewLimiter(s.limRate, s.limBurst)
		s.limiters[userID] = l
	}
	return l
}

// storeErr turns a store error into an HTTP error: not found (and invalid ids) become not found,
// everything else is counted and becomes internal.
func (s *Server) storeErr(op string, err error) *Error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
		// Invalid ids only come from lookups of caller-supplied ids: no such record.
		return errNotFound()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "request cancelled", Err: err}
	}
	s.m.storeErrors.WithLabelValues(op).Inc()
	return errInternal(fmt.Errorf("store %s: %w", op, err))
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Cache-Control", "no-store")
	if err := s.st.Ping(ctx); err != nil {
		s.m.storeErrors.WithLabelValues("ping").Inc()
		s.log.WarnContext(r.Context(), "health check failed", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "store": "unreachable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// langOf picks the page language: a signed-in user's own choice when the request carries it
// (withUserLang, settings.go), else Accept-Language: English when the browser prefers English,
// Chinese otherwise (the product's default).
func langOf(r *http.Request) string {
	if l := chosenLang(r); l != "" {
		return l
	}
	al := strings.ToLower(strings.TrimSpace(r.Header.Get("Accept-Language")))
	if strings.HasPrefix(al, "en") {
		return "en"
	}
	return "zh"
}
