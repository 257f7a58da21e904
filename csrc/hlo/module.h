// A StableHLO module as one object: its functions (private ones built by
// lowerings or imported as text, and the public `main`) and its attributes
// (replicas, partitions). Strict and fused eager and compiled graphs all
// make their programs through it; this is the one place module text is
// written.
//
// A function is given by its name and a way to make its text, called only
// when the module's text is needed (fused eager builds a recorded op's text
// only when its graph misses the executable cache).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "csrc/hlo/types.h"

namespace tpu::hlo {

struct ModuleAttributes {
  int num_replicas = 1;
  int num_partitions = 1;
  bool operator==(const ModuleAttributes& o) const {
    return num_replicas == o.num_replicas && num_partitions == o.num_partitions;
  }
};

// One parameter of a function: its SSA name (without '%'), its type, and the
// result index it may donate its buffer to (tf.aliasing_output; -1: none).
struct Parameter {
  std::string name;
  Type type;
  int alias = -1;
};

// Writes `head(params) -> (results) { body  return(returned) }`: the one
// writer of function text. `body` holds the ops, one per line, indented;
// `returned` names the returned values (without '%').
void write_function(std::string& out, std::string_view head, const std::vector<Parameter>& params,
                    const std::vector<Type>& results, std::string_view body,
                    const std::vector<std::string>& returned);

class Module {
 public:
  explicit Module(std::string name = "tpu_program", ModuleAttributes attributes = {})
      : name_(std::move(name)), attributes_(attributes) {}

  const ModuleAttributes& attributes() const { return attributes_; }

  // A private function (`func.func private @name`); a name already present
  // keeps its first text. Returns whether it was added.
  bool add_function(const std::string& name, std::function<std::string()> text);
  bool has_function(const std::string& name) const { return functions_.count(name) != 0; }
  size_t num_functions() const { return order_.size(); }

  // The public entry point.
  void set_main(const std::vector<Parameter>& params, const std::vector<Type>& results, std::string body,
                std::vector<std::string> returned);

  // The module's text (functions in the order they were added, then main).
  std::string text() const;

 private:
  std::string name_;
  ModuleAttributes attributes_;
  std::vector<std::string> order_;
  std::unordered_map<std::string, std::function<std::string()>> functions_;
  std::vector<Parameter> main_params_;
  std::vector<Type> main_results_;
  std::string main_body_;
  std::vector<std::string> main_returned_;
};

}  // namespace tpu::hlo
