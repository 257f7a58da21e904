#include "csrc/exec/executable_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace tpu::exec {

namespace {
constexpr char kMagic[] = "torch_tpu-executable-v1\n";

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
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

ExecutableCache::ExecutableCache(const pjrt::Client* client, std::string identity,
                                 std::string disk_dir)
    : client_(client), identity_(std::move(identity)), disk_dir_(std::move(disk_dir)) {
  if (!disk_dir_.empty() && !make_dirs(disk_dir_)) disk_dir_.clear();
}

pjrt::ExecutablePtr ExecutableCache::get_or_compile(const std::string& program,
                                                    const std::string& options) {
  std::string key;
  key.reserve(program.size() + options.size() + 1);
  key += options;
  key += '\0';
  key += program;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++stats_.hits;
      return it->second;
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
    exe = client_->compile(program, options);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!disk_dir_.empty()) store_to_disk(key, hash, *exe);
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = entries_.emplace(std::move(key), exe);
  if (from_disk) {
    ++stats_.disk_hits;
  } else {
    ++stats_.misses;
    stats_.compile_seconds += seconds;
  }
  stats_.entries = static_cast<int64_t>(entries_.size());
  return it->second;
}

pjrt::ExecutablePtr ExecutableCache::load_from_disk(const std::string& key, uint64_t hash) {
  std::ifstream in(disk_dir_ + "/" + hex64(hash) + ".xla", std::ios::binary);
  if (!in) return nullptr;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  // Layout: magic, identity '\0', key size (16 hex) key, executable bytes.
  const std::string header = std::string(kMagic) + identity_ + '\0';
  if (data.compare(0, header.size(), header) != 0) return nullptr;
  size_t pos = header.size();
  if (data.size() < pos + 16) return nullptr;
  const size_t key_size = std::stoull(data.substr(pos, 16), nullptr, 16);
  pos += 16;
  if (data.size() < pos + key_size || data.compare(pos, key_size, key) != 0) return nullptr;
  pos += key_size;
  try {
    return client_->deserialize(data.substr(pos));
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
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out << kMagic << identity_ << '\0' << hex64(key.size()) << key << bytes;
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

void ExecutableCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  stats_ = CacheStats{};
}

}  // namespace tpu::exec
