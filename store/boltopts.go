package store

import bolt "go.etcd.io/bbolt"

// boltOptions are the bbolt settings Open uses.
//
// FreelistType hashmap: bbolt's default array freelist scans for a run of free pages on every
// allocation, which grows with the file's fragmentation; the hashmap finds one by size. It may hand
// out a page other than the lowest free one, which only changes where records sit in the file.
//
// NoFreelistSync: by default every commit also writes the whole freelist (one or more pages that
// grow with the file) before the meta page. Without it a commit writes only the pages it changed
// and the meta page. This costs no durability: the freelist is derived data (every page that no
// committed tree reaches), and Open after a crash (or after any close, since the freelist was
// never written) rebuilds it by walking the trees from the last valid meta page, which is exactly
// as durable as the data itself. What it costs is time at Open, a walk of every page of the file:
// 0.9 s for a 307 MB file on the development machine (10 ms when the freelist was synced), so about
// 3 s per GB for `serve` and for admin commands that open the file while no server runs. etcd runs
// bbolt with the same two settings; a deployment whose file grows past a few GB belongs on
// PostgreSQL anyway.
//
// A file written with these settings opens with bbolt's defaults too: the meta page says the
// freelist is not synced and bbolt rebuilds it (and writes it again on the first commit).
//
// NoSync stays false: every commit writes its pages and fdatasyncs, then writes the meta page and
// fdatasyncs again. Writes reach bbolt through the group committer (commit.go), which answers a
// caller only after the transaction holding its write returned from Commit, so every acknowledged
// write is on disk when its caller returns; grouping changes how many callers share a commit, not
// what a commit guarantees.
func boltOptions(opt Options) *bolt.Options {
	o := &bolt.Options{Timeout: opt.Timeout}
	if !opt.boltDefaults {
		o.FreelistType = bolt.FreelistMapType
		o.NoFreelistSync = true
	}
	return o
}
