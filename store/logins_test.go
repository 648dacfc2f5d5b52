package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackupWhileWriting copies the database while writers keep going, then opens the copy on its
// own: it must be a consistent bbolt file holding at least everything written before the backup.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for i := range 50 {
		_, _, err := s.CreateUser(ctx, fmt.Sprintf("before-%d", i))
		require.NoError(t, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := s.CreateUser(ctx, fmt.Sprintf("during-%d", i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	path := filepath.Join(t.TempDir(), "backup.db")
	n, err := s.BackupFile(ctx, path)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	assert.Positive(t, n)

	cp := openAt(t, path, nil)
	checkConsistency(t, cp)
	for i := range 50 {
		_, err := cp.UserByName(ctx, fmt.Sprintf("before-%d", i))
		require.NoError(t, err)
	}
}
