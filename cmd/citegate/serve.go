package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/dingtalk"
	"github.com/citegate/citegate/channels/feishu"
	"github.com/citegate/citegate/channels/wechat"
	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("serve", "citegate [serve] [flags]", stderr)
	fv := registerFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "citegate serve: unexpected argument %q\n", pos[0])
		return errUsage
	}
	cfg, err := loadConfig(fv, getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg.LogLevel, stderr)

	st, err := openStore(cfg, log, time.Second)
	if err != nil {
		return err
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	// Several replicas on one PostgreSQL database (replicas.go): stopped after the deferred
	// gateway.Shutdown below, before the store closes.
	reps, err := newReplicaSet(cfg, st, reg, log)
	if err != nil {
		return err
	}
	defer reps.stop()
	cr, err := buildCore(cfg, st, reps.turnOrder(), log)
	if err != nil {
		return err
	}
	reps.watch(cr.Agent)
	// /share hands out links only when the operator said how the server is reached from outside;
	// the default (http://<addr>) is a loopback address more often than not.
	sharePublicURL := ""
	if cfg.PublicURLSet {
		sharePublicURL = cfg.PublicURL
	}
	disp, err := gateway.NewDispatcher(gateway.DispatcherConfig{
		Store: st, Agent: reps.dispatchAgent(cr.Agent), PublicURL: sharePublicURL, SourcesFooter: cfg.Channels.SourcesFooter,
		TurnDone: reps.turnDone(), Registerer: reg, Logger: log,
	})
	if err != nil {
		closeAgent(cr.Agent, log)
		return err
	}
	// One shutdown order for every exit path (gateway.Shutdown): replies end with their terminal
	// state, runs are marked, then the store closes (deferred above).
	defer func() {
		if err := gateway.Shutdown(context.Background(), cr.Agent, disp); err != nil {
			log.Warn("shutdown did not finish cleanly", "err", err)
		}
	}()
	chans, err := buildChannels(cfg, log)
	if err != nil {
		return err
	}
	useStoreForReplays(chans, st)
	webhooks := map[string]http.Handler{}
	for _, ch := range chans {
		if wh, ok := ch.(channels.WebhookChannel); ok {
			for path, h := range wh.Routes() {
				webhooks[path] = h
			}
		}
	}

	sup := channelSupervisor(chans, log)
	srv, err := gateway.New(gateway.Config{
		ChannelStates: sup.States,
		Addr:          cfg.Addr,
		PublicURL:     cfg.PublicURL,
		DataDir:       cfg.Data,
		Store:         st,
		Agent:         cr.Agent,
		KB:            cr.Corpus.Handler(),
		SiteName:      cr.Corpus.SiteName,
		Fetch: func(ctx context.Context, url string) (gateway.LivePage, error) {
			p, err := cr.Fetcher.FetchLive(ctx, url)
			return gateway.LivePage{Text: p.Content, Passages: p.Passages, Full: p.Full}, err
		},
		Webhooks:          webhooks,
		ChatRatePerMinute: cfg.ChatPerMinute,
		Bus:               reps.gatewayBus(),
		Registry:          reg,
		Logger:            log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return listenError(cfg.Addr, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// Channels run beside the server; one that cannot start is reported and the others keep running.
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					log.Error("channel crashed", "channel", ch.Name(), "panic", r)
				}
			}()
			// The supervisor retries a channel that cannot start, with backoff, and says why.
			sup.Run(ctx, ch, disp.Handler(ch))
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.ServeAdmin(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("admin socket unavailable; the `citegate user` and `citegate backup` commands need the server stopped", "err", err)
		}
	}()
	go pruneSeen(ctx, st, log)
	if err := reps.start(srv, disp, chans); err != nil {
		return err
	}

	log.Info("citegate listening", "addr", ln.Addr().String(), "public_url", cfg.PublicURL, "model", cr.Agent.ModelName(),
		"search", cfg.Search, "kb_documents", cr.Corpus.Len(), "channels", len(chans))
	login, err := srv.EnsureLocalUser(ctx)
	if err != nil {
		log.Warn("could not prepare the local user's login link", "err", err)
	}
	printSummary(stdout, cfg, ln.Addr().String(), cr, chans, login)
	// Shutdown (SIGTERM/SIGINT cancel ctx), in this order, each step bounded, so the process exits
	// within about 33 s: the HTTP server and its websocket clients (≤ 3 s for close frames, ≤ 5 s
	// for in-flight requests), the channels' inbound side (≤ channelStopWait), then the deferred
	// gateway.Shutdown (agent ≤ 10 s: runs marked CANCELLED; replies ≤ 10 s: every open reply ends
	// with "stopped: server restarting") and the store.
	err = srv.Serve(ctx, ln)
	cancel()
	waitBounded(&wg, channelStopWait, log)
	if errors.Is(err, context.Canceled) || errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// channelStopWait bounds how long serve waits for channels and the admin socket to stop.
const channelStopWait = 5 * time.Second

// waitBounded waits for wg at most d; a channel that does not stop in time is logged and left
// behind, since the process is exiting anyway.
func waitBounded(wg *sync.WaitGroup, d time.Duration, log *slog.Logger) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		log.Warn("channels did not stop in time; shutting down without them", "waited", d)
	}
}

// buildChannels creates the channels whose required keys are present.
func buildChannels(cfg Config, log *slog.Logger) ([]channels.Channel, error) {
	var out []channels.Channel
	c := cfg.Channels
	if c.Feishu.AppID != "" && c.Feishu.AppSecret != "" {
		ch, err := feishu.New(feishu.Config{
			AppID: c.Feishu.AppID, AppSecret: c.Feishu.AppSecret, Mode: c.Feishu.Mode,
			VerificationToken: c.Feishu.VerificationToken, EncryptKey: c.Feishu.EncryptKey,
			BaseURL: c.Feishu.BaseURL, DisableCardKit: c.Feishu.DisableCardKit, Logger: log.With("channel", "feishu"),
		})
		if err != nil {
			return nil, fmt.Errorf("channels.feishu: %w", err)
		}
		out = append(out, ch)
	}
	if c.DingTalk.ClientID != "" && c.DingTalk.ClientSecret != "" {
		ch, err := dingtalk.New(dingtalk.Config{
			ClientID: c.DingTalk.ClientID, ClientSecret: c.DingTalk.ClientSecret, CardTemplateID: c.DingTalk.CardTemplateID,
			CardContentKey: c.DingTalk.CardContentKey, RobotCode: c.DingTalk.RobotCode, BotName: c.DingTalk.BotName,
			APIBaseURL: c.DingTalk.APIBaseURL, StreamBaseURL: c.DingTalk.StreamBaseURL, Logger: log.With("channel", "dingtalk"),
		})
		if err != nil {
			return nil, fmt.Errorf("channels.dingtalk: %w", err)
		}
		out = append(out, ch)
	}
	if w := c.WeChat; w.AppID != "" && w.AppSecret != "" && w.Token != "" {
		ch, err := wechat.New(wechat.Config{
			AppID: w.AppID, AppSecret: w.AppSecret, Token: w.Token, EncodingAESKey: w.EncodingAESKey,
			APIBaseURL: w.APIBaseURL, Logger: log.With("channel", "wechat"),
		})
		if err != nil {
			return nil, fmt.Errorf("channels.wechat: %w", err)
		}
		out = append(out, ch)
	}
	return out, nil
}

// pruneSeen drops expired dedup keys hourly.
func pruneSeen(ctx context.Context, st store.Backend, log *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := st.PruneSeen(ctx); err != nil {
				log.Warn("prune dedup keys", "err", err)
			} else if n > 0 {
				log.Debug("pruned dedup keys", "count", n)
			}
		}
	}
}

// listenError explains a failed listen in terms of what to do about it.
func listenError(addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("cannot listen on %s: the address is already in use (another citegate, or another program); "+
			"stop it or choose another address with --addr HOST:PORT (env CITEGATE_ADDR, file addr)", addr)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("cannot listen on %s: permission denied (ports below 1024 need privileges); "+
			"choose another port with --addr HOST:PORT (env CITEGATE_ADDR), e.g. --addr 127.0.0.1:8080", addr)
	}
	return fmt.Errorf("cannot listen on %s: %w (set the address with --addr HOST:PORT)", addr, err)
}

// printSummary prints the one screen a person starting the server needs: where it is, what it
// runs with, which channels it starts, and how to log in.
func printSummary(w io.Writer, cfg Config, listenAddr string, cr *core, chans []channels.Channel, login string) {
	var b strings.Builder
	row := func(k, format string, a ...any) { fmt.Fprintf(&b, "  %-11s %s\n", k, fmt.Sprintf(format, a...)) }
	b.WriteString("citegate is ready\n\n")
	reach := ""
	if isLoopbackListen(listenAddr) {
		reach = " — this machine only; use --addr 0.0.0.0:PORT and --public-url to serve others"
	}
	row("address", "%s%s", listenAddr, reach)
	row("public URL", "%s", cfg.PublicURL)
	row("store", "%s", cfg.storeName())
	row("model", "%s", cr.Agent.ModelName())
	switch cfg.Search {
	case "searxng":
		row("search", "searxng %s", cfg.SearXNGURL)
	case "tavily":
		row("search", "tavily")
	default:
		kb := cfg.KB
		if kb == "" {
			kb = "bundled sample corpus"
		}
		row("search", "local: %s (%d documents, served at %s/kb/)", kb, cr.Corpus.Len(), cfg.PublicURL)
	}
	if len(chans) == 0 {
		row("channels", "none configured (desktop view only; see --config)")
	}
	for i, ch := range chans {
		k := ""
		if i == 0 {
			k = "channels"
		}
		row(k, "%s: %s", ch.Name(), channelSummary(cfg, ch))
	}
	if login != "" {
		fmt.Fprintf(&b, "\nOpen this one-time login link (valid 15 minutes) to start chatting:\n\n  %s\n\n", login)
		b.WriteString("Another link later: citegate user login local\n")
	} else {
		b.WriteString("\nLog in: citegate user login NAME prints a one-time link (citegate user add NAME creates a user).\n")
	}
	_, _ = io.WriteString(w, b.String())
}

// channelSummary says how a configured channel reaches its platform.
func channelSummary(cfg Config, ch channels.Channel) string {
	desc := "starting"
	if wh, ok := ch.(channels.WebhookChannel); ok {
		for _, path := range slices.Sorted(maps.Keys(wh.Routes())) {
			desc += ", webhook " + cfg.PublicURL + path
		}
	} else {
		desc += " (outbound connection to the platform)"
	}
	return desc
}

func isLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback() || strings.EqualFold(host, "localhost")
}
