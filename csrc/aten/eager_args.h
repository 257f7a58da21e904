// The arguments of one eager op call as a lowering reads them
// (lowering::Args): tensors become operands of the op's EagerProgram,
// numbers the lowering reads on the host are noted (they key the op's
// plan), and device-side checks name the op's inputs.
#pragma once

#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/aten/eager.h"
#include "csrc/lowering/lowering.h"

namespace tpu {

class EagerArgs final : public lowering::Args {
 public:
  using Value = hlo::Value;

  // `numbers`: the Scalar arguments (OpSignature): reading one as an int
  // or a bool keys the plan by its value, as reading it as a number does.
  EagerArgs(EagerProgram& p, c10::ArrayRef<c10::IValue> args, std::optional<at::ScalarType> out_dtype,
            uint64_t numbers = 0)
      : p_(p),
        args_(args),
        values_(args.size()),
        infos_(args.size()),
        read_(args.size()),
        out_dtype_(out_dtype),
        numbers_(numbers) {}

  size_t size() const override { return args_.size(); }
  bool is_none(size_t i) const override {
    const c10::IValue& v = args_.at(i);
    return v.isNone() || (v.isTensor() && !v.toTensor().defined());
  }
  bool is_tensor(size_t i) const override { return args_.at(i).isTensor(); }

  Value tensor(size_t i) override {
    if (!values_[i].valid()) values_[i] = p_.input(args_.at(i).toTensor(), {static_cast<int>(i), -1});
    return values_[i];
  }
  const lowering::TensorInfo& info(size_t i) override {
    if (!infos_[i]) infos_[i] = info_of(args_.at(i).toTensor());
    return *infos_[i];
  }
  std::vector<Value> tensors(size_t i) override {
    std::vector<Value> out;
    int k = 0;
    for (const at::Tensor& t : list(i)) {
      out.push_back(t.defined() ? p_.input(t, {static_cast<int>(i), k}) : Value{});
      ++k;
    }
    return out;
  }
  std::vector<lowering::TensorInfo> infos(size_t i) override {
    std::vector<lowering::TensorInfo> out;
    for (const at::Tensor& t : list(i)) {
      out.push_back(t.defined() ? info_of(t) : lowering::TensorInfo{at::ScalarType::Undefined, {}, false});
    }
    return out;
  }
  int64_t int_(size_t i) const override {
    note_number(i);
    const c10::IValue& v = args_.at(i);
    if (v.isBool()) return v.toBool();
    return v.toSymInt().expect_int();
  }
  std::vector<int64_t> ints(size_t i) const override {
    note_number(i);
    const c10::IValue& v = args_.at(i);
    if (v.isIntList()) return v.toIntVector();
    if (v.isInt() || v.isSymInt()) return {v.toSymInt().expect_int()};
    std::vector<int64_t> out;
    for (const c10::IValue& e : v.toListRef()) {
      out.push_back(e.isBool() ? static_cast<int64_t>(e.toBool()) : e.toSymInt().expect_int());
    }
    return out;
  }
  double double_(size_t i) const override {
    const c10::IValue& v = args_.at(i);
    read_[i] = true;
    return v.isInt() ? static_cast<double>(v.toInt()) : v.toDouble();
  }
  bool bool_(size_t i) const override {
    note_number(i);
    return args_.at(i).toBool();
  }
  std::string string(size_t i) const override { return args_.at(i).toStringRef(); }
  c10::Scalar scalar(size_t i) const override {
    read_[i] = true;
    return host_number(args_.at(i));
  }
  at::ScalarType scalar_type(size_t i) const override { return args_.at(i).toScalarType(); }
  std::vector<double> doubles(size_t i) const override {
    read_[i] = true;
    return args_.at(i).toDoubleVector();
  }
  std::vector<c10::Scalar> scalars(size_t i) const override {
    read_[i] = true;
    std::vector<c10::Scalar> out;
    for (const c10::IValue& e : args_.at(i).toListRef()) out.push_back(e.toScalar());
    return out;
  }
  size_t list_size(size_t i) const override { return args_.at(i).toListRef().size(); }
  at::ScalarType scalar_kind(size_t i) const override { return kind_of(args_.at(i)); }
  at::ScalarType element_kind(size_t i, size_t k) const override { return kind_of(args_.at(i).toListRef().at(k)); }
  bool is_tensor_list(size_t i) const override {
    const c10::IValue& v = args_.at(i);
    if (v.isTensorList()) return true;
    if (!v.isList()) return false;
    auto kind = v.toList().elementType()->kind();
    return kind == c10::TypeKind::OptionalType || kind == c10::TypeKind::TensorType;
  }
  bool is_scalar_list(size_t i) const override {
    const c10::IValue& v = args_.at(i);
    return v.isList() && !is_tensor_list(i) && !v.isIntList() && !v.isBoolList();
  }
  Value scalar_value(size_t i, hlo::DType dtype) override {
    return p_.scalar(host_number(args_.at(i)), dtype, {static_cast<int>(i), -1});
  }
  Value element_value(size_t i, size_t k, hlo::DType dtype) override {
    return p_.scalar(host_number(args_.at(i).toListRef().at(k)), dtype, {static_cast<int>(i), static_cast<int>(k)});
  }
  Value runtime_scalar(const c10::Scalar& s, hlo::DType dtype) override { return p_.scalar(s, dtype); }
  Value rng_key(size_t i, uint64_t count) override {
    // Ops without a generator argument (native_dropout) use the default one.
    if (i >= args_.size() || args_[i].isNone() || !args_[i].isGenerator()) return p_.rng_key(std::nullopt, -1, count);
    return p_.rng_key(args_[i].toGenerator(), static_cast<int>(i), count);
  }
  void assign(size_t i, Value v) override {
    const at::Tensor& t = args_.at(i).toTensor();
    p_.assign(t, p_.builder().convert(v, lowering::to_hlo(t.scalar_type())), {static_cast<int>(i), -1});
  }
  void assign_list(size_t i, const std::vector<Value>& vs) override {
    std::vector<at::Tensor> ts = list(i);
    TORCH_CHECK(ts.size() == vs.size(), "torch_tpu internal error: ", vs.size(),
                " values for a list of ", ts.size(), " tensors");
    for (size_t k = 0; k < ts.size(); ++k) {
      p_.assign(ts[k], p_.builder().convert(vs[k], lowering::to_hlo(ts[k].scalar_type())), {static_cast<int>(i), static_cast<int>(k)});
    }
  }
  int64_t host_int(Value v) override {
    data_dependent_ = true;
    return p_.evaluate_int(v);
  }
  void output_depends_on_data() override { data_dependent_ = true; }
  // Whether the output shape depended on data (PyTorch's meta kernels cannot
  // check such calls, and the program cannot be reused).
  bool data_dependent() const { return data_dependent_; }
  // The arguments whose numbers the lowering read on the host.
  const std::vector<bool>& numbers_read() const { return read_; }
  std::optional<at::ScalarType> out_dtype() const override { return out_dtype_; }
  bool varies(size_t i, int64_t dim) const override {
    const c10::IValue& v = args_.at(i);
    return v.isTensor() && p_.varies(v.toTensor(), dim);
  }
  Value run_time_size(size_t i, int64_t dim) override {
    return p_.run_time_size(args_.at(i).toTensor(), dim, {static_cast<int>(i), -1});
  }
  // Device-side checks name the op's inputs, since they may surface later
  // (at the next synchronization) than the line that issued the op. (A
  // bucketed operand's varying sizes are named as each run had them.)
  void check(Value ok, const std::string& message) override {
    std::string inputs;
    auto name = [&](const at::Tensor& t, size_t i, int element) {
      if (!t.defined()) return;
      inputs += inputs.empty() ? "" : ", ";
      inputs += std::string(c10::toString(t.scalar_type())) + "[";
      for (int64_t d = 0; d < t.dim(); ++d) {
        inputs += d == 0 ? "" : ", ";
        inputs += p_.varies(t, d) ? lowering::size_mark(i, d, element) : std::to_string(t.size(d));
      }
      inputs += "]";
    };
    for (size_t i = 0; i < args_.size(); ++i) {
      const c10::IValue& v = args_[i];
      if (v.isTensor()) {
        name(v.toTensor(), i, -1);
      } else if (is_tensor_list(i)) {
        int k = 0;
        for (const c10::IValue& e : v.toListRef()) name(e.isTensor() ? e.toTensor() : at::Tensor(), i, k++);
      }
    }
    p_.check(ok, inputs.empty() ? message : message + " [inputs: " + inputs + "]");
  }

 private:
  // A number argument's value; a tpu tensor's makes the host wait for it.
  c10::Scalar host_number(const c10::IValue& v) const {
    if (v.isTensor() && is_tpu(v.toTensor())) data_dependent_ = true;
    return number_of(v);
  }
  static at::ScalarType kind_of(const c10::IValue& v) {
    if (!v.isTensor()) return v.toScalar().type();
    const at::ScalarType t = v.toTensor().scalar_type();
    if (c10::isComplexType(t)) return at::kComplexDouble;
    if (c10::isFloatingType(t)) return at::kDouble;
    return t == at::kBool ? at::kBool : at::kLong;
  }
  static lowering::TensorInfo info_of(const at::Tensor& t) {
    return lowering::TensorInfo{t.scalar_type(), t.sizes().vec(),
                                t.unsafeGetTensorImpl()->is_wrapped_number(), t.is_contiguous()};
  }
  std::vector<at::Tensor> list(size_t i) const {
    const c10::IValue& v = args_.at(i);
    if (v.isTensorList()) return v.toTensorVector();
    std::vector<at::Tensor> out;
    for (const c10::IValue& e : v.toListRef()) out.push_back(e.isNone() ? at::Tensor() : e.toTensor());
    return out;
  }

  EagerProgram& p_;
  c10::ArrayRef<c10::IValue> args_;
  std::vector<Value> values_;
  std::vector<std::optional<lowering::TensorInfo>> infos_;
  mutable std::vector<bool> read_;
  std::optional<at::ScalarType> out_dtype_;
  uint64_t numbers_;
  mutable bool data_dependent_ = false;

  void note_number(size_t i) const {
    if (i < 64 && (numbers_ >> i & 1)) read_[i] = true;
  }
};

}  // namespace tpu
