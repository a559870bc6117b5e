// Package durable is where Stele's own log files are made durable: every
// fsync of a partition segment, its indexes and the data plane's batch
// store goes through Sync, and every such file created goes through
// Created.
//
// In production builds both are what they say and nothing more. The
// test-only `stelebyzantine` build can keep a sync journal
// (STELE_BYZANTINE=sync-journal=PATH): a line per file created and per
// fsync, naming the file (path and inode) and how many of its bytes the
// fsync covered. After SIGKILLing a broker, a test truncates each file to
// the size its last journal line gives, and so drops every append the
// broker had not fsynced, as a power cut would (test/harness
// LoseUnsynced): a broker must come back from that without losing
// anything it acknowledged or signed. STELE_BYZANTINE=slow-fsync=DURATION
// makes every fsync wait that long first, as on a slow disk, so that more
// writes are caught unsynced.
package durable

import "os"

// Sync fsyncs f.
func Sync(f *os.File) error { return syncFile(f) }

// Created tells the journal that f was just created empty (or truncated).
func Created(f *os.File) { created(f) }
