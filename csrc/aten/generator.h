// The tpu random generator: a seed and a counter. Every random op takes the
// next counter value and runs the device's counter-based generator
// (stablehlo.rng_bit_generator, ThreeFry) keyed by (seed, counter), so
// streams are reproducible and independent of where they run.
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
  void set_offset(uint64_t offset) override { counter_ = offset; }
  uint64_t get_offset() const override { return counter_; }
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The key for the next random op (advances the counter).
  std::pair<uint64_t, uint64_t> next_key();

 private:
  TpuGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t counter_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace tpu
