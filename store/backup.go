package store

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Backup writes a consistent copy of the whole database to w and returns the bytes written. It runs
// in one read transaction (bbolt's Tx.WriteTo), so writers go on while it copies and the copy is the
// database as of the transaction's start: a file that opens as a bbolt database on its own.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	return s.BackupWith(ctx, func(int64) (io.Writer, error) { return w, nil })
}

// BackupWith is Backup for writers that need the copy's size before the first byte (an HTTP
// response's Content-Length, so the receiver can tell a complete copy from a cut one): open is
// called inside the read transaction with the size of the copy about to be written.
func (s *Store) BackupWith(ctx context.Context, open func(size int64) (io.Writer, error)) (int64, error) {
	var n int64
	err := s.view(ctx, "backup", func(tx *bolt.Tx) error {
		w, err := open(tx.Size())
		if err != nil {
			return err
		}
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// BackupFile writes a consistent copy of the database to path (mode 0600). The copy goes to a
// temporary file next to path first and is renamed into place once it is complete and synced, so
// path never holds half a backup. An existing file at path is replaced.
func (s *Store) BackupFile(ctx context.Context, path string) (int64, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	n, err := s.Backup(ctx, f)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("store: backup to %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	return n, nil
}
