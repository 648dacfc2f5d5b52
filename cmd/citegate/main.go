// Command citegate is a chat-channel bot gateway with verified citations: one binary that connects an
// AI agent to Feishu/Lark, DingTalk, WeChat and a desktop web view, and shows only citations that point
// at sources the run really retrieved.
//
// Usage:
//
//	citegate [serve] [flags]          run the gateway (default)
//	citegate ask [flags] "question"   answer one question on the command line
//	citegate user add NAME            create a desktop/API user and print its token
//	citegate user list                list the users
//	citegate user token NAME          give a user a new token (the old one stops working)
//	citegate user revoke NAME         remove a user's token and browser sessions
//	citegate user login NAME          print a one-time login link
//	citegate user grant-operator NAME make a user an operator (the /operator console; audited)
//	citegate user revoke-operator NAME take the operator role away (audited)
//	citegate backup FILE              write a consistent copy of the database
//	citegate version                  print the version
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
  citegate user add NAME            create a user and print its access token alone on stdout
                                    (--operator: an operator, who reviews shared conversations)
  citegate user list                list the users, whether they can log in, their browser sessions
  citegate user token NAME          give NAME a new access token; the old one, NAME's browser
                                    sessions and open connections stop working at once
  citegate user revoke NAME         remove NAME's token and browser sessions (history is kept)
  citegate user login NAME          print a one-time browser login link for NAME (15 minutes)
  citegate user grant-operator NAME make NAME an operator: the /operator console lists every shared
                                    conversation (never an unshared one); recorded in the audit log
  citegate user revoke-operator NAME
                                    take the operator role away from NAME; recorded in the audit log
  citegate backup FILE              write a consistent copy of the database to FILE
  citegate store copy --to postgres://…
                                    copy the bbolt database in --data into PostgreSQL (idempotent,
                                    resumable, verified by counts and checksums); serve stopped
  citegate version                  print the version and source revision
  citegate help                     this text

The user and backup commands work whether or not serve is running (they go through the
server's admin socket in the data directory when it holds the database). With --store
postgres://… (or CITEGATE_STORE) every command uses PostgreSQL, shared by any number of serve
processes, and admin commands talk to the database directly.
Flags may come before or after the arguments. Precedence: flags > environment > --config file > defaults.
Run "citegate <command> --help" for the flags of a command.
`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cmd := "serve"
	if len(args) > 0 {
		switch {
		case isHelpFlag(args[0]):
			fmt.Fprint(stdout, usage)
			return 0
		case !strings.HasPrefix(args[0], "-"):
			cmd, args = args[0], args[1:]
		}
	}
	var err error
	switch cmd {
	case "serve":
		err = cmdServe(ctx, args, stdout, stderr, getenv)
	case "ask":
		err = cmdAsk(ctx, args, stdout, stderr, getenv)
	case "user":
		err = cmdUser(ctx, args, stdout, stderr, getenv)
	case "backup":
		err = cmdBackup(ctx, args, stdout, stderr, getenv)
	case "store":
		err = cmdStore(ctx, args, stdout, stderr, getenv)
	case "version":
		err = cmdVersion(args, stdout, stderr)
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

func isHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

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

// parse parses flags that may come before, between or after the positional arguments
// (`user add NAME --data DIR`), and returns the positional arguments. Everything after "--" is
// positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// newLogger writes text logs to w at level (validated by Config.validate).
func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
