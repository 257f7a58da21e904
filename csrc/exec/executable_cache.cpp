#include "csrc/exec/executable_cache.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace tpu::exec {

namespace {
constexpr char kMagic[] = "torch_tpu-executable-v2\n";

std::string hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool make_dirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!cur.empty()) mkdir(cur.c_str(), 0755);
    }
    if (i < path.size()) cur += path[i];
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
}  // namespace

uint64_t fingerprint64(const std::string& data) {
  // FNV-1a over 8-byte words (then the tail bytes), with a final avalanche:
  // program texts are long, and this runs for every op.
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h = 1469598103934665603ull ^ data.size();
  const char* p = data.data();
  size_t n = data.size();
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kPrime;
    h ^= h >> 29;
  }
  for (; n > 0; --n, ++p) h = (h ^ static_cast<unsigned char>(*p)) * kPrime;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

ExecutableCache::ExecutableCache(const pjrt::Client* client, std::string identity,
                                 std::string disk_dir, size_t capacity)
    : client_(client), identity_(std::move(identity)), disk_dir_(std::move(disk_dir)),
      capacity_(std::max<size_t>(1, capacity)) {
  if (!disk_dir_.empty() && !make_dirs(disk_dir_)) disk_dir_.clear();
}

pjrt::ExecutablePtr ExecutableCache::get_or_compile(const std::string& program,
                                                    const std::string& options) {
  return get_or_compile(program, [&] { return program; }, options);
}

pjrt::ExecutablePtr ExecutableCache::get_or_compile(const std::string& program_key,
                                                    const std::function<std::string()>& program,
                                                    const std::string& options) {
  std::string key;
  key.reserve(program_key.size() + options.size() + 1);
  key += options;
  key += '\0';
  key += program_key;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);  // most recently used
      return it->second.exe;
    }
  }
  // Compile outside the lock: other threads keep running cached programs. Two
  // threads missing on the same program both compile; the first one stored wins.
  const uint64_t hash = fingerprint64(identity_ + '\0' + key);
  pjrt::ExecutablePtr exe = disk_dir_.empty() ? nullptr : load_from_disk(key, hash);
  const bool from_disk = exe != nullptr;
  double seconds = 0;
  if (!exe) {
    auto t0 = std::chrono::steady_clock::now();
    exe = client_->compile(program(), options);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!disk_dir_.empty()) store_to_disk(key, hash, *exe);
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    it = entries_.emplace(std::move(key), Entry{exe, {}}).first;
    lru_.push_front(&it->first);
    it->second.lru = lru_.begin();
    // Bounded: the least recently used executables go (the disk keeps them).
    while (entries_.size() > capacity_) {
      auto victim = entries_.find(*lru_.back());
      lru_.pop_back();
      entries_.erase(victim);
      ++stats_.evictions;
    }
  }
  if (from_disk) {
    ++stats_.disk_hits;
  } else {
    ++stats_.misses;
    stats_.compile_seconds += seconds;
  }
  stats_.entries = static_cast<int64_t>(entries_.size());
  return it->second.exe;
}

pjrt::ExecutablePtr ExecutableCache::load_from_disk(const std::string& key, uint64_t hash) {
  std::ifstream in(disk_dir_ + "/" + hex64(hash) + ".xla", std::ios::binary);
  if (!in) return nullptr;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  // Layout: magic, identity '\0', key size (16 hex), key, executable size
  // (16 hex), its fingerprint (16 hex), executable bytes. A truncated or
  // damaged file fails these checks and is recompiled (and overwritten);
  // the plugin never sees bytes we did not write.
  const std::string header = std::string(kMagic) + identity_ + '\0';
  if (data.compare(0, header.size(), header) != 0) return nullptr;
  size_t pos = header.size();
  auto read_hex = [&](uint64_t* v) {
    if (data.size() < pos + 16) return false;
    for (size_t i = 0; i < 16; ++i) {
      if (!std::isxdigit(static_cast<unsigned char>(data[pos + i]))) return false;
    }
    *v = std::stoull(data.substr(pos, 16), nullptr, 16);
    pos += 16;
    return true;
  };
  uint64_t key_size = 0, size = 0, check = 0;
  if (!read_hex(&key_size) || data.size() - pos < key_size || data.compare(pos, key_size, key) != 0) return nullptr;
  pos += key_size;
  if (!read_hex(&size) || !read_hex(&check) || data.size() - pos != size) return nullptr;
  std::string bytes = data.substr(pos);
  if (fingerprint64(bytes) != check) return nullptr;
  try {
    return client_->deserialize(bytes);
  } catch (const std::exception&) {
    return nullptr;  // stale or foreign entry: recompile and overwrite
  }
}

void ExecutableCache::store_to_disk(const std::string& key, uint64_t hash,
                                    const pjrt::Executable& exe) {
  std::string bytes;
  try {
    bytes = exe.serialize();
  } catch (const std::exception&) {
    return;  // the plugin cannot serialize: memory cache only
  }
  const std::string path = disk_dir_ + "/" + hex64(hash) + ".xla";
  // Unique per process and call: concurrent writers never share a
  // temporary file, and rename() makes the entry appear whole or not at all.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(++counter);
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out << kMagic << identity_ << '\0' << hex64(key.size()) << key << hex64(bytes.size())
        << hex64(fingerprint64(bytes)) << bytes;
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  std::rename(tmp.c_str(), path.c_str());
}

CacheStats ExecutableCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t ExecutableCache::clear_disk() {
  if (disk_dir_.empty()) return 0;
  size_t removed = 0;
  if (DIR* d = opendir(disk_dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 4 && (name.compare(name.size() - 4, 4, ".xla") == 0 || name.find(".xla.tmp.") != std::string::npos)) {
        removed += std::remove((disk_dir_ + "/" + name).c_str()) == 0;
      }
    }
    closedir(d);
  }
  return removed;
}

void ExecutableCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  lru_.clear();
  stats_ = CacheStats{};
}

}  // namespace tpu::exec
