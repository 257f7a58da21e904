#include "csrc/aten/generator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <random>

#include "csrc/exec/runtime.h"

namespace tpu {

TpuGenerator::TpuGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void TpuGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  counter_ = 0;
}

uint64_t TpuGenerator::seed() {
  std::random_device rd;
  uint64_t s = (static_cast<uint64_t>(rd()) << 32) | rd();
  set_current_seed(s);
  return s;
}

// State: 16 bytes, the seed then the offset (little endian), as a uint8 CPU
// tensor like every other generator's get_state(): CUDA's philox layout,
// which DTensor's OffsetBasedRNGTracker reads and writes.
c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  // Made without the dispatcher, so that a Python mode (FakeTensorMode, as
  // torch.compile's tracing runs) cannot hand back a tensor without data.
  at::Tensor state = at::detail::empty_cpu({16}, at::kByte, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  uint64_t words[2] = {seed_, counter_};
  std::memcpy(state.data_ptr(), words, sizeof(words));
  return state.getIntrusivePtr();
}

void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  // CPU's contract: a CPU ByteTensor (TypeError otherwise), of the right size.
  TORCH_CHECK_TYPE(new_state.device_type() == c10::DeviceType::CPU && new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "RNG state must be a torch.ByteTensor (a uint8 tensor on the CPU), got a ", new_state.dtype(),
                   " tensor on ", new_state.device_type());
  TORCH_CHECK(new_state.numel() == 16, "Expected a tpu generator state of 16 bytes but found the input RNG state size to be ",
              new_state.numel());
  TORCH_CHECK(!new_state.is_python_dispatch(), "set_state: the RNG state is a tensor subclass or a fake tensor "
              "(as under FakeTensorMode); pass the real uint8 CPU tensor that get_state() returned");
  TORCH_CHECK(new_state.is_contiguous() && new_state.has_storage() && new_state.data() != nullptr,
              "set_state: the RNG state must be a contiguous tensor with data");
  uint64_t words[2];
  std::memcpy(words, new_state.data(), sizeof(words));
  TORCH_CHECK(words[1] % 4 == 0, "offset must be a multiple of 4");  // CUDA's rule for its philox offset
  seed_ = words[0];
  counter_ = words[1];
}

void TpuGenerator::set_offset(uint64_t offset) {
  TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4");
  counter_ = offset;
}

std::pair<uint64_t, uint64_t> TpuGenerator::next_key(uint64_t count) {
  const uint64_t offset = counter_;
  counter_ += (count + 3) / 4 * 4;
  return {seed_, offset};
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto* g = new TpuGenerator(device().index(), seed_);
  g->counter_ = counter_;
  return g;
}

namespace {
std::mutex g_mu;
std::deque<at::Generator>& generators() {
  static auto* g = new std::deque<at::Generator>();
  return *g;
}
}  // namespace

const at::Generator& default_generator(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& gens = generators();
  if (gens.empty()) {
    const int n = exec::Runtime::get().device_count();
    for (int i = 0; i < n; ++i) {
      gens.push_back(at::make_generator<TpuGenerator>(static_cast<c10::DeviceIndex>(i)));
    }
  }
  const int d = device < 0 ? 0 : device;
  TORCH_CHECK(d < static_cast<int>(gens.size()), "tpu: no device ", d, " (", gens.size(),
              " device(s) available)");
  return gens[d];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<TpuGenerator>(device < 0 ? 0 : device);
}

}  // namespace tpu
