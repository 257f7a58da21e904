// The one cache every compiled program goes through: in memory (bounded,
// least recently used out), and on disk (TORCH_TPU_CACHE_DIR) as serialized
// executables that later processes load instead of compiling.
//
// The key is the full program text plus the serialized compile options; on
// disk it is hashed, and the file stores the key again so that a hash
// collision is detected instead of running the wrong program.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "csrc/pjrt/client.h"

namespace tpu::exec {

struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;       // compiled (not found in memory nor on disk)
  int64_t disk_hits = 0;    // loaded from the persistent cache
  int64_t entries = 0;
  int64_t evictions = 0;    // dropped from memory by the size bound
  double compile_seconds = 0;
  double load_seconds = 0;  // spent loading from the persistent cache
  int64_t preloaded = 0;    // loaded ahead of use (see start_preload)
};

class ExecutableCache {
 public:
  // `identity` names the plugin and its version; it is part of every key so
  // that a cache directory shared by several plugins stays correct.
  // `session` names the workload (empty: none) for warm starts: the
  // programs an earlier run of the same session used are loaded ahead.
  // `map_budget` bounds the memory mappings the process may hold while the
  // cache keeps executables alive (0: half the kernel's vm.max_map_count);
  // see trim_to_map_budget.
  ExecutableCache(const pjrt::Client* client, std::string identity, std::string disk_dir,
                  size_t capacity = 4096, const std::string& session = {}, size_t map_budget = 0);
  ~ExecutableCache();

  pjrt::ExecutablePtr get_or_compile(const std::string& program, const std::string& options);
  // Print each program compiled on a miss (its text) to stderr: for finding
  // what compiles, and why a step compiles again (torch.tpu._set_dump_on_cache_miss).
  static bool dump_on_miss();
  static void set_dump_on_miss(bool on);
  // The same, keyed by `key` instead of the program text: `program()` is
  // only called to compile. The key must determine the program (fused eager
  // keys a graph by its structure, the recorded functions by their
  // fingerprints, which is much shorter than its text).
  pjrt::ExecutablePtr get_or_compile(const std::string& key, const std::function<std::string()>& program,
                                     const std::string& options);

  CacheStats stats() const;
  void clear();  // in-memory entries and counters; the disk cache is kept
  size_t clear_disk();  // removes the persistent entries; returns how many
  const std::string& disk_dir() const { return disk_dir_; }

 private:
  struct Entry {
    pjrt::ExecutablePtr exe;
    std::list<const std::string*>::iterator lru;
  };
  pjrt::ExecutablePtr load_from_disk(const std::string& key, uint64_t hash);
  // The executable bytes of disk entry `hash` (empty if missing, foreign or
  // damaged); checks the key against `expected_key` or returns it.
  std::string read_entry(uint64_t hash, const std::string* expected_key, std::string* key_out) const;
  void store_to_disk(const std::string& key, uint64_t hash, const pjrt::Executable& exe);
  std::unordered_map<std::string, Entry>::iterator insert_locked(std::string key, pjrt::ExecutablePtr exe);
  // Every loaded executable holds memory mappings of its own (the CPU
  // plugin links each one's code into pages of its own), and a process that
  // reaches the kernel's limit on mappings fails to load the next one and
  // then crashes: the least recently used executables go while the process
  // holds more mappings than `map_budget_` (checked every few insertions,
  // outside the lock).
  void trim_to_map_budget();
  // Drops the `n` least recently used entries, handing their executables to
  // `victims` (the caller lets them go, outside the lock where it can).
  void evict_oldest_locked(size_t n, std::vector<pjrt::ExecutablePtr>& victims);
  // Warm starts (see the .cpp): this process's session of disk entries.
  void note_used(uint64_t hash);
  void start_preload();
  void write_session();
  void write_session_locked();
  void shutdown();

  const pjrt::Client* client_;
  std::string identity_;
  std::string disk_dir_;
  size_t capacity_;
  size_t map_budget_;
  std::atomic<unsigned> inserts_since_map_check_{0};
  mutable std::mutex mu_;
  std::condition_variable loaded_;  // an entry being preloaded arrived
  std::unordered_set<std::string> inflight_;  // keys being preloaded
  int preloading_ = 0;              // preloader threads running
  std::atomic<bool> stop_{false};
  std::mutex session_mu_;
  std::string session_path_;
  std::vector<uint64_t> session_;
  std::unordered_set<uint64_t> session_seen_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<const std::string*> lru_;  // keys of entries_, most recently used first
  CacheStats stats_;
};

// 64-bit FNV-1a; stable across runs and builds (used for file names).
uint64_t fingerprint64(const std::string& data);
// A short cache key naming the program `text` (a strong hash of it), so
// that eager ops look up their executable without hashing the text again.
std::string program_key(const std::string& text);

}  // namespace tpu::exec
