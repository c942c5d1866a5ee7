// Package loadbalance chooses the exception-table entries of a volume's
// hybrid metadata index (package hybridindex) from statistics the meta
// partitions report: FalconFS's statistical load balancing (§4.2.2). The
// master runs it; it is pure (no I/O, no clock, no goroutines) and
// deterministic, so a replicated master can run it on any replica.
//
// # What meta partitions report
//
// Each MP sends an MPStats, all counts taken under one exception-table
// version (MPStats.TableVersion):
//
//   - Inodes: its number of records.
//   - Top: its k most frequent names among records placed by filename
//     hashing (names without an entry), with their counts. FalconFS uses
//     k = number of MPs. All records of a hashed name live on one MP, so
//     these are the names' volume-wide counts.
//   - Exceptions: for each name in the exception table, its number of
//     records on this MP. Shrink needs this to predict where the records of
//     a removed entry go; an MP keeps an exact counter per entry (the table
//     is small) and updates it on create, unlink and rename.
//
// Counts may be lower bounds (an approximate heavy-hitter summary such as
// Space-Saving reports count − error) but not overestimates.
//
// # The master's loop
//
//  1. Collect MPStats from exactly the MPs that own slots (a new MP gets
//     slots from hybridindex.Rebalance first), all at the current table
//     version; ErrStaleStats means wait for fresh ones.
//  2. Plan. If it returns changes: Apply them to the table in one
//     replicated command, push the table to every MP, migrate the records
//     of the changed names, and go to 1. Plan's predictions assume
//     path-walk spreads evenly, so another round may be needed.
//  3. Periodically, on a balanced volume, Shrink, and apply and migrate
//     likewise.
//
// Plan adds an entry only while some MP is above (1 + ε) × the mean, and
// Shrink removes one only if the receiving MP stays within (1 + ε/2) × the
// mean, so the two do not undo each other's work.
//
// # Results on synthetic namespaces
//
// docs/loadbalance.md has the FalconFS Table 3 analogue produced by
// TestBalanceNamespaces: uniform names and dataset-like trees need no
// entry, a name in 5% of files needs one path-walk entry, a
// Linux-source-like tree a few path-walk and some override entries, and
// 100 distinct names on 64 MPs a path-walk entry per name, the bound of
// FalconFS Appendix A.1 for namespaces with O(N) distinct names.
package loadbalance
