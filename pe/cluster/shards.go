package cluster

import cmap "github.com/orcaman/concurrent-map"

// protoactor-go's process registry keeps 1,024 buckets of concurrent-map's
// maps, each made of SHARD_COUNT shards (32 by default): 32,768 Go maps,
// 3 MB of every process's heap (a third of what a process of a small job
// holds live), kept for the lookups of actors a process never has more
// than a few of. One shard a bucket is as fast for them. Set before any
// goroutine runs (package initialization), so no actor system reads it
// while it changes.
func init() { cmap.SHARD_COUNT = 1 }
