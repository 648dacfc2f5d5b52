package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

const backupSynopsis = `citegate backup [flags] FILE

Writes a consistent copy of the database (bbolt's Tx.WriteTo, one read transaction) to FILE,
while serve keeps running (through its admin socket) or directly when it is stopped. The copy
is written next to FILE and renamed into place once complete.

Restore: stop serve, copy FILE to <data>/citegate.db (mode 0600), start serve.`

func cmdBackup(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("backup", backupSynopsis, stderr)
	fv := registerFlags(fs)
	fv.logDefault = "warn"
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "citegate backup: exactly one FILE is required (got %d)\nUsage: citegate backup [flags] FILE\n", len(pos))
		return errUsage
	}
	cfg, err := loadConfig(fv, getenv)
	if err != nil {
		return err
	}
	dst, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	if db, err := filepath.Abs(cfg.dbPath()); err == nil && db == dst {
		return fmt.Errorf("%s is the database itself; write the backup somewhere else", dst)
	}
	var n int64
	err = withStoreOrServer(ctx, cfg,
		func(st store.Backend) error {
			fb, ok := st.(store.FileBackup)
			if !ok {
				return store.ErrNoFileBackup
			}
			var err error
			n, err = fb.BackupFile(ctx, dst)
			return err
		},
		func(ctx context.Context) error {
			var err error
			n, err = writeFileAtomic(dst, func(w io.Writer) (int64, error) { return gateway.AdminBackup(ctx, cfg.Data, w) })
			return err
		})
	if err != nil {
		return fmt.Errorf("backup to %s: %w", dst, err)
	}
	fmt.Fprintf(stdout, "wrote %s (%d bytes), a consistent copy of %s\n", dst, n, cfg.dbPath())
	return nil
}

// writeFileAtomic writes path (mode 0600) through a temporary file in the same directory, renamed
// into place only when write succeeded and the data is synced.
func writeFileAtomic(path string, write func(io.Writer) (int64, error)) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	n, err := write(f)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return n, os.Rename(tmp, path)
}
