#include "tests/server/power_cut_vfs.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

// What a real disk does, and what this model keeps of it:
//
// A disk with a volatile write cache acknowledges a write once the data is
// in its RAM; the data reaches the platter (or flash) later, in any order,
// and only a flush (fsync) promises that what was written before it is
// durable. When the power goes, whatever the cache held is gone. The page
// cache of the OS behaves the same way on a power cut, which is why killing
// the process (SIGKILL) proves nothing about fsync.
//
// The model: every durable file (main database, rollback journal, WAL) has
// one cache, shared by all handles on that path as the page cache is shared
// by all file descriptors of an inode. xWrite and xTruncate change only the
// cache; xRead and xFileSize see the cache over the real file, so the process
// reads its own writes. xSync writes the cache through to the real file and
// fsyncs it; only then is the data "on the disk". PowerCut() drops every
// cache (or lands a random share of its sectors, for torn write-back) and
// makes every later I/O fail: the machine is off.
//
// Simplifications, each on the side of losing less than a real disk may:
// - Creating and deleting files is durable at once (a real file system
//   needs an fsync of the directory). SQLite in WAL mode keeps its WAL file
//   between commits, so no commit depends on a deletion.
// - A sync is atomic with respect to a cut: a cut waits for a sync in
//   progress.
// - Nothing is written back before a sync or the cut. At the cut, torn
//   write-back (landed_fraction) lands a random subset of the unsynced
//   sectors, each whole and in its latest version: no sector is half
//   written, and an older version of a sector written twice never lands.
// - The -shm file passes through to the real VFS: it is shared memory, not
//   data, and SQLite rebuilds it from the WAL. Reset() deletes it, as a
//   reboot loses it.
// - Temporary files (no name, or not a database, journal or WAL) pass
//   through; nothing durable lives in them.
namespace xl::store::power_cut {
namespace {

// The unit of the cache and of torn write-back; also the xSectorSize.
constexpr int64_t kSector = 4096;
constexpr int64_t kNoTruncate = std::numeric_limits<int64_t>::max();

// What the write cache holds for one file since its last sync.
struct CachedFile {
  // The size the running process sees.
  int64_t size = 0;
  // Bytes of the real file at or past this offset were truncated away
  // since the last sync, so they read as zeros even if written again later.
  int64_t truncated_to = kNoTruncate;
  // Sector index -> the sector's kSector bytes as the process wrote them.
  std::map<int64_t, std::string> sectors;
};

struct Machine {
  absl::Mutex mu;
  sqlite3_vfs* unix_vfs = nullptr;  // set once by RegisterPowerCutVfs
  bool off ABSL_GUARDED_BY(mu) = false;
  // Bumped by Reset(); handles of an older generation are dead.
  int64_t generation ABSL_GUARDED_BY(mu) = 0;
  int64_t cut_at_op ABSL_GUARDED_BY(mu) = 0;  // 0: no cut armed
  double landed_fraction ABSL_GUARDED_BY(mu) = 0;
  uint64_t seed ABSL_GUARDED_BY(mu) = 1;
  // Full path -> its cache. Kept after the last close, as the page cache is.
  std::map<std::string, std::shared_ptr<CachedFile>> caches ABSL_GUARDED_BY(mu);
  std::set<std::string> databases ABSL_GUARDED_BY(mu);  // for their -shm
  PowerCutStats stats ABSL_GUARDED_BY(mu);
};

Machine& M() {
  static Machine* machine = new Machine;
  return *machine;
}

// SQLite allocates szOsFile bytes for a file and hands them to xOpen; this
// struct sits at the front and the unix VFS's own file right after it.
struct File {
  sqlite3_file base;  // first: SQLite sees a File as an sqlite3_file
  sqlite3_file* real = nullptr;
  std::shared_ptr<CachedFile> cache;  // null: passed through
  std::string path;
  int64_t generation = 0;
};

constexpr int kFileHeader = (sizeof(File) + 7) & ~7;

File* AsFile(sqlite3_file* f) { return reinterpret_cast<File*>(f); }

// Whether the handle may do I/O: the power is on and it was opened since the
// last reboot.
bool Alive(const File* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(M().mu) {
  return !M().off && f->generation == M().generation;
}

// Writes `data` at `offset` of `path` without the cache, for torn write-back.
void LandOnDisk(const std::string& path, const std::string& data,
                int64_t offset) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;  // deleted meanwhile: nothing to land on
  (void)!pwrite(fd, data.data(), data.size(), offset);
  close(fd);
}

void CutLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(M().mu) {
  Machine& m = M();
  if (m.off) return;
  m.off = true;
  std::mt19937_64 rng(m.seed);
  std::bernoulli_distribution lands(m.landed_fraction);
  for (auto& [path, cache] : m.caches) {
    for (const auto& [index, sector] : cache->sectors) {
      const int64_t begin = index * kSector;
      const int64_t len = std::min(kSector, cache->size - begin);
      if (len <= 0) continue;
      if (m.landed_fraction > 0 && lands(rng)) {
        LandOnDisk(path, sector.substr(0, len), begin);
        m.stats.landed_bytes += len;
      } else {
        m.stats.lost_bytes += len;
      }
    }
    cache->sectors.clear();  // handles still holding it see a dead machine
  }
  m.caches.clear();
}

// Counts a mutating operation; returns false when the power is off, which
// this operation may itself have caused.
bool StartOp(const File* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(M().mu) {
  Machine& m = M();
  if (!Alive(f)) return false;
  if (f->cache == nullptr) return true;  // temporary files are not counted
  ++m.stats.ops;
  if (m.cut_at_op > 0 && m.stats.ops >= m.cut_at_op) CutLocked();
  return !m.off;
}

int64_t RealSize(File* f, int* rc) {
  sqlite3_int64 size = 0;
  *rc = f->real->pMethods->xFileSize(f->real, &size);
  return size;
}

// Reads [offset, offset + n) as the process sees it: cached sectors over the
// real file, zeros past the end. Returns SQLITE_IOERR_SHORT_READ (with the
// rest zero-filled) when the range passes the end of the file.
int ReadThroughCache(File* f, char* out, int64_t n, int64_t offset)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(M().mu) {
  CachedFile& c = *f->cache;
  std::memset(out, 0, n);
  int rc = SQLITE_OK;
  const int64_t real_end = std::min(RealSize(f, &rc), c.truncated_to);
  if (rc != SQLITE_OK) return rc;
  const int64_t end = offset + n;
  for (int64_t s = offset / kSector; s * kSector < end; ++s) {
    const int64_t lo = std::max(offset, s * kSector);
    const int64_t hi = std::min({end, (s + 1) * kSector, c.size});
    if (lo >= hi) continue;
    auto it = c.sectors.find(s);
    if (it != c.sectors.end()) {
      std::memcpy(out + (lo - offset), it->second.data() + (lo - s * kSector),
                  hi - lo);
      continue;
    }
    const int64_t real_hi = std::min(hi, real_end);
    if (lo >= real_hi) continue;
    rc = f->real->pMethods->xRead(f->real, out + (lo - offset),
                                  static_cast<int>(real_hi - lo), lo);
    if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) return rc;
  }
  return end > c.size ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

// Writes the cache through to the real file, then fsyncs it.
int Flush(File* f, int sync_flags) ABSL_EXCLUSIVE_LOCKS_REQUIRED(M().mu) {
  CachedFile& c = *f->cache;
  sqlite3_file* r = f->real;
  int rc = SQLITE_OK;
  if (c.truncated_to < RealSize(f, &rc) && rc == SQLITE_OK) {
    rc = r->pMethods->xTruncate(r, c.truncated_to);
  }
  for (const auto& [index, sector] : c.sectors) {
    if (rc != SQLITE_OK) return rc;
    const int64_t len = std::min(kSector, c.size - index * kSector);
    if (len > 0) {
      rc = r->pMethods->xWrite(r, sector.data(), static_cast<int>(len),
                               index * kSector);
    }
  }
  if (rc == SQLITE_OK && RealSize(f, &rc) != c.size && rc == SQLITE_OK) {
    rc = r->pMethods->xTruncate(r, c.size);
  }
  if (rc == SQLITE_OK) rc = r->pMethods->xSync(r, sync_flags);
  if (rc != SQLITE_OK) return rc;
  c.sectors.clear();
  c.truncated_to = kNoTruncate;
  return SQLITE_OK;
}

// --- sqlite3_io_methods ---------------------------------------------------

int Close(sqlite3_file* file) {
  File* f = AsFile(file);
  int rc = f->real->pMethods ? f->real->pMethods->xClose(f->real) : SQLITE_OK;
  f->~File();
  return rc;
}

int Read(sqlite3_file* file, void* out, int n, sqlite3_int64 offset) {
  File* f = AsFile(file);
  absl::MutexLock lock(&M().mu);
  if (!Alive(f)) return SQLITE_IOERR_READ;
  if (f->cache == nullptr) {
    return f->real->pMethods->xRead(f->real, out, n, offset);
  }
  return ReadThroughCache(f, static_cast<char*>(out), n, offset);
}

int Write(sqlite3_file* file, const void* data, int n, sqlite3_int64 offset) {
  File* f = AsFile(file);
  absl::MutexLock lock(&M().mu);
  if (!StartOp(f)) return SQLITE_IOERR_WRITE;
  if (f->cache == nullptr) {
    return f->real->pMethods->xWrite(f->real, data, n, offset);
  }
  CachedFile& c = *f->cache;
  const char* in = static_cast<const char*>(data);
  const int64_t end = offset + n;
  for (int64_t s = offset / kSector; s * kSector < end; ++s) {
    auto it = c.sectors.find(s);
    if (it == c.sectors.end()) {
      // First write to this sector since the sync: start from what the
      // process sees there now.
      std::string sector(kSector, '\0');
      int rc = ReadThroughCache(f, sector.data(), kSector, s * kSector);
      if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) return rc;
      it = c.sectors.emplace(s, std::move(sector)).first;
    }
    const int64_t lo = std::max<int64_t>(offset, s * kSector);
    const int64_t hi = std::min(end, (s + 1) * kSector);
    std::memcpy(it->second.data() + (lo - s * kSector), in + (lo - offset),
                hi - lo);
  }
  c.size = std::max(c.size, end);
  return SQLITE_OK;
}

int Truncate(sqlite3_file* file, sqlite3_int64 size) {
  File* f = AsFile(file);
  absl::MutexLock lock(&M().mu);
  if (!StartOp(f)) return SQLITE_IOERR_TRUNCATE;
  if (f->cache == nullptr) return f->real->pMethods->xTruncate(f->real, size);
  CachedFile& c = *f->cache;
  c.size = size;
  c.truncated_to = std::min(c.truncated_to, static_cast<int64_t>(size));
  c.sectors.erase(c.sectors.lower_bound((size + kSector - 1) / kSector),
                  c.sectors.end());
  if (size % kSector != 0) {
    // The cut-off tail of the last sector must read as zeros if the file
    // grows again.
    auto it = c.sectors.find(size / kSector);
    if (it != c.sectors.end()) {
      std::fill(it->second.begin() + size % kSector, it->second.end(), '\0');
    }
  }
  return SQLITE_OK;
}

int Sync(sqlite3_file* file, int flags) {
  File* f = AsFile(file);
  Machine& m = M();
  absl::MutexLock lock(&m.mu);
  if (!StartOp(f)) return SQLITE_IOERR_FSYNC;
  int rc = f->cache == nullptr ? f->real->pMethods->xSync(f->real, flags)
                               : Flush(f, flags);
  if (rc == SQLITE_OK && f->cache != nullptr) {
    ++m.stats.syncs;
    if (m.databases.count(f->path) > 0) ++m.stats.db_syncs;
  }
  return rc;
}

int FileSize(sqlite3_file* file, sqlite3_int64* size) {
  File* f = AsFile(file);
  absl::MutexLock lock(&M().mu);
  if (!Alive(f)) return SQLITE_IOERR_FSTAT;
  if (f->cache == nullptr) return f->real->pMethods->xFileSize(f->real, size);
  *size = f->cache->size;
  return SQLITE_OK;
}

// Locks (file and shared memory) are process state, not disk state: they
// pass through, and keep working after the cut so that connections close.
int Lock(sqlite3_file* f, int level) {
  return AsFile(f)->real->pMethods->xLock(AsFile(f)->real, level);
}
int Unlock(sqlite3_file* f, int level) {
  return AsFile(f)->real->pMethods->xUnlock(AsFile(f)->real, level);
}
int CheckReservedLock(sqlite3_file* f, int* out) {
  return AsFile(f)->real->pMethods->xCheckReservedLock(AsFile(f)->real, out);
}

int FileControl(sqlite3_file* f, int op, void* arg) {
  // A size hint would make the unix VFS grow the real file behind the cache.
  if (op == SQLITE_FCNTL_SIZE_HINT) return SQLITE_OK;
  return AsFile(f)->real->pMethods->xFileControl(AsFile(f)->real, op, arg);
}

int SectorSize(sqlite3_file*) { return kSector; }

// No SQLITE_IOCAP_* flag: no atomic or power-safe writes, so SQLite assumes
// a cut may tear any sector it was writing (and pads WAL commits to whole
// sectors under synchronous=FULL).
int DeviceCharacteristics(sqlite3_file*) { return 0; }

int ShmMap(sqlite3_file* f, int region, int size, int extend,
           void volatile** out) {
  sqlite3_file* r = AsFile(f)->real;
  return r->pMethods->xShmMap(r, region, size, extend, out);
}
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  sqlite3_file* r = AsFile(f)->real;
  return r->pMethods->xShmLock(r, offset, n, flags);
}
void ShmBarrier(sqlite3_file* f) {
  sqlite3_file* r = AsFile(f)->real;
  r->pMethods->xShmBarrier(r);
}
int ShmUnmap(sqlite3_file* f, int delete_flag) {
  sqlite3_file* r = AsFile(f)->real;
  return r->pMethods->xShmUnmap(r, delete_flag);
}

// Version 2: shared memory but no xFetch, so SQLite never memory-maps the
// database and every read goes through xRead, and thus through the cache.
const sqlite3_io_methods kIoMethods = {2,
                                       Close,
                                       Read,
                                       Write,
                                       Truncate,
                                       Sync,
                                       FileSize,
                                       Lock,
                                       Unlock,
                                       CheckReservedLock,
                                       FileControl,
                                       SectorSize,
                                       DeviceCharacteristics,
                                       ShmMap,
                                       ShmLock,
                                       ShmBarrier,
                                       ShmUnmap,
                                       nullptr,
                                       nullptr};

// --- sqlite3_vfs ----------------------------------------------------------

int Open(sqlite3_vfs*, const char* name, sqlite3_file* file, int flags,
         int* out_flags) {
  Machine& m = M();
  File* f = new (file) File;
  f->base.pMethods = nullptr;
  f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(file) +
                                            kFileHeader);
  f->real->pMethods = nullptr;
  {
    absl::MutexLock lock(&m.mu);
    if (m.off) {
      f->~File();
      return SQLITE_IOERR;
    }
    f->generation = m.generation;
  }
  int rc = m.unix_vfs->xOpen(m.unix_vfs, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK) {
    if (f->real->pMethods) f->real->pMethods->xClose(f->real);
    f->~File();
    return rc;
  }
  const bool durable =
      name != nullptr &&
      (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL |
                SQLITE_OPEN_SUPER_JOURNAL | SQLITE_OPEN_WAL)) != 0;
  if (durable) {
    f->path = name;
    absl::MutexLock lock(&m.mu);
    std::shared_ptr<CachedFile>& cache = m.caches[f->path];
    if (cache == nullptr) {
      cache = std::make_shared<CachedFile>();
      cache->size = RealSize(f, &rc);
    }
    f->cache = cache;
    if (flags & SQLITE_OPEN_MAIN_DB) m.databases.insert(f->path);
  }
  f->base.pMethods = &kIoMethods;
  return rc;  // a failed size read: SQLite calls xClose
}

int Delete(sqlite3_vfs*, const char* name, int sync_dir) {
  Machine& m = M();
  absl::MutexLock lock(&m.mu);
  if (m.off) return SQLITE_IOERR_DELETE;
  m.caches.erase(name);  // deleting is durable at once (see the top)
  return m.unix_vfs->xDelete(m.unix_vfs, name, sync_dir);
}

int Access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return M().unix_vfs->xAccess(M().unix_vfs, name, flags, out);
}
int FullPathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return M().unix_vfs->xFullPathname(M().unix_vfs, name, n, out);
}
void* DlOpen(sqlite3_vfs*, const char* name) {
  return M().unix_vfs->xDlOpen(M().unix_vfs, name);
}
void DlError(sqlite3_vfs*, int n, char* out) {
  M().unix_vfs->xDlError(M().unix_vfs, n, out);
}
void (*DlSym(sqlite3_vfs*, void* lib, const char* sym))(void) {
  return M().unix_vfs->xDlSym(M().unix_vfs, lib, sym);
}
void DlClose(sqlite3_vfs*, void* lib) {
  M().unix_vfs->xDlClose(M().unix_vfs, lib);
}
int Randomness(sqlite3_vfs*, int n, char* out) {
  return M().unix_vfs->xRandomness(M().unix_vfs, n, out);
}
int Sleep(sqlite3_vfs*, int us) {
  return M().unix_vfs->xSleep(M().unix_vfs, us);
}
int CurrentTime(sqlite3_vfs*, double* out) {
  return M().unix_vfs->xCurrentTime(M().unix_vfs, out);
}
int GetLastError(sqlite3_vfs*, int n, char* out) {
  return M().unix_vfs->xGetLastError(M().unix_vfs, n, out);
}
int CurrentTimeInt64(sqlite3_vfs*, sqlite3_int64* out) {
  return M().unix_vfs->xCurrentTimeInt64(M().unix_vfs, out);
}

}  // namespace

absl::Status RegisterPowerCutVfs() {
  static const absl::Status* registered = [] {
    Machine& m = M();
    m.unix_vfs = sqlite3_vfs_find("unix");
    if (m.unix_vfs == nullptr) {
      return new absl::Status(absl::FailedPreconditionError(
          "SQLite has no \"unix\" VFS to wrap; this test needs a POSIX "
          "build of SQLite"));
    }
    static sqlite3_vfs vfs = {};
    vfs.iVersion = 2;
    vfs.szOsFile = kFileHeader + m.unix_vfs->szOsFile;
    vfs.mxPathname = m.unix_vfs->mxPathname;
    vfs.zName = kPowerCutVfs;
    vfs.xOpen = Open;
    vfs.xDelete = Delete;
    vfs.xAccess = Access;
    vfs.xFullPathname = FullPathname;
    vfs.xDlOpen = DlOpen;
    vfs.xDlError = DlError;
    vfs.xDlSym = DlSym;
    vfs.xDlClose = DlClose;
    vfs.xRandomness = Randomness;
    vfs.xSleep = Sleep;
    vfs.xCurrentTime = CurrentTime;
    vfs.xGetLastError = GetLastError;
    vfs.xCurrentTimeInt64 = CurrentTimeInt64;
    int rc = sqlite3_vfs_register(&vfs, /*makeDflt=*/0);
    if (rc != SQLITE_OK) {
      return new absl::Status(absl::InternalError(
          std::string("sqlite3_vfs_register: ") + sqlite3_errstr(rc)));
    }
    return new absl::Status();
  }();
  return *registered;
}

void PowerCut(double landed_fraction, uint64_t seed) {
  Machine& m = M();
  absl::MutexLock lock(&m.mu);
  if (m.off) return;
  m.landed_fraction = landed_fraction;
  m.seed = seed;
  CutLocked();
}

void PowerCutAfter(int64_t ops, double landed_fraction, uint64_t seed) {
  Machine& m = M();
  absl::MutexLock lock(&m.mu);
  m.stats = PowerCutStats();
  m.cut_at_op = std::max<int64_t>(ops, 1);
  m.landed_fraction = landed_fraction;
  m.seed = seed;
}

bool WaitForPowerCut(absl::Duration timeout) {
  Machine& m = M();
  absl::MutexLock lock(&m.mu);
  auto off = [&m]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu) { return m.off; };
  return m.mu.AwaitWithTimeout(absl::Condition(&off), timeout);
}

void Reset() {
  Machine& m = M();
  absl::MutexLock lock(&m.mu);
  for (const std::string& db : m.databases) unlink((db + "-shm").c_str());
  m.databases.clear();
  m.caches.clear();
  m.off = false;
  ++m.generation;
  m.cut_at_op = 0;
  m.landed_fraction = 0;
  m.stats = PowerCutStats();
}

PowerCutStats Stats() {
  Machine& m = M();
  absl::MutexLock lock(&m.mu);
  return m.stats;
}

}  // namespace xl::store::power_cut
