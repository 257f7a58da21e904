// The one cache every compiled program goes through: in memory (bounded,
// least recently used out), and on disk (TORCH_TPU_CACHE_DIR) as serialized
// executables that later processes load instead of compiling.
//
// The key is the full program text plus the serialized compile options; on
// disk it is hashed, and the file stores the key again so that a hash
// collision is detected instead of running the wrong program.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "csrc/pjrt/client.h"

namespace tpu::exec {

struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;       // compiled (not found in memory nor on disk)
  int64_t disk_hits = 0;    // loaded from the persistent cache
  int64_t entries = 0;
  int64_t evictions = 0;    // dropped from memory by the size bound
  double compile_seconds = 0;
};

class ExecutableCache {
 public:
  // `identity` names the plugin and its version; it is part of every key so
  // that a cache directory shared by several plugins stays correct.
  ExecutableCache(const pjrt::Client* client, std::string identity, std::string disk_dir,
                  size_t capacity = 4096);

  pjrt::ExecutablePtr get_or_compile(const std::string& program, const std::string& options);
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
  pjrt::ExecutablePtr load_from_disk(const std::string& key, uint64_t hash);
  void store_to_disk(const std::string& key, uint64_t hash, const pjrt::Executable& exe);

  const pjrt::Client* client_;
  std::string identity_;
  std::string disk_dir_;
  size_t capacity_;
  mutable std::mutex mu_;
  struct Entry {
    pjrt::ExecutablePtr exe;
    std::list<const std::string*>::iterator lru;
  };
  std::unordered_map<std::string, Entry> entries_;
  std::list<const std::string*> lru_;  // keys of entries_, most recently used first
  CacheStats stats_;
};

// 64-bit FNV-1a; stable across runs and builds (used for file names).
uint64_t fingerprint64(const std::string& data);

}  // namespace tpu::exec
