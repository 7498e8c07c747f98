// GradBucket (grad_bucket.h): the flat gradient bucket, its wire buffer and their scans.
#include "harness/job/grad_bucket.h"

namespace nanchaos::harness {
namespace {

WireType wire_of(DType d) {
  switch (d) {
    case DType::kFp16:
      return WireType::kFp16;
    case DType::kBf16:
      return WireType::kBf16;
    default:
      return WireType::kFp32;
  }
}

}  // namespace

GradBucket::GradBucket(const std::vector<torch::Tensor>& params, DType wire, bool predivide,
                       int world, torch::Device device)
    : params_(params),
      wire_(wire_of(wire)),
      predivide_(predivide),
      world_(world),
      cuda_(device.is_cuda()) {
  size_t total = 0;
  for (auto& p : params_) total += size_t(p.numel());
  bucket_ = torch::zeros({int64_t(total)}, torch::TensorOptions(torch::kFloat32).device(device));
  int64_t off = 0;
  for (auto& p : params_) {
    p.mutable_grad() = bucket_.narrow(0, off, p.numel()).view_as(p);
    off += p.numel();
  }
  in_place_ = wire_ == WireType::kFp32 && !predivide_;
  pre_scale_ = predivide_ ? 1.0f / float(world_) : 1.0f;
  if (!in_place_ && cuda_) {
    const auto wt = wire_ == WireType::kFp16   ? torch::kHalf
                    : wire_ == WireType::kBf16 ? torch::kBFloat16
                                               : torch::kFloat32;
    wire_t_ = torch::zeros({int64_t(total)}, torch::TensorOptions(wt).device(device));
  } else if (!in_place_) {
    wire_buf_.resize(total * wire_bytes(wire_));
  }
  if (cuda_) gpu_scan_ = std::make_unique<CudaScanner>();
}

GradBucket::~GradBucket() = default;

DType GradBucket::elem() const {
  switch (wire_) {
    case WireType::kFp16:
      return DType::kFp16;
    case WireType::kBf16:
      return DType::kBf16;
    default:
      return DType::kFp32;
  }
}

void GradBucket::realias() {
  int64_t off = 0;
  for (auto& p : params_) {
    auto view = bucket_.narrow(0, off, p.numel()).view_as(p);
    off += p.numel();
    if (!p.grad().defined() || p.grad().data_ptr() != view.data_ptr()) {
      torch::NoGradGuard ng;
      if (p.grad().defined()) view.copy_(p.grad());
      p.mutable_grad() = view;
    }
  }
}

std::vector<ConstSpan> GradBucket::grad_spans() const {
  std::vector<ConstSpan> spans;
  for (auto& p : params_) spans.push_back({p.grad().data_ptr<float>(), size_t(p.numel())});
  return spans;
}

ScanStats GradBucket::scan_local(bool needed) {
  const std::vector<ConstSpan> spans = grad_spans();
  ScanStats pre;
  if (cuda_) {
    gpu_scan_->scan(spans, nullptr, &pre);  // one launch, one host sync
    if (!in_place_) {                       // cast / pre-divide on the device
      torch::NoGradGuard ng;
      wire_t_.copy_(pre_scale_ == 1.0f ? bucket_ : bucket_ * pre_scale_);
    }
  } else if (in_place_) {
    if (needed) scan(spans, &pre);  // the bucket is the send buffer
  } else {
    pack_and_scan(spans, wire_buf_.data(), wire_, pre_scale_, &pre);  // cast / pre-divide
  }
  return pre;
}

ScanStats GradBucket::scan_only() {
  const std::vector<ConstSpan> spans = grad_spans();
  ScanStats stats;
  if (cuda_) {
    gpu_scan_->scan(spans, nullptr, &stats);
  } else {
    scan(spans, &stats);
  }
  return stats;
}

void* GradBucket::send_buffer(const std::function<void(void*, size_t, WireType)>& edit,
                              bool stage) {
  const size_t n = count();
  if (cuda_) {
    torch::Tensor send_t = in_place_ ? bucket_ : wire_t_;
    if (stage) {  // the edit works on a host copy of the device buffer
      auto host = send_t.cpu();
      edit(host.data_ptr(), n, wire_);
      send_t.copy_(host);
    }
    return send_t.data_ptr();
  }
  void* send = in_place_ ? bucket_.data_ptr() : static_cast<void*>(wire_buf_.data());
  edit(send, n, wire_);
  return send;
}

ScanStats GradBucket::scan_reduced(double loss_scale) {
  std::vector<MutSpan> outs;
  for (auto& p : params_) outs.push_back({p.grad().data_ptr<float>(), size_t(p.numel())});
  ScanStats post;
  float post_scale = predivide_ ? 1.0f : 1.0f / float(world_);
  if (loss_scale != 1.0) post_scale = float(double(post_scale) / loss_scale);  // unscale, fused
  if (cuda_) {
    if (!in_place_) bucket_.copy_(wire_t_);  // wire -> fp32, then scaled in the scan
    gpu_scan_->scale_and_scan(outs, post_scale, nullptr, &post);
  } else if (in_place_) {
    scale_and_scan(outs, post_scale, &post);
  } else {
    unpack_and_scan(wire_buf_.data(), wire_, post_scale, outs, &post);
  }
  return post;
}

}  // namespace nanchaos::harness
