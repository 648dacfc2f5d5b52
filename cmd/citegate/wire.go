package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/agent/openaimodel"
	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/wechat"
	"github.com/citegate/citegate/store"
)

// core is the agent side of citegate, shared by serve and ask.
type core struct {
	Corpus  *tools.Corpus
	Fetcher *tools.Fetcher
	Agent   *agent.Agent
}

// buildCore assembles search, fetch and the model from the configuration.
// order keeps a session's turns in order across replicas (nil: one process).
func buildCore(c Config, st agent.Store, order agent.TurnOrder, log *slog.Logger) (*core, error) {
	corpus, err := tools.LoadCorpus(c.KB, c.PublicURL)
	if err != nil {
		return nil, fmt.Errorf("knowledge corpus: %w", err)
	}
	for _, f := range corpus.Skipped {
		log.Warn("knowledge corpus: skipping a document without text", "file", f)
	}
	fetcher, err := tools.NewFetcher(tools.FetchOptions{Allow: splitList(c.FetchAllow), Logger: log}, corpus)
	if err != nil {
		return nil, fmt.Errorf("--fetch-allow: %w", err)
	}
	var searcher tools.Searcher
	client := &http.Client{Timeout: 20 * time.Second}
	switch c.Search {
	case "searxng":
		searcher = &tools.SearXNG{BaseURL: c.SearXNGURL, Client: client}
	case "tavily":
		searcher = &tools.Tavily{APIKey: c.TavilyAPIKey, Client: client}
	default:
		searcher = corpus
	}
	var model agent.Model
	if c.LLM.BaseURL != "" {
		model, err = openaimodel.New(openaimodel.Config{BaseURL: c.LLM.BaseURL, Model: c.LLM.Model, APIKey: c.LLM.APIKey, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	} else {
		model = extractive.New()
	}
	ag, err := agent.New(agent.Config{
		Store:     st,
		Model:     model,
		Tools:     []agent.Tool{tools.NewWebSearch(searcher, log), tools.NewOpenWebPage(fetcher)},
		MaxRounds: c.MaxRounds,
		Logger:    log,
		Lang:      c.Lang,
		Order:     order,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return &core{Corpus: corpus, Fetcher: fetcher, Agent: ag}, nil
}

// openStore opens the database with a short lock wait and turns a held lock into advice.
func openStore(c Config, log *slog.Logger, wait time.Duration) (store.Backend, error) {
	var (
		st  store.Backend
		err error
	)
	if c.usesPostgres() {
		// No file lock to wait for: any number of processes share the database.
		st, err = store.OpenPG(context.Background(), c.Store, store.Options{Logger: log, RunLease: c.runLease()})
	} else {
		st, err = store.Open(c.dbPath(), store.Options{Timeout: wait, Logger: log})
	}
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return nil, err
		}
		return nil, fmt.Errorf("open database: %w", err)
	}
	if n := st.RecoveredRuns(); n > 0 {
		log.Warn("runs interrupted by an earlier stop were marked FAILED", "count", n)
	}
	return st, nil
}

// closeAgent stops the agent within a bounded time.
func closeAgent(ag *agent.Agent, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ag.Close(ctx); err != nil {
		log.Warn("agent did not stop cleanly", "err", err)
	}
}

// useStoreForReplays gives webhook channels that check request freshness the database as their
// replay cache, so a captured request cannot be replayed after a restart.
func useStoreForReplays(chans []channels.Channel, st store.Backend) {
	for _, ch := range chans {
		if wc, ok := ch.(*wechat.Channel); ok {
			wc.UseReplayGuard(st)
		}
	}
}

// channelSupervisor keeps the channels started (retrying with backoff) and tracks their states for
// /readyz and the metrics.
func channelSupervisor(chans []channels.Channel, log *slog.Logger) *channels.Supervisor {
	sup := channels.NewSupervisor(channels.SupervisorConfig{Logger: log})
	for _, ch := range chans {
		sup.Register(ch)
	}
	return sup
}
