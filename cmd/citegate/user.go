package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

const userUsage = `Usage:
  citegate user add NAME      create a user and print its access token alone on stdout
                              (--operator: the user is an operator from the start)
  citegate user list          list the users with their role (user or operator)
  citegate user token NAME    give NAME a new access token (printed alone on stdout); the old one,
                              NAME's browser sessions and open connections stop working at once
  citegate user revoke NAME   remove NAME's token and browser sessions; history is kept, and
                              "citegate user token NAME" lets them back in
  citegate user login NAME    print a one-time browser login link for NAME (valid 15 minutes)
  citegate user grant-operator NAME
                              make NAME an operator: they may open /operator, review every shared
                              conversation (never an unshared one) and revoke shares; audited
  citegate user revoke-operator NAME
                              take the operator role away from NAME (their chats stay); audited

Each works whether or not serve is running. Flags (e.g. --data DIR, --config FILE) may come before
or after NAME; "citegate user add --help" lists them.
`

// userCmd is one `citegate user` subcommand: what it needs and what it does, once against the
// store directly and once through a running server's admin socket.
type userCmd struct {
	synopsis string
	needName bool
	// operatorFlag registers --operator (user add).
	operatorFlag bool
	direct       func(ctx context.Context, st store.Backend, cfg Config, a userArgs, stdout, stderr io.Writer) error
	viaAdmin     func(ctx context.Context, cfg Config, a userArgs, stdout, stderr io.Writer) error
}

// userArgs is what a user subcommand was given.
type userArgs struct {
	name     string
	operator bool // --operator
	// actor names this command line in the audit log when it changes a role.
	actor store.Actor
}

var userCmds = map[string]userCmd{
	"add": {
		synopsis:     "citegate user add [flags] [--operator] NAME   (prints the new user's access token alone on stdout)",
		needName:     true,
		operatorFlag: true,
		direct: func(ctx context.Context, st store.Backend, _ Config, a userArgs, stdout, stderr io.Writer) error {
			u, tok, err := st.CreateUserRole(ctx, a.name, a.operator, a.actor)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, tok)
			noteOperator(stderr, u.Name, u.Operator)
			return nil
		},
		viaAdmin: func(ctx context.Context, cfg Config, a userArgs, stdout, stderr io.Writer) error {
			u, err := gateway.AdminAddUserRole(ctx, cfg.Data, a.name, a.operator, a.actor.Name)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, u.Token)
			noteOperator(stderr, u.Name, u.Operator)
			return nil
		},
	},
	"grant-operator":  roleCmd(true),
	"revoke-operator": roleCmd(false),
	"list": {
		synopsis: "citegate user list [flags]",
		direct: func(ctx context.Context, st store.Backend, _ Config, _ userArgs, stdout, _ io.Writer) error {
			users, err := st.ListUsers(ctx)
			if err != nil {
				return err
			}
			return printUsers(stdout, users)
		},
		viaAdmin: func(ctx context.Context, cfg Config, _ userArgs, stdout, _ io.Writer) error {
			users, err := gateway.AdminListUsers(ctx, cfg.Data)
			if err != nil {
				return err
			}
			return printUsers(stdout, users)
		},
	},
	"token": {
		synopsis: "citegate user token [flags] NAME   (prints NAME's new access token alone on stdout)",
		needName: true,
		direct: func(ctx context.Context, st store.Backend, cfg Config, a userArgs, stdout, stderr io.Writer) error {
			u, tok, err := st.RotateToken(ctx, a.name)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, tok)
			fmt.Fprintf(stderr, "%s has a new access token; the old one and %s's browser sessions no longer work.\n", u.Name, u.Name)
			closeReplicaConnections(ctx, cfg, u, stderr)
			return nil
		},
		viaAdmin: func(ctx context.Context, cfg Config, a userArgs, stdout, stderr io.Writer) error {
			u, err := gateway.AdminRotateToken(ctx, cfg.Data, a.name)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, u.Token)
			fmt.Fprintf(stderr, "%s has a new access token; the old one, %s's browser sessions and open connections no longer work.\n", u.Name, u.Name)
			return nil
		},
	},
	"revoke": {
		synopsis: "citegate user revoke [flags] NAME",
		needName: true,
		direct: func(ctx context.Context, st store.Backend, cfg Config, a userArgs, stdout, stderr io.Writer) error {
			u, err := st.RevokeUser(ctx, a.name)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "revoked %s: the token and browser sessions no longer work (history kept; `citegate user token %s` lets them back in)\n", u.Name, u.Name)
			closeReplicaConnections(ctx, cfg, u, stderr)
			return nil
		},
		viaAdmin: func(ctx context.Context, cfg Config, a userArgs, stdout, _ io.Writer) error {
			u, err := gateway.AdminRevokeUser(ctx, cfg.Data, a.name)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "revoked %s: the token, browser sessions and open connections no longer work (history kept; `citegate user token %s` lets them back in)\n", u.Name, u.Name)
			return nil
		},
	},
	"login": {
		synopsis: "citegate user login [flags] NAME   (prints a one-time login link alone on stdout)",
		needName: true,
		direct: func(ctx context.Context, st store.Backend, cfg Config, a userArgs, stdout, stderr io.Writer) error {
			u, err := st.UserByName(ctx, a.name)
			if err != nil {
				return err
			}
			code, exp, err := st.CreateLoginCode(ctx, u.ID, store.MaxLoginCodeTTL)
			if err != nil {
				return err
			}
			printLogin(stdout, stderr, u.Name, gateway.LoginURL(cfg.PublicURL, code), exp)
			fmt.Fprintln(stderr, "(citegate serve is not running: start it before the link expires)")
			return nil
		},
		viaAdmin: func(ctx context.Context, cfg Config, a userArgs, stdout, stderr io.Writer) error {
			u, err := gateway.AdminLoginLink(ctx, cfg.Data, a.name)
			if err != nil {
				return err
			}
			printLogin(stdout, stderr, u.Name, u.URL, u.ExpiresAt)
			return nil
		},
	},
}

// roleCmd is `user grant-operator` (grant) or `user revoke-operator`.
func roleCmd(grant bool) userCmd {
	verb := "revoke-operator"
	if grant {
		verb = "grant-operator"
	}
	report := func(stdout io.Writer, console, name string, operator, changed bool) {
		switch {
		case changed && operator:
			fmt.Fprintf(stdout, "%s is now an operator: they review shared conversations at %s (recorded in the audit log)\n", name, console)
		case changed:
			fmt.Fprintf(stdout, "%s is no longer an operator (recorded in the audit log)\n", name)
		case operator:
			fmt.Fprintf(stdout, "%s is already an operator; nothing changed\n", name)
		default:
			fmt.Fprintf(stdout, "%s is not an operator; nothing changed\n", name)
		}
	}
	return userCmd{
		synopsis: "citegate user " + verb + " [flags] NAME",
		needName: true,
		direct: func(ctx context.Context, st store.Backend, cfg Config, a userArgs, stdout, _ io.Writer) error {
			u, changed, err := st.SetOperator(ctx, a.name, grant, a.actor)
			if err != nil {
				return err
			}
			report(stdout, strings.TrimRight(cfg.PublicURL, "/")+"/operator", u.Name, u.Operator, changed)
			return nil
		},
		viaAdmin: func(ctx context.Context, cfg Config, a userArgs, stdout, _ io.Writer) error {
			r, err := gateway.AdminSetOperator(ctx, cfg.Data, a.name, grant, a.actor.Name)
			if err != nil {
				return err
			}
			report(stdout, r.ConsoleURL, r.Name, r.Operator, r.Changed)
			return nil
		},
	}
}

// noteOperator tells on stderr (stdout carries the token alone) that a new user is an operator.
func noteOperator(stderr io.Writer, name string, operator bool) {
	if operator {
		fmt.Fprintf(stderr, "%s is an operator: /operator lists every shared conversation (recorded in the audit log).\n", name)
	}
}

// cliActor names this command line in the audit log: "cli:" and the operating-system account that
// ran it, which is all a local administrator's command can be attributed to.
func cliActor(getenv func(string) string) store.Actor {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = first(getenv("USER"), getenv("LOGNAME"), "uid "+strconv.Itoa(os.Getuid()))
	}
	return store.Actor{Name: "cli:" + name}
}

func printLogin(stdout, stderr io.Writer, name, link string, exp time.Time) {
	fmt.Fprintln(stdout, link)
	fmt.Fprintf(stderr, "One-time login link for %s: it works once, until %s (%s).\n",
		name, exp.Local().Format("15:04:05"), time.Until(exp).Round(time.Minute))
}

func printUsers(w io.Writer, users []store.UserInfo) error {
	if len(users) == 0 {
		fmt.Fprintln(w, "no users yet; create one with: citegate user add NAME")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tROLE\tBROWSER SESSIONS\tCREATED")
	for _, u := range users {
		state := "active"
		if !u.Active {
			state = "revoked"
		}
		role := "user"
		if u.Operator {
			role = "operator"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", u.Name, state, role, u.WebSessions, u.CreatedAt.Local().Format("2006-01-02 15:04"))
	}
	return tw.Flush()
}

func cmdUser(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, userUsage)
		return errUsage
	}
	if isHelpFlag(args[0]) || args[0] == "help" {
		fmt.Fprint(stdout, userUsage)
		return nil
	}
	sub, ok := userCmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "citegate user: unknown subcommand %q\n\n%s", args[0], userUsage)
		return errUsage
	}
	fs := newFlagSet("user "+args[0], sub.synopsis, stderr)
	fv := registerFlags(fs)
	fv.logDefault = "warn"
	var operator bool
	if sub.operatorFlag {
		fs.BoolVar(&operator, "operator", false, "give the new user the operator role (recorded in the audit log)")
	}
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	var name string
	switch {
	case sub.needName && len(pos) != 1:
		fmt.Fprintf(stderr, "citegate user %s: exactly one NAME is required (got %d)\nUsage: %s\n", args[0], len(pos), sub.synopsis)
		return errUsage
	case !sub.needName && len(pos) != 0:
		fmt.Fprintf(stderr, "citegate user %s: unexpected argument %q\n", args[0], pos[0])
		return errUsage
	case sub.needName:
		name = strings.TrimSpace(pos[0])
	}
	cfg, err := loadConfig(fv, getenv)
	if err != nil {
		return err
	}
	a := userArgs{name: name, operator: operator, actor: cliActor(getenv)}
	err = withStoreOrServer(ctx, cfg,
		func(st store.Backend) error { return sub.direct(ctx, st, cfg, a, stdout, stderr) },
		func(ctx context.Context) error { return sub.viaAdmin(ctx, cfg, a, stdout, stderr) })
	return userError(name, err)
}

// closeReplicaConnections asks the replicas serving a PostgreSQL database to close u's open
// websocket connections, which authenticated with the credentials just changed. With bbolt the
// command went through the server itself when one runs (viaAdmin), which closes them. The change
// is made either way: a failure to tell the replicas is a warning, not an error.
func closeReplicaConnections(ctx context.Context, cfg Config, u store.User, stderr io.Writer) {
	if !cfg.usesPostgres() {
		return
	}
	if err := gateway.NotifyCloseUser(ctx, cfg.Store, u.ID); err != nil {
		fmt.Fprintf(stderr, "warning: could not tell running servers to close %s's open connections (they close when the browser reconnects): %v\n", u.Name, err)
	}
}

// withStoreOrServer runs direct on the database when this process can open it, and viaAdmin
// through the running server's admin socket when the server holds it. It never waits on the file
// lock for long.
func withStoreOrServer(ctx context.Context, cfg Config, direct func(store.Backend) error, viaAdmin func(context.Context) error) error {
	if cfg.usesPostgres() {
		// PostgreSQL has no single-process lock: the command talks to the database directly,
		// whether or not servers are running.
		st, err := store.OpenPG(ctx, cfg.Store, store.Options{Logger: newLogger("error", io.Discard), SkipRunRecovery: true})
		if err != nil {
			return fmt.Errorf("open database: %w", err)
		}
		defer st.Close()
		return direct(st)
	}
	st, err := store.Open(cfg.dbPath(), store.Options{Timeout: 300 * time.Millisecond, Logger: newLogger("error", io.Discard)})
	if errors.Is(err, store.ErrLocked) {
		// The server holds the database: go through its admin socket instead of waiting for the lock.
		actx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		err := viaAdmin(actx)
		if errors.Is(err, gateway.ErrNoAdminServer) {
			return fmt.Errorf("%s is in use by another process, but no citegate server answers on its admin socket (%s/%s); "+
				"if serve is still starting, try again in a moment, otherwise stop the process that holds the file",
				cfg.dbPath(), cfg.Data, gateway.AdminSocketName)
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer st.Close()
	return direct(st)
}

// userError turns the store's (or the server's) answer into a sentence a person can act on.
func userError(name string, err error) error {
	var ae *gateway.AdminError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("the name %q is already taken. To log in as %s, run: citegate user login %s "+
			"(or citegate user token %s for a new access token)", name, name, shellQuote(name), shellQuote(name))
	case errors.Is(err, store.ErrRevoked):
		return fmt.Errorf("%s is revoked and cannot log in; give them a new token first: citegate user token %s", name, shellQuote(name))
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("there is no user named %q (see: citegate user list)", name)
	case errors.As(err, &ae):
		return errors.New(ae.Message)
	case errors.Is(err, store.ErrInvalid):
		msg := err.Error()
		if i := strings.LastIndex(msg, store.ErrInvalid.Error()+": "); i >= 0 {
			msg = msg[i+len(store.ErrInvalid.Error())+2:]
		}
		return errors.New(msg)
	}
	return err
}

// shellQuote quotes a name for a command line when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '@' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 127)
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
