package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

// replicaSet is what serve adds when the store is PostgreSQL and other `serve` processes may share
// it: the bus carrying live run events and cancels between replicas, and the run leases with their
// reaper. With bbolt (one process) it is nil and its methods do nothing.
type replicaSet struct {
	cfg    Config
	st     store.Backend
	owner  string
	bus    *gateway.PGBus
	order  *gateway.TurnOrder
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newReplicaSet prepares the bus and the leases for a PostgreSQL store; nothing connects yet.
func newReplicaSet(cfg Config, st store.Backend, reg prometheus.Registerer, log *slog.Logger) (*replicaSet, error) {
	if !cfg.usesPostgres() {
		return nil, nil
	}
	o, ok := st.(interface{ Owner() string })
	if !ok || o.Owner() == "" {
		return nil, errors.New("replicas: the PostgreSQL store names no owner for its runs")
	}
	bus, err := gateway.NewPGBus(gateway.PGBusConfig{URL: cfg.Store, Replica: o.Owner(), Registerer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	order, err := gateway.NewTurnOrder(gateway.TurnOrderConfig{Store: st, Owner: o.Owner(), Bus: bus, Registerer: reg, Logger: log})
	if err != nil {
		bus.Close()
		return nil, err
	}
	r := &replicaSet{cfg: cfg, st: st, owner: o.Owner(), bus: bus, order: order, log: log}
	// The bus and the reaper outlive the HTTP server: runs cancelled during shutdown still reach
	// other replicas' clients, and stop ends them after the agent has concluded its runs.
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// gatewayBus is the Bus for gateway.Config: nil (LocalBus) with bbolt.
func (r *replicaSet) gatewayBus() gateway.Bus {
	if r == nil {
		return nil
	}
	return r.bus
}

// turnOrder is the agent's Config.Order: a session's turns start in the order they were stored,
// whichever replica took them. nil with bbolt.
func (r *replicaSet) turnOrder() agent.TurnOrder {
	if r == nil {
		return nil
	}
	return r.order
}

// turnDone is the dispatcher's TurnDone: a chat turn's answer is delivered, the session's next
// turn may start, here or (over the bus) on another replica. nil with bbolt.
func (r *replicaSet) turnDone() func(sessionID string) {
	if r == nil {
		return nil
	}
	return r.order.RunEnded
}

// watch tells the turn order of every desktop run the agent ends, here and (over the bus) on the
// other replicas.
func (r *replicaSet) watch(ag *agent.Agent) {
	if r == nil {
		return
	}
	ag.Subscribe(r.order.AgentEvent)
}

// dispatchAgent makes the dispatcher's /stop reach a run executing on another replica.
func (r *replicaSet) dispatchAgent(ag gateway.DispatchAgent) gateway.DispatchAgent {
	if r == nil {
		return ag
	}
	return gateway.ClusterAgent(ag, r.bus, r.st, r.log)
}

// start runs the bus and the leases: a reaped run of a dead replica is told to this replica's
// desktop clients (and, through the bus, to every other replica's) and to its chat conversation.
func (r *replicaSet) start(srv *gateway.Server, disp *gateway.Dispatcher, chans []channels.Channel) error {
	if r == nil {
		return nil
	}
	leases, err := gateway.NewLeases(gateway.LeasesConfig{Store: r.st, Owner: r.owner, Lease: r.cfg.runLease(), Logger: r.log,
		Interrupted: func(run store.Run) {
			srv.RunInterrupted(run)
			disp.RunInterrupted(run, chans)
		}})
	if err != nil {
		return err
	}
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		if err := srv.RunBus(r.ctx); err != nil {
			r.log.Error("event bus stopped; other replicas' runs no longer reach this replica's clients", "err", err)
		}
	}()
	go func() {
		defer r.wg.Done()
		leases.Run(r.ctx)
	}()
	r.log.Info("replica on a shared PostgreSQL store", "replica", r.owner, "run_lease", r.cfg.runLease().String())
	return nil
}

// stop ends the bus and the leases and closes the bus's connections.
func (r *replicaSet) stop() {
	if r == nil {
		return
	}
	r.cancel()
	r.wg.Wait()
	r.bus.Close()
}
