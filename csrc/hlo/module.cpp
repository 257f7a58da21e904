#include "csrc/hlo/module.h"

namespace tpu::hlo {

namespace {
void append_types(std::string& out, const std::vector<Type>& types) {
  for (size_t i = 0; i < types.size(); ++i) {
    if (i) out += ", ";
    types[i].append_to(out);
  }
}
}  // namespace

void write_function(std::string& out, std::string_view head, const std::vector<Parameter>& params,
                    const std::vector<Type>& results, std::string_view body,
                    const std::vector<std::string>& returned) {
  out += "  ";
  out += head;
  out += "(";
  for (size_t i = 0; i < params.size(); ++i) {
    if (i) out += ", ";
    out += '%';
    out += params[i].name;
    out += ": ";
    params[i].type.append_to(out);
    if (params[i].alias >= 0) {
      out += " {tf.aliasing_output = ";
      out += std::to_string(params[i].alias);
      out += " : i32}";
    }
  }
  out += ") -> (";
  append_types(out, results);
  out += ") {\n";
  out += body;
  out += "    \"func.return\"(";
  for (size_t i = 0; i < returned.size(); ++i) {
    if (i) out += ", ";
    out += '%';
    out += returned[i];
  }
  out += ") : (";
  append_types(out, results);
  out += ") -> ()\n  }\n";
}

bool Module::add_function(const std::string& name, std::function<std::string()> text) {
  if (!functions_.emplace(name, std::move(text)).second) return false;
  order_.push_back(name);
  return true;
}

void Module::set_main(const std::vector<Parameter>& params, const std::vector<Type>& results, std::string body,
                      std::vector<std::string> returned) {
  main_params_ = params;
  main_results_ = results;
  main_body_ = std::move(body);
  main_returned_ = std::move(returned);
}

std::string Module::text() const {
  std::string m;
  m.reserve(main_body_.size() + 512);
  m += "module @" + name_ + " attributes {mhlo.num_partitions = " + std::to_string(attributes_.num_partitions) +
       " : i32, mhlo.num_replicas = " + std::to_string(attributes_.num_replicas) + " : i32} {\n";
  for (const std::string& name : order_) m += functions_.at(name)();
  write_function(m, "func.func public @main", main_params_, main_results_, main_body_, main_returned_);
  m += "}\n";
  return m;
}

}  // namespace tpu::hlo
