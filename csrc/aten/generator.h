// The tpu random generator: a seed and an offset, laid out as CUDA's philox
// state (16 bytes: seed, then offset). A random op that draws n values
// takes positions [offset, offset + n) of the seed's counter-based stream
// (stablehlo.rng_bit_generator, ThreeFry: value i comes from counter
// offset + i alone) and moves the offset on by n rounded up to a multiple
// of 4, as DTensor's OffsetBasedRNGTracker advances CUDA's. So a shard that
// starts at position offset + k draws exactly the values the whole tensor
// has at k.. (DTensor's sharded random init equals the single-device one),
// and consecutive ops never share positions.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace tpu {

class TpuGenerator : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device, uint64_t seed = 67280421310721ull);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override { return counter_; }
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The (seed, offset) of a random op drawing `count` values; moves the
  // offset past them (rounded up to a multiple of 4).
  std::pair<uint64_t, uint64_t> next_key(uint64_t count);

 private:
  TpuGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t counter_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace tpu
