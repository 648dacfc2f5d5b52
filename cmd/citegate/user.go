package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

func cmdUser(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || args[0] != "add" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintln(stderr, "Usage: citegate user add [flags] NAME")
			return nil
		}
		fmt.Fprintln(stderr, "Usage: citegate user add [flags] NAME")
		return errUsage
	}
	fs := newFlagSet("user add", "citegate user add [flags] NAME   (prints the new user's access token alone on stdout)", stderr)
	fv := registerFlags(fs)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "citegate user add: exactly one NAME is required")
		return errUsage
	}
	name := fs.Arg(0)
	cfg, err := loadConfig(fv, getenv)
	if err != nil {
		return err
	}
	log := newLogger(first(fv.logLevel, "warn"), stderr)

	st, err := openStore(cfg, log, 300*time.Millisecond)
	if errors.Is(err, store.ErrLocked) {
		// The server holds the database: go through its admin socket instead of waiting for the lock.
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		token, aerr := gateway.AdminAddUser(ctx, cfg.Data, name)
		if aerr != nil {
			return fmt.Errorf("the database is held by a running server and its admin socket failed: %w", aerr)
		}
		fmt.Fprintln(stdout, token)
		return nil
	}
	if err != nil {
		return err
	}
	defer st.Close()
	_, token, err := st.CreateUser(ctx, name)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	return nil
}
