package store_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/citegate/citegate/store"
	"github.com/citegate/citegate/store/storetest"
	"github.com/stretchr/testify/require"
)

// boltHarness runs the conformance suite on bbolt files in temporary directories.
func boltHarness() storetest.Harness {
	return storetest.Harness{
		NewDB: func(tb testing.TB) storetest.Opener {
			path := filepath.Join(tb.TempDir(), "citegate.db")
			return func(opt store.Options) (store.Backend, error) { return store.Open(path, opt) }
		},
		Check:  store.CheckBolt,
		Stored: store.BoltStored,
		Dump: func(tb testing.TB, s store.Backend) []byte {
			var buf bytes.Buffer
			_, err := s.(*store.Store).Backup(context.Background(), &buf)
			require.NoError(tb, err)
			return buf.Bytes()
		},
	}
}

func TestConformanceBolt(t *testing.T) { storetest.Run(t, boltHarness()) }
