#include "csrc/exec/deferred.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <unordered_set>

#include "csrc/exec/device_check.h"
#include "csrc/exec/executable_cache.h"
#include "csrc/exec/launcher.h"
#include "csrc/exec/runtime.h"
#include "csrc/hlo/module.h"

namespace tpu::exec {

namespace {
std::atomic<int64_t> g_recorded{0};
std::atomic<int64_t> g_flushes{0};
std::atomic<int64_t> g_donated{0};
std::mutex g_structures_mu;
std::unordered_set<uint64_t> g_structures;  // fingerprints of the structures run

void append_type(std::string& out, const hlo::Type& t) { t.append_to(out); }

}  // namespace

pjrt::BufferPtr DeferredValue::resolve() {
  if (forward_) return forward_->resolve();
  if (DeferredGraph* g = graph_) g->flush();
  if (launch_ != 0 && !started_.load(std::memory_order_acquire)) Launcher::get().wait_for(launch_);
  if (failure_) std::rethrow_exception(failure_);  // (as the plugin raised it: out of memory stays that)
  if (!error_.empty()) throw std::runtime_error(error_);
  if (!buffer_) throw std::logic_error("torch_tpu internal error: a deferred value was never computed");
  return buffer_;
}

bool DeferredValue::pending_in(const DeferredGraph* graph) const { return graph_ == graph; }

bool DeferredValue::sole_holder_of_buffer() const {
  if (launch_ == 0 || !started_.load(std::memory_order_acquire)) return launch_ != 0;
  return !failure_ && buffer_ && buffer_.use_count() == 1 && buffer_->donatable();
}

size_t DeferredGraph::max_programs() {
  static const size_t n = [] {
    const char* e = std::getenv("TORCH_TPU_FUSED_MAX_OPS");
    long v = e ? std::atol(e) : 0;
    return v > 0 ? static_cast<size_t>(v) : size_t{2000};
  }();
  return n;
}

DeferredStats DeferredGraph::stats() {
  std::lock_guard<std::mutex> lock(g_structures_mu);
  return {g_recorded.load(), g_flushes.load(), static_cast<int64_t>(g_structures.size()), g_donated.load()};
}

size_t DeferredGraph::size() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return rec_.calls.size();
}

DeferredGraph::Ref DeferredGraph::ref_for(const ProgramArg& a) {
  if (a.deferred && a.deferred->pending_in(this)) return Ref{a.deferred->call_, a.deferred->result_};
  pjrt::BufferPtr buf = a.deferred ? a.deferred->resolve() : a.buffer;
  if (!capture_ && a.type.dims.empty() && !a.deferred &&
      (a.origin.kind == Origin::Kind::Constant || a.origin.kind == Origin::Kind::HostTensor)) {
    // A number (a run-time size, a scalar operand) is a parameter of its
    // own at each use: numbers are cached buffers by value, and sharing one
    // where two happen to be equal (two tables' id counts) would make the
    // graph's structure, so its program, depend on the values.
    rec_.params.push_back(std::move(buf));
    rec_.param_types.push_back(a.type);
    rec_.origins.push_back(a.origin);
    return Ref{-1, static_cast<int>(rec_.params.size()) - 1};
  }
  auto [it, inserted] = rec_.param_index.emplace(buf.get(), static_cast<int>(rec_.params.size()));
  if (!inserted && capture_ && !(rec_.origins[it->second] == a.origin)) {
    // A capture binds each origin again on its own (a cached scalar buffer
    // may stand for a constant here and a CPU tensor's value there).
    auto range = rec_.duplicates.equal_range(buf.get());
    for (auto d = range.first; d != range.second; ++d) {
      if (rec_.origins[d->second] == a.origin) return Ref{-1, d->second};
    }
    const int index = static_cast<int>(rec_.params.size());
    rec_.duplicates.emplace(buf.get(), index);
    rec_.params.push_back(std::move(buf));
    rec_.param_types.push_back(a.type);
    rec_.origins.push_back(a.origin);
    return Ref{-1, index};
  }
  if (inserted) {
    rec_.params.push_back(std::move(buf));
    rec_.param_types.push_back(a.type);
    rec_.origins.push_back(a.origin);
  }
  return Ref{-1, it->second};
}

std::vector<DeferredPtr> DeferredGraph::record(const FunctionPtr& fn, const std::vector<ProgramArg>& args) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Call call;
  call.fn = fn;
  call.args.reserve(args.size());
  for (const ProgramArg& a : args) call.args.push_back(ref_for(a));
  const int index = static_cast<int>(rec_.calls.size());
  rec_.calls.push_back(std::move(call));
  const size_t n = fn->results.size();
  std::vector<DeferredPtr> out;
  out.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    DeferredPtr v(new DeferredValue(this, fn, index, static_cast<int>(r)));
    rec_.produced.push_back(v);
    out.push_back(std::move(v));
  }
  ++g_recorded;
  if (!capture_ && rec_.calls.size() >= max_programs()) flush_locked();
  return out;
}

std::vector<DeferredPtr> DeferredGraph::record_beside(const DeferredPtr& waiting, const FunctionPtr& fn,
                                                      const std::vector<ProgramArg>& args) {
  // (Should that graph run meanwhile, it still records the call, reading
  // the value's buffer, and runs it with its next recording.)
  DeferredGraph* g = waiting ? waiting->graph_ : nullptr;
  if (g == nullptr) return {};
  return g->record(fn, args);
}

std::vector<FunctionPtr> DeferredGraph::functions(const Recording& r) {
  std::vector<FunctionPtr> order;
  std::unordered_set<std::string> named;  // one function per name (plans may share a program)
  std::function<void(const FunctionPtr&)> add = [&](const FunctionPtr& fn) {
    if (named.count(fn->name)) return;
    for (const FunctionPtr& callee : fn->callees) add(callee);
    if (named.insert(fn->name).second) order.push_back(fn);
  };
  for (const Call& call : r.calls) add(call.fn);
  return order;
}

CheckPtr DeferredGraph::add_check(DeferredPtr ok, std::string message) {
  auto check = std::make_shared<DeviceCheck>(std::move(message), true);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const bool ran = !ok->pending_in(this);  // the graph already ran (size limit)
  check->set_result(std::move(ok));
  if (ran) {
    runtime_.track_check(device_, check);
  } else {
    rec_.checks.push_back(check);
  }
  return check;
}

void DeferredGraph::replaced(const pjrt::BufferPtr& old, const DeferredPtr& old_value, const DeferredPtr& successor) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!successor->pending_in(this)) return;
  int param = -1;
  if (old) {
    auto it = rec_.param_index.find(old.get());
    if (it != rec_.param_index.end()) param = it->second;
  } else if (old_value) {
    auto it = rec_.succeeds.find(old_value.get());
    if (it != rec_.succeeds.end()) {
      // (the entry of a value that died may name a new one at its address)
      if (rec_.successors[it->second].lock() == old_value) param = it->second;
      rec_.succeeds.erase(it);
    }
  }
  if (param < 0) return;
  rec_.successors[param] = successor;
  rec_.succeeds[successor.get()] = param;
}

void DeferredGraph::flush() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  flush_locked();
}

std::vector<DeferredPtr> DeferredGraph::live_values(const Recording& r) {
  std::vector<DeferredPtr> live;
  std::unordered_map<const DeferredValue*, size_t> seen;
  auto add = [&](const DeferredPtr& v) {
    if (seen.emplace(v.get(), live.size()).second) live.push_back(v);
  };
  for (auto& w : r.produced) {
    if (DeferredPtr v = w.lock()) add(v);
  }
  for (auto& c : r.checks) {
    if (DeferredPtr d = c->deferred()) add(d);
  }
  return live;
}

void DeferredGraph::write_calls(const Recording& r, const std::vector<DeferredPtr>& live, std::string& body,
                                std::vector<std::string>& returned) {
  auto value_name = [&](const Ref& ref) {
    if (ref.call < 0) return "arg" + std::to_string(ref.index);
    std::string name = "c" + std::to_string(ref.call);
    if (r.calls[ref.call].fn->results.size() > 1) name += "#" + std::to_string(ref.index);
    return name;
  };
  auto ref_type = [&](const Ref& ref) -> const hlo::Type& {
    return ref.call < 0 ? r.param_types[ref.index] : r.calls[ref.call].fn->results[ref.index];
  };
  for (size_t c = 0; c < r.calls.size(); ++c) {
    const Call& call = r.calls[c];
    const std::vector<hlo::Type>& results = call.fn->results;
    body += "    ";
    if (results.size() == 1) body += "%c" + std::to_string(c) + " = ";
    if (results.size() > 1) body += "%c" + std::to_string(c) + ":" + std::to_string(results.size()) + " = ";
    body += "\"func.call\"(";
    for (size_t a = 0; a < call.args.size(); ++a) {
      if (a) body += ", ";
      body += "%" + value_name(call.args[a]);
    }
    body += ") {callee = @" + call.fn->name + "} : (";
    for (size_t a = 0; a < call.args.size(); ++a) {
      if (a) body += ", ";
      append_type(body, ref_type(call.args[a]));
    }
    body += ") -> (";
    for (size_t k = 0; k < results.size(); ++k) {
      if (k) body += ", ";
      append_type(body, results[k]);
    }
    body += ")\n";
  }
  for (const auto& v : live) returned.push_back(value_name(Ref{v->call_, v->result_}));
}

// The key: the graph's structure, naming each recorded function by its
// fingerprint, in a binary encoding (a flush builds it every time, so it is
// kept cheap). It is far shorter than the module text, which is only built
// when the key is not in the executable cache.
std::string DeferredGraph::structure_key(const Recording& r, const std::vector<DeferredPtr>& live,
                                         const std::vector<int>& alias) {
  std::string key;
  key.reserve(16 * r.params.size() + 32 * r.calls.size() + 8 * live.size());
  auto put = [&key](auto v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  auto put_ref = [&](const Ref& ref) {
    put(ref.call);  // -1: a parameter
    put(ref.index);
  };
  put(static_cast<uint32_t>(r.params.size()));
  for (size_t i = 0; i < r.params.size(); ++i) {
    const hlo::Type& t = r.param_types[i];
    put(static_cast<uint8_t>(t.dtype));
    put(static_cast<uint8_t>(t.dims.size()));
    key.append(reinterpret_cast<const char*>(t.dims.data()), t.dims.size() * sizeof(int64_t));
    put(alias.empty() ? -1 : alias[i]);
  }
  put(static_cast<uint32_t>(r.calls.size()));
  for (const Call& call : r.calls) {
    put(call.fn->fingerprint);
    put(static_cast<uint32_t>(call.args.size()));
    for (const Ref& ref : call.args) put_ref(ref);
  }
  put(static_cast<uint32_t>(live.size()));
  for (const auto& v : live) put_ref(Ref{v->call_, v->result_});
  return key;
}

void DeferredGraph::flush_locked() {
  if (rec_.calls.empty()) return;
  if (capture_) ran_ = true;
  // The donations below count holders as if every program queued on the
  // launcher had started (and let go of its arguments): make it so.
  Launcher::drain();
  // Take the graph; recording starts afresh even if running it fails.
  Recording r;
  std::swap(r, rec_);

  // The outputs: every value something still holds, in recording order.
  std::vector<DeferredPtr> live = live_values(r);
  std::unordered_map<const DeferredValue*, size_t> out_index;
  for (size_t k = 0; k < live.size(); ++k) out_index.emplace(live[k].get(), k);

  // Donation: a parameter buffer only this graph still holds gives its
  // memory to the value that replaced it in its storage (an optimizer's
  // update writes the parameter in place). Pairing each old value with its
  // own successor lets XLA update in place without copies.
  std::vector<int> alias(r.params.size(), -1);
  std::vector<bool> taken(live.size(), false);
  for (const auto& [param, weak] : r.successors) {
    DeferredPtr next = weak.lock();
    if (!next || r.params[param].use_count() != 1 || !r.params[param]->donatable()) continue;
    auto out = out_index.find(next.get());
    if (out == out_index.end() || taken[out->second] || next->type() != r.param_types[param]) continue;
    alias[param] = static_cast<int>(out->second);
    taken[out->second] = true;
  }
  // The checks' preds also as one pred[N], the last result: reading it
  // answers them all with one transfer (a compiled step with an index check
  // per gather would otherwise wait for the device once per check).
  std::vector<std::pair<DeviceCheck*, size_t>> batched;  // (check, the result holding its pred)
  for (const auto& c : r.checks) {
    const DeferredPtr d = c->deferred();
    auto it = d ? out_index.find(d.get()) : out_index.end();
    if (it != out_index.end() && d->type().dims.empty() && d->type().dtype == hlo::DType::Pred) {
      batched.emplace_back(c.get(), it->second);
    }
  }
  if (batched.size() < 2) batched.clear();
  std::string key = "fused:" + structure_key(r, live, alias);  // (binary)
  for (const auto& [check, result] : batched) key.append(reinterpret_cast<const char*>(&result), sizeof(result));

  // The module: the recorded functions, and a main that calls them in
  // order and returns the live values.
  auto build_text = [&] {
    hlo::Module module("tpu_fused");
    for (const FunctionPtr& fn : functions(r)) module.add_function(fn->name, fn->text);
    std::vector<hlo::Parameter> main_params;
    for (size_t i = 0; i < r.params.size(); ++i) {
      main_params.push_back({"arg" + std::to_string(i), r.param_types[i], alias[i]});
    }
    std::string body;
    std::vector<std::string> returned;
    write_calls(r, live, body, returned);
    std::vector<hlo::Type> result_types;
    for (const auto& v : live) result_types.push_back(v->type());
    if (!batched.empty()) {
      const hlo::Type pred{hlo::DType::Pred, {}}, one{hlo::DType::Pred, {1}};
      const hlo::Type all{hlo::DType::Pred, {static_cast<int64_t>(batched.size())}};
      std::string parts, types;
      for (size_t k = 0; k < batched.size(); ++k) {
        const std::string name = "check" + std::to_string(k);
        body += "    %" + name + " = \"stablehlo.reshape\"(%" + returned[batched[k].second] + ") : (";
        append_type(body, pred);
        body += ") -> ";
        append_type(body, one);
        body += "\n";
        parts += (k ? ", %" : "%") + name;
        if (k) types += ", ";
        append_type(types, one);
      }
      body += "    %checks = \"stablehlo.concatenate\"(" + parts + ") {dimension = 0 : i64} : (" + types + ") -> ";
      append_type(body, all);
      body += "\n";
      returned.push_back("checks");
      result_types.push_back(all);
    }
    module.set_main(main_params, result_types, std::move(body), std::move(returned));
    return module.text();
  };

  std::vector<pjrt::c::PJRT_Buffer*> raw;
  raw.reserve(r.params.size());
  for (const auto& p : r.params) raw.push_back(p->raw());
  ++g_flushes;
  g_donated += std::count_if(alias.begin(), alias.end(), [](int a) { return a >= 0; });
  {
    std::lock_guard<std::mutex> lock(g_structures_mu);
    g_structures.insert(fingerprint64(key));
  }
  std::vector<pjrt::BufferPtr> outs;
  try {
    outs = runtime_.run(key, build_text, raw, device_);
  } catch (const std::exception& e) {
    const std::string msg = std::string("a fused eager program failed: ") + e.what();
    for (auto& v : live) {
      v->error_ = msg;
      v->graph_ = nullptr;
    }
    throw;
  }
  r.params.clear();  // donated buffers are gone
  for (size_t k = 0; k < live.size(); ++k) {
    live[k]->buffer_ = outs[k];
    live[k]->graph_ = nullptr;
  }
  if (!batched.empty()) {
    auto batch = std::make_shared<CheckBatch>(outs.back());
    for (size_t k = 0; k < batched.size(); ++k) batched[k].first->set_batch(batch, k);
  }
  for (auto& c : r.checks) runtime_.track_check(device_, c);
}

std::shared_ptr<CapturedFunction> DeferredGraph::take_function(std::string* why) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  why->clear();
  if (rec_.calls.empty()) return nullptr;
  if (ran_) {
    *why = "the graph had to run part-way (a value was read on the host, or the device synchronized)";
  } else {
    for (const Origin& o : rec_.origins) {
      if (o.kind == Origin::Kind::Unknown) *why = "an operand was made outside the graph's programs (an upload)";
    }
  }
  auto r = std::make_shared<Recording>();
  std::swap(*r, rec_);
  auto fn = std::make_shared<CapturedFunction>();
  auto function = std::make_shared<Function>();
  fn->values = live_values(*r);
  for (const auto& v : fn->values) function->results.push_back(v->type());
  for (auto& c : r->checks) {
    const DeferredPtr v = c->deferred();
    for (size_t k = 0; k < fn->values.size(); ++k) {
      if (fn->values[k] == v) fn->checks.emplace_back(static_cast<int>(k), c->message());
    }
  }
  const std::string key = structure_key(*r, fn->values, {});
  char name[32];
  function->fingerprint = fingerprint64(key);
  std::snprintf(name, sizeof(name), "graph_%016llx", static_cast<unsigned long long>(function->fingerprint));
  function->name = name;
  function->callees = functions(*r);
  fn->param_types = r->param_types;
  fn->origins = r->origins;
  fn->buffers = r->params;
  // The text names values by their recording positions only: keep just the
  // structure (the recording's values are dropped with it).
  std::vector<std::string> returned;
  auto body = std::make_shared<std::string>();
  write_calls(*r, fn->values, *body, returned);
  std::vector<hlo::Parameter> params;
  for (size_t i = 0; i < r->params.size(); ++i) params.push_back({"arg" + std::to_string(i), r->param_types[i], -1});
  const std::string head = "func.func private @" + function->name;
  function->text = [head, params, results = function->results, body, returned] {
    std::string out;
    hlo::write_function(out, head, params, results, *body, returned);
    return out;
  };
  fn->function = std::move(function);
  // The recorded values are computed by whoever records the function
  // (forward_to): nothing runs this graph.
  for (auto& w : r->produced) {
    if (DeferredPtr v = w.lock()) {
      v->graph_ = nullptr;
      v->error_ = "torch_tpu internal error: a captured value was read before its graph was recorded";
    }
  }
  return fn;
}

}  // namespace tpu::exec

// ---- device checks (device_check.h) -------------------------------------------------

namespace tpu::exec {

void DeviceCheck::set_result(pjrt::BufferPtr ok) {
  std::lock_guard<std::mutex> lock(mu_);
  ok_ = std::move(ok);
}

void DeviceCheck::set_result(DeferredPtr ok) {
  std::lock_guard<std::mutex> lock(mu_);
  deferred_ = std::move(ok);
}

DeferredPtr DeviceCheck::deferred() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deferred_;
}

bool DeviceCheck::failed() {
  const int known = state_.load(std::memory_order_acquire);
  if (known != kUnknown) return known == kFailed;
  read_all({this});
  return state_.load(std::memory_order_acquire) == kFailed;
}

void DeviceCheck::set_batch(std::shared_ptr<CheckBatch> batch, size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  batch_ = std::move(batch);
  batch_index_ = index;
}

void DeviceCheck::read_all(const std::vector<DeviceCheck*>& checks, std::vector<pjrt::Buffer::Read> also) {
  struct Pending {
    DeviceCheck* check;
    std::shared_ptr<CheckBatch> batch;  // or its own pred:
    pjrt::BufferPtr pred;
    size_t index;
  };
  std::vector<Pending> pending;
  for (DeviceCheck* c : checks) {
    if (c->state_.load(std::memory_order_acquire) != kUnknown) continue;
    Pending p{c, nullptr, nullptr, 0};
    DeferredPtr deferred;
    {
      std::lock_guard<std::mutex> lock(c->mu_);
      p.batch = c->batch_;
      p.index = c->batch_index_;
      p.pred = c->ok_;
      deferred = c->deferred_;
    }
    if (!p.batch && !p.pred && deferred) {
      p.pred = deferred->resolve();  // runs its graph (outside the check's lock), which may batch it
      std::lock_guard<std::mutex> lock(c->mu_);
      p.batch = c->batch_;
      p.index = c->batch_index_;
    }
    if (!p.batch && !p.pred) continue;
    pending.push_back(std::move(p));
  }
  if (pending.empty()) {
    if (!also.empty()) pjrt::Buffer::to_host(also);
    return;
  }
  // One read per batch not read yet, one per lone pred; all at once.
  std::vector<pjrt::Buffer::Read> reads = std::move(also);
  std::vector<std::pair<std::shared_ptr<CheckBatch>, std::vector<uint8_t>>> batches;
  std::unordered_set<const CheckBatch*> listed;
  std::vector<uint8_t> lone(pending.size(), 1);
  for (const Pending& p : pending) {
    if (!p.batch || !listed.insert(p.batch.get()).second) continue;
    std::lock_guard<std::mutex> lock(p.batch->mu);
    if (p.batch->bits.empty()) batches.emplace_back(p.batch, std::vector<uint8_t>(p.batch->preds->dims().at(0), 1));
  }
  for (auto& [batch, bits] : batches) reads.push_back({batch->preds.get(), bits.data(), bits.size()});
  for (size_t k = 0; k < pending.size(); ++k) {
    if (!pending[k].batch) reads.push_back({pending[k].pred.get(), &lone[k], 1});
  }
  pjrt::Buffer::to_host(reads);
  for (auto& [batch, bits] : batches) {
    std::lock_guard<std::mutex> lock(batch->mu);
    if (batch->bits.empty()) batch->bits = std::move(bits);
  }
  for (size_t k = 0; k < pending.size(); ++k) {
    const Pending& p = pending[k];
    bool ok = lone[k] != 0;
    if (p.batch) {
      std::lock_guard<std::mutex> lock(p.batch->mu);
      ok = p.batch->bits.at(p.index) != 0;
    }
    p.check->state_.store(ok ? kPassed : kFailed, std::memory_order_release);
    std::lock_guard<std::mutex> lock(p.check->mu_);
    p.check->ok_.reset();  // the answer is kept; the buffers and the graph value may go
    p.check->deferred_.reset();
    p.check->batch_.reset();
  }
}

bool DeviceCheck::readable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ok_ || batch_ || !deferred_ || !deferred_->pending();
}

CheckFailure DeviceCheck::error() const {
  return CheckFailure(message_ + (asynchronous_ ? " (detected asynchronously, after the op ran; set "
                                                  "TORCH_TPU_LAUNCH_BLOCKING=1 to raise it at the op)"
                                                : ""));
}

namespace {

constexpr size_t kMaxGuards = 64;

void add_guard(Checks& into, const CheckPtr& c, bool once) {
  if (!c || c->passed()) return;
  for (Guard& g : into) {
    if (g.check == c) {
      g.once = g.once && once;
      return;
    }
  }
  into.push_back({c, once});
}

// A long list (many ops with checks and no read between): its oldest
// checks are read now (those a pending fused graph computes wait for it),
// and those that passed drop out. Bookkeeping, not a value the current op
// reads: a torch.compile capture this happens in is still replayed (a
// storage written every step, a KV cache, gets a check per step; its list
// filled up in the middle of a capture, whose graph then ran its ops at
// every later call).
void settle(Checks& into) {
  if (into.size() <= kMaxGuards) return;
  std::vector<DeviceCheck*> oldest;
  for (size_t k = 0; k < into.size() / 2; ++k) {
    if (into[k].check->readable()) oldest.push_back(into[k].check.get());
  }
  pjrt::Buffer::BookkeepingReads bookkeeping;
  DeviceCheck::read_all(oldest);
  into.erase(std::remove_if(into.begin(), into.end(), [](const Guard& g) { return g.check->passed(); }), into.end());
}

}  // namespace

void merge_checks(Checks& into, const Checks& more) {
  for (const Guard& g : more) add_guard(into, g.check, g.once);
  settle(into);
}

void merge_checks(Checks& into, const std::vector<CheckPtr>& more, bool once) {
  for (const CheckPtr& c : more) add_guard(into, c, once);
  settle(into);
}

namespace {
std::vector<DeviceCheck*> open_checks(const Checks& checks) {
  std::vector<DeviceCheck*> open;
  for (const Guard& g : checks) {
    if (!g.check->passed() && !(g.once && g.check->reported.load())) open.push_back(g.check.get());
  }
  return open;
}
}  // namespace

void read_verified(const pjrt::Buffer::Read& value, const Checks& checks) {
  Launcher::host_waits();
  DeviceCheck::read_all(open_checks(checks), {value});
  verify_checks(checks);
}

void verify_checks(const Checks& checks) {
  DeviceCheck::read_all(open_checks(checks));
  for (const Guard& g : checks) {
    if (g.check->passed() || (g.once && g.check->reported.load())) continue;
    if (g.check->failed()) {
      g.check->reported.store(true);
      throw g.check->error();
    }
  }
}

}  // namespace tpu::exec
