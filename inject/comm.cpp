// Fault kind `comm`: corrupts this rank's contribution to the gradient all-reduce after the
// rank's own checks, as a faulty link or DMA would. `target` names one of FSDP2's collectives
// instead (the Python agent's, inject/python/nanchaos/faults/comm.py): built-in jobs all-reduce
// their gradients and have neither, so a `target` is refused at load for them.
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <optional>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

// Corrupts this rank's contribution to the gradient all-reduce, after the rank's own checks, as a
// faulty link or DMA engine would: the elements are chosen in the packed send buffer.
class CommInjector final : public Injector {
 public:
  explicit CommInjector(const harness::FaultSpec& f) : Injector(f) {
    if (f.params.given("bit"))
      bit_ = int(f.params.get_int("bit"));
    else if (f.params.has("value"))
      value_ = f.params.get_float("value");
  }
  void on_send_buffer(FaultContext& ctx, void* buf, size_t n, harness::WireType wire) override {
    if (!armed(ctx)) return;
    const auto idx = pick_elements(int64_t(n), ctx);
    const size_t width = harness::wire_bytes(wire);
    auto* bytes = static_cast<unsigned char*>(buf);
    for (int64_t i : idx) {
      unsigned char* el = bytes + size_t(i) * width;
      if (bit_) {
        const int bit = *bit_;  // bit of the wire word (checked at load: < 16 for 16-bit wires)
        el[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      } else if (wire == harness::WireType::kFp32) {
        const float v = float(value_);
        std::memcpy(el, &v, 4);
      } else {
        const uint16_t h = wire == harness::WireType::kFp16
                               ? harness::float_to_half_bits(float(value_))
                               : harness::float_to_bf16_bits(float(value_));
        std::memcpy(el, &h, 2);
      }
    }
    ctx.fired(spec_.index, "grad_allreduce",
              {{"elements", idx.size()}, {"first_element", idx.empty() ? -1 : idx[0]}});
  }

 private:
  std::optional<int> bit_;
  double value_ = std::numeric_limits<double>::quiet_NaN();
};

using harness::FaultKindInfo;
using harness::FaultSpec;
using harness::Key;
using harness::KeyType;

FaultKindInfo comm_kind() {
  FaultKindInfo info;
  info.name = "comm";
  info.doc = "corrupts this rank's all-reduce send buffer after its checks (faulty link or DMA)";
  info.keys = {
      Key("value", KeyType::kFloatOrSpecial, "what the chosen elements become (unless `bit`)")
          .def("nan"),
      Key("bit", KeyType::kInt,
          "flip this bit of the wire element instead of writing `value` (0..31 for fp32, "
          "0..15 for an fp16/bf16 grad_allreduce_dtype)")
          .range(0, 31),
      Key("count", KeyType::kInt, "elements hit").def(1).min(1),
      Key("target", KeyType::kString,
          "FSDP2 external jobs: the collective hit instead of the gradient all-reduce: "
          "reduce_scatter (this rank's gradient contribution) or all_gather (this rank's shard "
          "as sent); unset: the gradient all-reduce")
          .choices({"reduce_scatter", "all_gather"}),
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<CommInjector>(f);
  };
  info.check = [](const FaultSpec& f) { harness::check_exclusive(f, "value", "bit"); };
  info.check_job = [](const FaultSpec& f, const harness::Scenario& s) {
    if (f.params.given("target") && !s.job.external()) {
      harness::scenario_error(
          f.params.pos("target"),
          harness::fault_label(f) + ".target: \"" + f.params.get_string("target") +
              "\" is not implemented for built-in jobs: FSDP2 external jobs only (the built-in "
              "stack all-reduces its gradients); remove `target` to hit the all-reduce");
    }
    if (f.params.given("bit") && f.params.get_int("bit") > 15 &&
        s.job.grad_allreduce_dtype != harness::DType::kFp32) {
      harness::scenario_error(f.params.pos("bit"),
                              harness::fault_label(f) + ".bit: the all-reduce travels in " +
                                  harness::to_string(s.job.grad_allreduce_dtype) +
                                  " (16-bit words); expected integer in [0, 15]");
    }
  };
  // The send buffer is edited after the rank's checks: a CUDA rank stages it through host memory.
  info.edits_send_buffer = true;
  info.python_agent = true;
  info.python_only = [](const FaultSpec& f) -> std::string {
    if (!f.params.has("target")) return "";
    return "target = \"" + f.params.get_string("target") + "\" (an FSDP2 collective)";
  };
  // Campaigns: a value or a bit of the wire word (16 bits on a half-precision all-reduce).
  // --values finite: a finite flip of the wire word (fp32, fp16 or bf16); nonfinite: a value.
  info.values_refusal = [](harness::DrawValues) { return std::string(); };
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    const harness::Scenario& s = d.scenario();
    const bool half_wire = !s.job.external() && s.job.grad_allreduce_dtype != harness::DType::kFp32;
    if (d.values() == harness::DrawValues::kFinite) {
      f["bit"] = d.finite_bit(
          harness::float_word(half_wire ? s.job.grad_allreduce_dtype : harness::DType::kFp32));
    } else if (d.values() == harness::DrawValues::kNonfinite || d.below(2) == 0) {
      f["value"] = d.value();
    } else {
      f["bit"] = d.bit(half_wire ? 16 : 32);
    }
  };
  info.finite = [](const nlohmann::ordered_json& f, const harness::Scenario& s) {
    if (f.contains("value")) return harness::finite_value(f.at("value"));
    const bool half_wire = !s.job.external() && s.job.grad_allreduce_dtype != harness::DType::kFp32;
    return f.contains("bit") &&
           harness::finite_flip(
               f.at("bit").get<int64_t>(),
               harness::float_word(half_wire ? s.job.grad_allreduce_dtype : harness::DType::kFp32));
  };
  info.truth = [](const nlohmann::ordered_json&) {
    return harness::KindTruth{harness::Cause::kCommCorruption, std::nullopt};
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(comm, comm_kind());

}  // namespace nanchaos::inject
