package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/citegate/citegate/store"
)

const storeSynopsis = `citegate store copy --to postgres://… [flags]

Copies the bbolt database in --data into PostgreSQL and verifies the copy: every record kind is
counted and checksummed on both sides and a short report is printed. The copy is idempotent (run
it twice, nothing is duplicated) and resumable (an interrupted copy goes on where it stopped when
run again). It needs the bbolt file to itself: stop citegate serve first. The target database may
be empty or hold an earlier run of this copy; then start serve with --store postgres://….`

func cmdStore(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		fmt.Fprintln(stdout, storeSynopsis)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	if args[0] != "copy" {
		fmt.Fprintf(stderr, "citegate store: unknown subcommand %q\nUsage: %s\n", args[0], "citegate store copy --to postgres://…")
		return errUsage
	}
	fs := newFlagSet("store copy", storeSynopsis, stderr)
	fv := registerFlags(fs)
	fv.logDefault = "warn"
	var to string
	var batch int
	fs.StringVar(&to, "to", "", "target PostgreSQL URL (postgres://…); default CITEGATE_STORE")
	fs.IntVar(&batch, "batch", 500, "records per transaction")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fmt.Fprintf(stderr, "citegate store copy: unexpected argument %q\n", pos[0])
		return errUsage
	}
	cfg, err := loadConfig(fv, getenv)
	if err != nil {
		return err
	}
	if to == "" {
		to = cfg.Store
	}
	if !store.IsPostgresURL(to) {
		fmt.Fprintln(stderr, "citegate store copy: --to postgres://… is required (or CITEGATE_STORE)")
		return errUsage
	}
	return storeCopy(ctx, cfg.dbPath(), to, store.CopyOptions{Batch: batch}, stdout)
}

// storeCopy opens both databases and runs the copy; opt lets tests interrupt it.
func storeCopy(ctx context.Context, boltPath, to string, opt store.CopyOptions, stdout io.Writer) error {
	src, err := store.Open(boltPath, store.Options{Timeout: 500 * time.Millisecond})
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("%s is in use by a running citegate serve: stop it first, then copy "+
			"(the copy needs the bbolt file to itself so that nothing is written while it reads)", boltPath)
	}
	if err != nil {
		return fmt.Errorf("open the bbolt database: %w", err)
	}
	defer src.Close()
	// The copy must not judge the target's runs: servers on PostgreSQL may already be running.
	dst, err := store.OpenPG(ctx, to, store.Options{SkipRunRecovery: true})
	if err != nil {
		return fmt.Errorf("open the PostgreSQL database: %w", err)
	}
	defer dst.Close()
	fmt.Fprintf(stdout, "copying %s → %s\n", boltPath, dst)
	rep, err := store.CopyToPG(ctx, src, dst, opt)
	printCopyReport(stdout, rep)
	if err != nil {
		if errors.Is(err, store.ErrCopyMismatch) {
			return fmt.Errorf("%w: the target holds records that differ from the source (a different database?); nothing was overwritten", err)
		}
		return fmt.Errorf("%w (run the same command again to resume)", err)
	}
	fmt.Fprintln(stdout, "verified: every record kind has the same count and checksum on both sides")
	return nil
}

func printCopyReport(w io.Writer, rep store.CopyReport) {
	if len(rep.Kinds) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tsource\tinserted\ttarget\tchecksum\t")
	for _, k := range rep.Kinds {
		state := "ok"
		if !k.Match {
			state = "MISMATCH"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s %s\t\n", k.Kind, k.Source, k.Inserted, k.Target, k.Checksum, state)
	}
	_ = tw.Flush()
}
