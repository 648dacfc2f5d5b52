package store_test

import (
	"path/filepath"
	"testing"

	"github.com/citegate/citegate/store"
	"github.com/citegate/citegate/store/storetest"
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
		Dump:   store.BoltDump,
	}
}

func TestConformanceBolt(t *testing.T) { storetest.Run(t, boltHarness()) }

// boltDefaultsHarness opens bbolt with its default options (array freelist synced on every commit),
// for benchmarks against the options Open uses.
func boltDefaultsHarness() storetest.Harness {
	h := boltHarness()
	newDB := h.NewDB
	h.NewDB = func(tb testing.TB) storetest.Opener {
		open := newDB(tb)
		return func(opt store.Options) (store.Backend, error) { return open(store.WithBoltDefaults(opt)) }
	}
	return h
}
