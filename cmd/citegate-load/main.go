// Command citegate-load drives a running citegate server over its websocket contract (DESIGN §5) and
// reports what a person waiting for an answer would see: completed turns per second and the latency
// of each turn from its chat.send to its run.finished.
//
// Two modes:
//
//   - throughput (default): --sessions N conversations, spread over --conns websocket connections,
//     each sending its next question as soon as the previous answer finished (or at a total --rate),
//     for --duration or until --turns turns completed;
//   - depth: one conversation of --turns turns back to back; reports the median latency of the first
//     20 turns and of the turns past message --after of the session.
//
// It needs a user's access token (`citegate user add loadtest`), or several separated by commas:
// the sessions and connections are then spread over the users. The server sends every frame of a
// user's sessions to each of that user's connections, so one token over 8 connections makes the
// server write (and the generator read) every frame 8 times; the report gives frames per turn over
// all connections and on one connection. The server's per-user chat limit (YAML
// chat_rate_per_minute) must admit the rate asked for, and the connections per user must stay
// within its per-user cap (16).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "citegate-load:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for usage errors, 1 for everything else.
func exitCode(err error) int {
	if _, ok := err.(usageError); ok {
		return 2
	}
	return 1
}

// run parses args, drives the load and writes the report to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if cfg.help {
		return nil
	}
	var rep *Report
	if cfg.mode == "depth" {
		rep, err = runDepth(ctx, cfg)
	} else {
		rep, err = runThroughput(ctx, cfg)
	}
	if err != nil {
		return err
	}
	if cfg.json {
		return rep.writeJSON(stdout)
	}
	rep.writeText(stdout)
	return nil
}
