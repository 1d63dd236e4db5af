// PowerCutVfs: an SQLite VFS for tests that models a disk with a volatile
// write cache, so that a test can cut the power and see what survives. It
// wraps SQLite's "unix" VFS and is registered under kPowerCutVfs, never as
// the default: a test opens the file through it, cuts, then "reboots" by
// opening the same file with the default VFS. There is one simulated machine
// per process; every function here is thread-safe.
#ifndef XL_TESTS_SERVER_POWER_CUT_VFS_H_
#define XL_TESTS_SERVER_POWER_CUT_VFS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace xl::store::power_cut {

inline constexpr char kPowerCutVfs[] = "xl-power-cut";

// Registers the VFS under kPowerCutVfs (once; later calls do nothing).
// Returns FailedPrecondition when SQLite has no "unix" VFS to wrap.
absl::Status RegisterPowerCutVfs();

// Cuts the power now: every write, truncate, sync, read or delete through
// the VFS fails with an SQLITE_IOERR code from then on, and every write not
// yet synced is lost, except that each unsynced 4 KiB sector reaches the
// disk anyway with probability `landed_fraction` (a cache writes back in any
// order; `seed` picks which). Does nothing when the power is already off.
void PowerCut(double landed_fraction = 0, uint64_t seed = 1);

// Arms a cut at the start of the `ops`-th write, truncate or sync (counted
// from this call) on a durable file: that operation fails, as if the power
// went just before it. Resets the counters that Stats() returns.
void PowerCutAfter(int64_t ops, double landed_fraction = 0, uint64_t seed = 1);

// Waits at most `timeout` for the power to be off; returns whether it is.
bool WaitForPowerCut(absl::Duration timeout);

// Powers the machine on again (a reboot): forgets what the cache held,
// removes the -shm file of every database opened (shared memory does not
// survive a reboot; SQLite rebuilds it from the WAL) and disarms the cut.
// Call it once every connection opened before the cut has been closed;
// file handles opened before it fail every I/O even after it.
void Reset();

struct PowerCutStats {
  int64_t ops = 0;           // writes, truncates and syncs on durable files
  int64_t syncs = 0;         // syncs that reached the disk
  int64_t db_syncs = 0;      // of them, syncs of a main database file
  int64_t lost_bytes = 0;    // bytes of unsynced sectors the cut dropped
  int64_t landed_bytes = 0;  // of unsynced sectors that landed anyway
};
// Counters since the last PowerCutAfter() or Reset().
PowerCutStats Stats();

}  // namespace xl::store::power_cut

#endif  // XL_TESTS_SERVER_POWER_CUT_VFS_H_
