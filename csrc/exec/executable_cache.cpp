#include "csrc/exec/executable_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <thread>

namespace tpu::exec {

namespace {
constexpr char kMagic[] = "torch_tpu-executable-v2\n";

// The cache whose session is written at exit (the runtime's).
std::mutex g_instance_mu;
ExecutableCache* g_instance = nullptr;

// How many memory mappings this process holds (lines of /proc/self/maps; 0
// where the system does not say), and how many it may hold (vm.max_map_count).
size_t process_map_count() {
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return 0;
  size_t lines = 0;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) lines += std::count(buf, buf + n, '\n');
  std::fclose(f);
  return lines;
}

size_t process_map_limit() {
  long long limit = 0;
  if (FILE* f = std::fopen("/proc/sys/vm/max_map_count", "re")) {
    if (std::fscanf(f, "%lld", &limit) != 1) limit = 0;
    std::fclose(f);
  }
  return limit > 0 ? static_cast<size_t>(limit) : 65530;  // Linux's default
}

std::string hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The whole of `path` if it is a regular file (symlinks followed). Anything
// else in an entry's place (a FIFO would block the reader forever, a
// directory or device is not ours) reads as absent: the entry is a miss.
bool read_regular_file(const std::string& path, std::string* out) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok) {
    out->clear();
    out->reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        out->append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        ok = false;
        break;
      }
    }
  }
  close(fd);
  return ok;
}

// Writes `parts` to `path` whole or not at all: into a temporary file of
// its own (unique per process and call, created exclusively, so nothing left
// in its place, such as a FIFO, can block the writer), then renamed over it.
bool write_atomically(const std::string& path, std::initializer_list<std::string_view> parts) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(++counter);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) return false;
  bool ok = true;
  for (std::string_view part : parts) {
    while (ok && !part.empty()) {
      const ssize_t n = write(fd, part.data(), part.size());
      if (n > 0) {
        part.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && errno != EINTR) {
        ok = false;
      }
    }
  }
  ok = close(fd) == 0 && ok;
  if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) std::remove(tmp.c_str());
  return ok;
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

std::string program_key(const std::string& text) {
  // Two independent 64-bit hashes and the length: 136 bits, so that distinct
  // programs never share a key in practice.
  char buf[64];
  std::snprintf(buf, sizeof(buf), "program:%016llx%016llx:%zu",
                static_cast<unsigned long long>(fingerprint64(text)),
                static_cast<unsigned long long>(std::hash<std::string>()(text)), text.size());
  return buf;
}

ExecutableCache::ExecutableCache(const pjrt::Client* client, std::string identity,
                                 std::string disk_dir, size_t capacity, const std::string& session,
                                 size_t map_budget)
    : client_(client), identity_(std::move(identity)), disk_dir_(std::move(disk_dir)),
      capacity_(std::max<size_t>(1, capacity)), map_budget_(map_budget ? map_budget : process_map_limit() / 2) {
  if (!disk_dir_.empty() && !make_dirs(disk_dir_)) disk_dir_.clear();
  if (!disk_dir_.empty() && !session.empty()) {
    session_path_ = disk_dir_ + "/session-" + hex64(fingerprint64(identity_ + '\0' + session)) + ".list";
    start_preload();
  }
  // At exit the session is recorded and the preloader stops (before the
  // plugin's statics go away). A forked child has no preloader thread.
  std::lock_guard<std::mutex> lock(g_instance_mu);
  if (g_instance == nullptr) {
    g_instance = this;
    static bool hooked = false;
    if (!hooked) {
      hooked = true;
      std::atexit([] {
        std::lock_guard<std::mutex> lock(g_instance_mu);
        if (g_instance) g_instance->shutdown();
      });
      pthread_atfork(nullptr, nullptr, [] {
        if (g_instance) {
          g_instance->preloading_ = 0;
          g_instance->inflight_.clear();
        }
      });
    }
  }
}

ExecutableCache::~ExecutableCache() {
  shutdown();
  std::lock_guard<std::mutex> lock(g_instance_mu);
  if (g_instance == this) g_instance = nullptr;
}

void ExecutableCache::shutdown() {
  stop_ = true;
  std::unique_lock<std::mutex> lock(mu_);
  loaded_.wait_for(lock, std::chrono::seconds(5), [&] { return preloading_ == 0; });
  lock.unlock();
  write_session();
}

namespace {
std::atomic<bool> g_dump_on_miss{false};
}  // namespace

bool ExecutableCache::dump_on_miss() { return g_dump_on_miss.load(std::memory_order_relaxed); }
void ExecutableCache::set_dump_on_miss(bool on) { g_dump_on_miss = on; }

pjrt::ExecutablePtr ExecutableCache::get_or_compile(const std::string& program,
                                                    const std::string& options) {
  return get_or_compile(program, [&] { return program; }, options);
}

pjrt::ExecutablePtr ExecutableCache::get_or_compile(const std::string& program_key,
                                                    const std::function<std::string()>& program,
                                                    const std::string& options) {
  // The key of a hit is built in a buffer of the thread's own (a hit is
  // every eager op's path: no allocation).
  thread_local std::string scratch;
  scratch.assign(options);
  scratch += '\0';
  scratch += program_key;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Being preloaded: wait for it rather than load it twice.
    if (!inflight_.empty()) {
      loaded_.wait_for(lock, std::chrono::seconds(10), [&] { return inflight_.count(scratch) == 0; });
    }
    auto it = entries_.find(scratch);
    if (it != entries_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);  // most recently used
      return it->second.exe;
    }
  }
  std::string key = scratch;
  // Compile outside the lock: other threads keep running cached programs. Two
  // threads missing on the same program both compile; the first one stored wins.
  const uint64_t hash = fingerprint64(identity_ + '\0' + key);
  const auto t_load = std::chrono::steady_clock::now();
  pjrt::ExecutablePtr exe = disk_dir_.empty() ? nullptr : load_from_disk(key, hash);
  const bool from_disk = exe != nullptr;
  const double load_seconds =
      from_disk ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count() : 0;
  double seconds = 0;
  if (!exe) {
    auto t0 = std::chrono::steady_clock::now();
    const std::string text = program();
    if (dump_on_miss()) {
      std::fprintf(stderr, "torch_tpu: cache miss, compiling program %016llx (%zu bytes of StableHLO):\n%s\n",
                   static_cast<unsigned long long>(hash), text.size(), text.c_str());
    }
    exe = client_->compile(text, options);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!disk_dir_.empty()) store_to_disk(key, hash, *exe);
  }
  note_used(hash);
  pjrt::ExecutablePtr stored;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stored = insert_locked(std::move(key), exe)->second.exe;
    if (from_disk) {
      ++stats_.disk_hits;
      stats_.load_seconds += load_seconds;
    } else {
      ++stats_.misses;
      stats_.compile_seconds += seconds;
    }
    stats_.entries = static_cast<int64_t>(entries_.size());
  }
  trim_to_map_budget();
  return stored;
}

void ExecutableCache::trim_to_map_budget() {
  // Reading the map list costs about a microsecond per mapping: do it once
  // every 16 insertions (a compile or a load costs far more).
  if (++inserts_since_map_check_ < 16) return;
  inserts_since_map_check_ = 0;
  for (size_t held = process_map_count(); held > map_budget_;) {
    std::vector<pjrt::ExecutablePtr> victims;  // destroyed outside the lock
    {
      std::lock_guard<std::mutex> lock(mu_);
      // An eighth of the entries at a time, oldest first, down to a few.
      evict_oldest_locked(entries_.size() > 8 ? std::max<size_t>(1, entries_.size() / 8) : 0, victims);
    }
    if (victims.empty()) return;
    victims.clear();
    const size_t now = process_map_count();
    if (now >= held) return;  // what is left is held elsewhere, not by the cache
    held = now;
  }
}

std::unordered_map<std::string, ExecutableCache::Entry>::iterator ExecutableCache::insert_locked(
    std::string key, pjrt::ExecutablePtr exe) {
  auto it = entries_.find(key);
  if (it != entries_.end()) return it;
  it = entries_.emplace(std::move(key), Entry{std::move(exe), {}}).first;
  lru_.push_front(&it->first);
  it->second.lru = lru_.begin();
  // Bounded: the least recently used executables go (the disk keeps them).
  std::vector<pjrt::ExecutablePtr> victims;
  if (entries_.size() > capacity_) evict_oldest_locked(entries_.size() - capacity_, victims);
  stats_.entries = static_cast<int64_t>(entries_.size());
  return it;
}

void ExecutableCache::evict_oldest_locked(size_t n, std::vector<pjrt::ExecutablePtr>& victims) {
  for (; n > 0 && !lru_.empty(); --n) {
    auto victim = entries_.find(*lru_.back());
    lru_.pop_back();
    victims.push_back(std::move(victim->second.exe));
    entries_.erase(victim);
    ++stats_.evictions;
  }
  stats_.entries = static_cast<int64_t>(entries_.size());
}

// ---- warm starts ------------------------------------------------------------------
//
// A process named by a session (torch_tpu passes its command line and
// working directory) lists the disk entries it uses, in the order it first
// uses them, in `session-<name hash>.list`. When the same session starts
// again, a background thread loads the listed entries in that order from the
// moment the runtime starts, while the script goes on setting up: its
// programs are in memory by the time its first steps need them (loading one
// takes milliseconds: the plugin links its code).

void ExecutableCache::note_used(uint64_t hash) {
  std::lock_guard<std::mutex> lock(session_mu_);
  if (session_path_.empty() || session_.size() >= capacity_ || !session_seen_.insert(hash).second) return;
  session_.push_back(hash);
  const size_t n = session_.size();
  if ((n & (n - 1)) == 0 || n % 32 == 0) write_session_locked();
}

void ExecutableCache::write_session() {
  std::lock_guard<std::mutex> lock(session_mu_);
  write_session_locked();
}

void ExecutableCache::write_session_locked() {
  if (session_.empty() || session_path_.empty()) return;
  std::string list;
  for (uint64_t h : session_) list += hex64(h) + '\n';
  write_atomically(session_path_, {list});
}

void ExecutableCache::start_preload() {
  std::string list;
  if (!read_regular_file(session_path_, &list)) return;
  std::istringstream in(list);
  std::vector<uint64_t> hashes;
  std::string line;
  while (std::getline(in, line) && hashes.size() < std::min<size_t>(capacity_, 2048)) {
    if (line.size() == 16 && std::all_of(line.begin(), line.end(), [](char c) { return std::isxdigit(c); })) {
      hashes.push_back(std::stoull(line, nullptr, 16));
    }
  }
  if (hashes.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++preloading_;
  }
  std::thread([this, hashes = std::move(hashes)] {
    for (size_t i = 0; i < hashes.size() && !stop_; ++i) {
      std::string key;
      std::string bytes = read_entry(hashes[i], nullptr, &key);
      if (bytes.empty()) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (entries_.count(key) || !inflight_.insert(key).second) continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      pjrt::ExecutablePtr exe;
      try {
        exe = client_->deserialize(bytes);
      } catch (const std::exception&) {
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> lock(mu_);
        inflight_.erase(key);
        if (exe) {
          insert_locked(key, exe);
          ++stats_.preloaded;
          stats_.load_seconds += seconds;
        }
      }
      loaded_.notify_all();
      if (exe) trim_to_map_budget();
    }
    std::lock_guard<std::mutex> lock(mu_);
    --preloading_;
    loaded_.notify_all();
  }).detach();
}

pjrt::ExecutablePtr ExecutableCache::load_from_disk(const std::string& key, uint64_t hash) {
  std::string bytes = read_entry(hash, &key, nullptr);
  if (bytes.empty()) return nullptr;
  try {
    return client_->deserialize(bytes);
  } catch (const std::exception&) {
    return nullptr;  // stale or foreign entry: recompile and overwrite
  }
}

std::string ExecutableCache::read_entry(uint64_t hash, const std::string* expected_key, std::string* key_out) const {
  std::string data;
  if (!read_regular_file(disk_dir_ + "/" + hex64(hash) + ".xla", &data)) return {};
  // Layout: magic, identity '\0', key size (16 hex), key, executable size
  // (16 hex), its fingerprint (16 hex), executable bytes. A truncated or
  // damaged file fails these checks and is recompiled (and overwritten);
  // the plugin never sees bytes we did not write.
  const std::string header = std::string(kMagic) + identity_ + '\0';
  if (data.compare(0, header.size(), header) != 0) return {};
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
  if (!read_hex(&key_size) || data.size() - pos < key_size) return {};
  if (expected_key && data.compare(pos, key_size, *expected_key) != 0) return {};
  if (key_out) *key_out = data.substr(pos, key_size);
  pos += key_size;
  if (!read_hex(&size) || !read_hex(&check) || data.size() - pos != size) return {};
  std::string bytes = data.substr(pos);
  if (fingerprint64(bytes) != check) return {};
  return bytes;
}

void ExecutableCache::store_to_disk(const std::string& key, uint64_t hash,
                                    const pjrt::Executable& exe) {
  std::string bytes;
  try {
    bytes = exe.serialize();
  } catch (const std::exception&) {
    return;  // the plugin cannot serialize: memory cache only
  }
  write_atomically(disk_dir_ + "/" + hex64(hash) + ".xla",
                   {kMagic, identity_, std::string_view("\0", 1), hex64(key.size()), key, hex64(bytes.size()),
                    hex64(fingerprint64(bytes)), bytes});
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
      const bool entry = name.size() > 4 && (name.compare(name.size() - 4, 4, ".xla") == 0 ||
                                             name.find(".xla.tmp.") != std::string::npos);
      const bool session = name.compare(0, 8, "session-") == 0;
      if (entry || session) {
        removed += std::remove((disk_dir_ + "/" + name).c_str()) == 0 && entry;
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
