// Command citegate is a chat-channel bot gateway with verified citations: one binary that connects an
// AI agent to Feishu/Lark, DingTalk, WeChat and a desktop web view, and shows only citations that point
// at sources the run really retrieved.
//
// Usage:
//
//	citegate [serve] [flags]        run the gateway (default)
//	citegate ask [flags] "question" answer one question on the command line
//	citegate user add [flags] NAME  create a desktop/API user and print its token
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

const usage = `citegate — chat-channel bot gateway with verified citations

Usage:
  citegate [serve] [flags]          run the gateway (desktop view, API, channels)
  citegate ask [flags] "question"   answer one question and print it with its verified sources
  citegate user add [flags] NAME    create a user and print its access token (works while serve runs)

Run "citegate <command> --help" for the flags of a command.
`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = cmdServe(ctx, args, stdout, stderr, getenv)
	case "ask":
		err = cmdAsk(ctx, args, stdout, stderr, getenv)
	case "user":
		err = cmdUser(ctx, args, stdout, stderr, getenv)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "citegate: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "citegate %s: %v\n", cmd, err)
		return 1
	}
}

// errUsage marks an error already explained to the user together with the usage text.
var errUsage = errors.New("usage")

// newFlagSet returns a flag set that prints its usage to stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
