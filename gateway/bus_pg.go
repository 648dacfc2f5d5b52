package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBusChannel is the PostgreSQL notification channel the replicas of one database share.
const DefaultBusChannel = "citegate_bus"

// publishRetries bounds how often one batch of packets is retried while the database is away;
// after that the batch is dropped (receivers see a gap) so that newer events are not held behind
// it.
const publishRetries = 3

// PGBusConfig configures a PGBus.
type PGBusConfig struct {
	// URL is the PostgreSQL connection URL (the same database as the store).
	URL string
	// Replica names this process among the replicas; it must be unique per process start (a
	// restarted process is a new replica). Empty → a random one.
	Replica string
	// Channel is the notification channel; default DefaultBusChannel.
	Channel string
	// Registerer receives the bus metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
}

// PGBus is the Bus of several replicas on one PostgreSQL database: events and cancel requests
// travel as NOTIFY payloads on one channel that every replica LISTENs to (wire format in
// bus_wire.go). Publishing never blocks a run: events wait in a bounded outbox, coalesced, while
// one goroutine sends them in order.
type PGBus struct {
	*packetBus
	cfg     PGBusConfig
	connCfg *pgx.ConnConfig
	pool    *pgxpool.Pool
}

// NewPGBus checks the URL and prepares the bus; nothing connects before Run.
func NewPGBus(cfg PGBusConfig) (*PGBus, error) {
	if cfg.URL == "" {
		return nil, errors.New("gateway: bus: a PostgreSQL URL is required")
	}
	connCfg, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("gateway: bus: %w", err)
	}
	if cfg.Channel == "" {
		cfg.Channel = DefaultBusChannel
		// Notification channels are database-wide while tables follow search_path: deployments in
		// different schemas of one database get channels of their own.
		if sp := connCfg.RuntimeParams["search_path"]; sp != "" {
			sum := sha256.Sum256([]byte(sp))
			cfg.Channel += "_" + hex.EncodeToString(sum[:6])
		}
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("gateway: bus: %w", err)
	}
	// One publisher sends one batch at a time; a second connection only helps while the first
	// is being replaced.
	poolCfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg)
	if err != nil {
		return nil, fmt.Errorf("gateway: bus: %w", err)
	}
	b := &PGBus{cfg: cfg, connCfg: connCfg, pool: pool}
	b.packetBus, err = newPacketBus(cfg.Replica, b, cfg.Registerer, cfg.Logger, cfg.Now)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}

// Close releases the publishing connections. Call it after Run has returned.
func (b *PGBus) Close() { b.pool.Close() }

// listen LISTENs on the channel (reconnecting after a second when the connection drops) and hands
// every payload to deliver until ctx ends.
func (b *PGBus) listen(ctx context.Context, deliver func([]byte), ready func(bool)) error {
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, b.connCfg.Copy())
		},
		LogError: func(ctx context.Context, err error) {
			ready(false)
			if ctx.Err() == nil {
				b.log.Warn("event bus: listening connection failed; reconnecting", "err", err)
			}
		},
		ReconnectDelay: time.Second,
	}
	l.Handle(b.cfg.Channel, &pgListenHandler{deliver: deliver, ready: ready})
	return l.Listen(ctx)
}

// pgListenHandler hands notifications to the bus.
type pgListenHandler struct {
	deliver func([]byte)
	ready   func(bool)
}

// HandleBacklog runs once LISTEN is in place on a (new) connection: from here on nothing
// published is missed.
func (lh *pgListenHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	lh.ready(true)
	return nil
}

func (lh *pgListenHandler) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	lh.deliver([]byte(n.Payload))
	return nil
}

// send issues one NOTIFY per packet in a single round trip; each is its own transaction, committed
// in order on one connection, so receivers see them in this order.
func (b *PGBus) send(ctx context.Context, packets [][]byte) error {
	batch := &pgx.Batch{}
	for _, p := range packets {
		batch.Queue("SELECT pg_notify($1, $2)", b.cfg.Channel, string(p))
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return b.pool.SendBatch(sctx, batch).Close()
}

// NewReplicaID returns a new replica id, unique per process start: 12 random url-safe characters.
func NewReplicaID() string {
	var b [9]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error since Go 1.24.
	return base64.RawURLEncoding.EncodeToString(b[:])
}
