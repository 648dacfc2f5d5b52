package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"
)

// usageError is a bad command line; main exits 2 for it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// config is the parsed command line.
type config struct {
	url         string   // http(s)://host:port of the server
	tokens      []string // one per user; sessions and connections are spread over them
	mode        string   // throughput | depth
	sessions    int
	conns       int
	turns       int           // throughput: stop after this many completed turns (0: no bound); depth: the session's turns
	duration    time.Duration // throughput: how long to measure
	warmup      time.Duration // throughput: turns sent before this are not counted
	rate        float64       // throughput: total turns/s (0: back to back)
	after       int           // depth: "past message M"
	firstTurns  int           // depth: how many first turns form the baseline
	texts       []string      // questions, used in turn
	turnTimeout time.Duration
	serverPID   int // when > 0, server CPU per turn from /proc/<pid>/stat
	json        bool
	help        bool
}

// defaultTexts are questions the bundled corpus answers, so the offline model searches and cites.
var defaultTexts = []string{
	"报销多久能到账？",
	"How do I reset my password?",
	"电子发票抬头写错了怎么办？",
	"VPN 连不上怎么办？",
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("citegate-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "the server's base URL (the websocket is <url>/ws)")
	token := fs.String("token", "", "a user's access token, or several separated by commas to spread the sessions over several users (default: $CITEGATE_LOAD_TOKEN)")
	fs.StringVar(&c.mode, "mode", "throughput", "throughput (many sessions) or depth (one session, many turns)")
	fs.IntVar(&c.sessions, "sessions", 64, "throughput: concurrent sessions")
	fs.IntVar(&c.conns, "conns", 0, "throughput: websocket connections carrying the sessions (default min(sessions, 8), at least one per token; the server allows 16 per user, and sends every frame of a user's sessions to each of the user's connections)")
	fs.IntVar(&c.turns, "turns", 0, "throughput: stop after this many completed turns (0: only --duration); depth: turns of the session (default 1,500)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "throughput: measuring time after the warm-up")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "throughput: turns sent during the first WARMUP are not counted")
	fs.Float64Var(&c.rate, "rate", 0, "throughput: total turns per second over all sessions (0: each session sends its next turn as soon as the last finished)")
	fs.IntVar(&c.after, "after", 5000, "depth: compare the turns past this message of the session with the first turns")
	fs.IntVar(&c.firstTurns, "first", 20, "depth: how many first turns form the baseline")
	text := fs.String("text", "", "the question(s) to send, separated by '|' (default: four questions the bundled corpus answers)")
	fs.DurationVar(&c.turnTimeout, "turn-timeout", time.Minute, "a turn without run.finished after this long counts as an error")
	fs.IntVar(&c.serverPID, "server-pid", 0, "Linux: the server's process id; reports its CPU time per completed turn")
	fs.BoolVar(&c.json, "json", false, "print the report as one JSON object")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.help = true
			return c, nil
		}
		return c, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return c, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *token == "" {
		*token = os.Getenv("CITEGATE_LOAD_TOKEN")
	}
	for _, t := range strings.Split(*token, ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.tokens = append(c.tokens, t)
		}
	}
	if len(c.tokens) == 0 {
		return c, usageError{"--token (or CITEGATE_LOAD_TOKEN) is required: create one with `citegate user add loadtest`"}
	}
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, usageError{fmt.Sprintf("--url %q: want http://host:port or https://host:port", c.url)}
	}
	switch c.mode {
	case "throughput":
		if c.sessions <= 0 {
			return c, usageError{"--sessions must be positive"}
		}
		c.tokens = c.tokens[:min(len(c.tokens), c.sessions)] // a user without a session needs no connection
		if c.conns <= 0 {
			c.conns = min(c.sessions, 8)
		}
		c.conns = min(max(c.conns, len(c.tokens)), c.sessions)
		if perUser := (c.conns + len(c.tokens) - 1) / len(c.tokens); perUser > 16 {
			return c, usageError{fmt.Sprintf("--conns %d over %d user(s) is %d connections per user; the server allows 16: give more tokens", c.conns, len(c.tokens), perUser)}
		}
		if c.duration <= 0 && c.turns <= 0 {
			return c, usageError{"give --duration or --turns"}
		}
		if c.rate < 0 || c.warmup < 0 {
			return c, usageError{"--rate and --warmup must not be negative"}
		}
	case "depth":
		if c.turns <= 0 {
			c.turns = 1500
		}
		if c.firstTurns <= 0 || c.firstTurns > c.turns {
			return c, usageError{"--first must be between 1 and --turns"}
		}
		c.sessions, c.conns = 1, 1
		c.tokens = c.tokens[:1]
	default:
		return c, usageError{fmt.Sprintf("--mode %q: want throughput or depth", c.mode)}
	}
	if c.turnTimeout <= 0 {
		return c, usageError{"--turn-timeout must be positive"}
	}
	if *text != "" {
		for _, t := range strings.Split(*text, "|") {
			if t = strings.TrimSpace(t); t != "" {
				c.texts = append(c.texts, t)
			}
		}
	}
	if len(c.texts) == 0 {
		c.texts = defaultTexts
	}
	return c, nil
}

// wsURL is the websocket address of the server at base.
func wsURL(base string) string {
	u, _ := url.Parse(base) // checked by parseFlags
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/ws"
	return u.String()
}
