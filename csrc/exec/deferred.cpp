#include "csrc/exec/deferred.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "csrc/exec/runtime.h"
#include "csrc/hlo/module.h"

namespace tpu::exec {

namespace {
std::atomic<int64_t> g_recorded{0};
std::atomic<int64_t> g_flushes{0};

void append_type(std::string& out, const hlo::Type& t) { t.append_to(out); }

}  // namespace

pjrt::BufferPtr DeferredValue::resolve() {
  if (DeferredGraph* g = graph_) g->flush();
  if (!error_.empty()) throw std::runtime_error(error_);
  if (!buffer_) throw std::logic_error("torch_tpu internal error: a deferred value was never computed");
  return buffer_;
}

bool DeferredValue::pending_in(const DeferredGraph* graph) const { return graph_ == graph; }

size_t DeferredGraph::max_programs() {
  static const size_t n = [] {
    const char* e = std::getenv("TORCH_TPU_FUSED_MAX_OPS");
    long v = e ? std::atol(e) : 0;
    return v > 0 ? static_cast<size_t>(v) : size_t{2000};
  }();
  return n;
}

DeferredStats DeferredGraph::stats() { return {g_recorded.load(), g_flushes.load()}; }

size_t DeferredGraph::size() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return calls_.size();
}

DeferredGraph::Ref DeferredGraph::ref_for(const ProgramArg& a) {
  if (a.deferred && a.deferred->pending_in(this)) return Ref{a.deferred->call_, a.deferred->result_};
  pjrt::BufferPtr buf = a.deferred ? a.deferred->resolve() : a.buffer;
  auto [it, inserted] = param_index_.emplace(buf.get(), static_cast<int>(params_.size()));
  if (inserted) {
    params_.push_back(std::move(buf));
    param_types_.push_back(a.type);
  }
  return Ref{-1, it->second};
}

std::vector<DeferredPtr> DeferredGraph::record(const std::string& name,
                                               const std::function<std::string()>& function_text,
                                               const std::vector<ProgramArg>& args,
                                               const std::vector<hlo::Type>& results) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Call call;
  call.name = name;
  call.results = results;
  call.args.reserve(args.size());
  for (const ProgramArg& a : args) call.args.push_back(ref_for(a));
  if (functions_.emplace(name, function_text).second) function_order_.push_back(name);
  const int index = static_cast<int>(calls_.size());
  calls_.push_back(std::move(call));
  std::vector<DeferredPtr> out;
  out.reserve(results.size());
  for (size_t r = 0; r < results.size(); ++r) {
    DeferredPtr v(new DeferredValue(this, results[r], index, static_cast<int>(r)));
    produced_.push_back(v);
    out.push_back(std::move(v));
  }
  ++g_recorded;
  if (calls_.size() >= max_programs()) flush_locked();
  return out;
}

void DeferredGraph::add_check(DeferredPtr ok, std::string message) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!ok->pending_in(this)) {  // the graph already ran (size limit)
    runtime_.add_check(device_, ok->resolve(), std::move(message));
    return;
  }
  checks_.emplace_back(std::move(ok), std::move(message));
}

void DeferredGraph::replaced(const pjrt::BufferPtr& old, const DeferredPtr& successor) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto it = param_index_.find(old.get());
  if (it != param_index_.end() && successor->pending_in(this)) successors_[it->second] = successor;
}

void DeferredGraph::flush() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  flush_locked();
}

void DeferredGraph::flush_locked() {
  if (calls_.empty()) return;
  // Take the graph; recording starts afresh even if running it fails.
  std::vector<pjrt::BufferPtr> params;
  params.swap(params_);
  std::vector<hlo::Type> param_types;
  param_types.swap(param_types_);
  param_index_.clear();
  std::vector<Call> calls;
  calls.swap(calls_);
  std::vector<std::string> order;
  order.swap(function_order_);
  std::unordered_map<std::string, std::function<std::string()>> functions;
  functions.swap(functions_);
  std::vector<std::weak_ptr<DeferredValue>> produced;
  produced.swap(produced_);
  std::vector<std::pair<DeferredPtr, std::string>> checks;
  checks.swap(checks_);
  std::unordered_map<int, std::weak_ptr<DeferredValue>> successors;
  successors.swap(successors_);

  // The outputs: every value something still holds, in recording order.
  std::vector<DeferredPtr> live;
  std::unordered_map<const DeferredValue*, size_t> out_index;
  auto add_output = [&](const DeferredPtr& v) {
    if (out_index.emplace(v.get(), live.size()).second) live.push_back(v);
  };
  for (auto& w : produced) {
    if (DeferredPtr v = w.lock()) add_output(v);
  }
  for (auto& [v, msg] : checks) add_output(v);

  auto value_name = [&](const Ref& r) {
    if (r.call < 0) return "arg" + std::to_string(r.index);
    std::string name = "c" + std::to_string(r.call);
    if (calls[r.call].results.size() > 1) name += "#" + std::to_string(r.index);
    return name;
  };
  auto ref_type = [&](const Ref& r) -> const hlo::Type& {
    return r.call < 0 ? param_types[r.index] : calls[r.call].results[r.index];
  };

  // Donation: a parameter buffer only this graph still holds gives its
  // memory to the value that replaced it in its storage (an optimizer's
  // update writes the parameter in place). Pairing each old value with its
  // own successor lets XLA update in place without copies.
  std::vector<int> alias(params.size(), -1);
  std::vector<bool> taken(live.size(), false);
  for (const auto& [param, weak] : successors) {
    DeferredPtr next = weak.lock();
    if (!next || params[param].use_count() != 1) continue;
    auto out = out_index.find(next.get());
    if (out == out_index.end() || taken[out->second] || next->type() != param_types[param]) continue;
    alias[param] = static_cast<int>(out->second);
    taken[out->second] = true;
  }

  // The key: the graph's structure, naming each recorded function by its
  // fingerprint. It is far shorter than the module text, which is only
  // built when the key is not in the executable cache.
  std::string key = "fused:";
  auto ref_key = [&](const Ref& r) {
    key += r.call < 0 ? 'p' : 'c';
    key += std::to_string(r.call < 0 ? r.index : r.call);
    if (r.call >= 0) key += "." + std::to_string(r.index);
    key += ',';
  };
  for (size_t i = 0; i < params.size(); ++i) {
    append_type(key, param_types[i]);
    if (alias[i] >= 0) key += "=" + std::to_string(alias[i]);
    key += ';';
  }
  for (const Call& call : calls) {
    key += call.name;
    key += '(';
    for (const Ref& r : call.args) ref_key(r);
    key += ')';
  }
  key += "->";
  for (const auto& v : live) ref_key(Ref{v->call_, v->result_});

  // The module: the recorded functions, and a main that calls them in
  // order and returns the live values.
  auto build_text = [&] {
    hlo::Module module("tpu_fused");
    for (const std::string& name : order) module.add_function(name, functions[name]);
    std::vector<hlo::Parameter> main_params;
    for (size_t i = 0; i < params.size(); ++i) main_params.push_back({"arg" + std::to_string(i), param_types[i], alias[i]});
    std::string body;
    for (size_t c = 0; c < calls.size(); ++c) {
      const Call& call = calls[c];
      body += "    ";
      if (call.results.size() == 1) body += "%c" + std::to_string(c) + " = ";
      if (call.results.size() > 1) body += "%c" + std::to_string(c) + ":" + std::to_string(call.results.size()) + " = ";
      body += "\"func.call\"(";
      for (size_t a = 0; a < call.args.size(); ++a) {
        if (a) body += ", ";
        body += "%" + value_name(call.args[a]);
      }
      body += ") {callee = @" + call.name + "} : (";
      for (size_t a = 0; a < call.args.size(); ++a) {
        if (a) body += ", ";
        append_type(body, ref_type(call.args[a]));
      }
      body += ") -> (";
      for (size_t r = 0; r < call.results.size(); ++r) {
        if (r) body += ", ";
        append_type(body, call.results[r]);
      }
      body += ")\n";
    }
    std::vector<hlo::Type> result_types;
    std::vector<std::string> returned;
    for (const auto& v : live) {
      result_types.push_back(v->type());
      returned.push_back(value_name(Ref{v->call_, v->result_}));
    }
    module.set_main(main_params, result_types, std::move(body), std::move(returned));
    return module.text();
  };

  std::vector<pjrt::c::PJRT_Buffer*> raw;
  raw.reserve(params.size());
  for (const auto& p : params) raw.push_back(p->raw());
  ++g_flushes;
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
  params.clear();  // donated buffers are gone
  for (size_t k = 0; k < live.size(); ++k) {
    live[k]->buffer_ = outs[k];
    live[k]->graph_ = nullptr;
  }
  for (auto& [v, msg] : checks) runtime_.add_check(device_, v->buffer_, std::move(msg));
}

}  // namespace tpu::exec
