// The Fused primitive: builds each kernel's output arrays and runs the kernel as one task on the CPU stream.
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "fused.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"

namespace tcg {

namespace {

// A pointer to `a`'s elements in row-major order: its own buffer when it is row-contiguous, else a copy
// (MLX's copy helpers are not exported to extensions; inputs are almost always contiguous already).
const void* dense(const mx::array& a, std::vector<std::vector<char>>& temps) {
  if (a.flags().row_contiguous) return a.data<void>();
  size_t item = a.itemsize(), n = a.size();
  temps.emplace_back(n * item);
  char* dst = temps.back().data();
  const char* src = static_cast<const char*>(a.data<void>());
  auto shape = a.shape();
  auto strides = a.strides();
  int nd = static_cast<int>(shape.size());
  std::vector<int64_t> idx(nd, 0);
  for (size_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) off += idx[d] * strides[d];
    std::memcpy(dst + e * item, src + off * item, item);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return dst;
}

template <typename T>
const T* in(const std::vector<mx::array>& xs, int i, std::vector<std::vector<char>>& temps) {
  return static_cast<const T*>(dense(xs[i], temps));
}

void run(Kind kind, const std::vector<int>& ints, const std::vector<float>& floats,
         const std::vector<mx::array>& xs, std::vector<mx::array>& outs) {
  std::vector<std::vector<char>> temps;
  switch (kind) {
    case Kind::Grads: {
      const int* I[4];
      const float* P[12];
      for (int i = 0; i < 12; ++i) P[i] = in<float>(xs, 15 + i, temps);
      I[0] = in<int>(xs, 1, temps), I[1] = in<int>(xs, 2, temps), I[2] = in<int>(xs, 3, temps);
      I[3] = in<int>(xs, 5, temps);
      GradsIn g{in<float>(xs, 0, temps), in<float>(xs, 4, temps), in<float>(xs, 6, temps), I[0], I[1], I[2], I[3],
                in<bool>(xs, 7, temps), in<int>(xs, 8, temps), in<float>(xs, 9, temps), in<float>(xs, 10, temps),
                in<float>(xs, 11, temps), in<float>(xs, 12, temps), in<float>(xs, 13, temps), in<float>(xs, 14, temps),
                P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9], P[10], P[11]};
      float* o[14];
      for (int i = 0; i < 14; ++i) o[i] = outs[i].data<float>();
      GradsOut go{o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8], o[9], o[10], o[11], o[12], o[13]};
      const auto& x = xs[0];
      GradsShape sh{x.shape(0), x.shape(1), xs[6].shape(1), xs[7].shape(1), xs[3].shape(0), xs[3].shape(1), ints[1],
                    ints[0] != 0, floats[0], ints[2] != 0, (long)ints[3]};
      loss_and_grads(g, go, sh);
      break;
    }
    case Kind::ClipAdamW: {
      size_t n = static_cast<size_t>(ints[0]);
      bool prescaled = ints[1] != 0;
      std::vector<const float*> g(n), p(n), m(n), v(n);
      std::vector<float*> po(n), mo(n), vo(n);
      std::vector<size_t> sizes(n);
      for (size_t i = 0; i < n; ++i) {
        g[i] = in<float>(xs, i, temps);
        p[i] = in<float>(xs, n + i, temps);
        m[i] = in<float>(xs, 2 * n + i, temps);
        v[i] = in<float>(xs, 3 * n + i, temps);
        sizes[i] = xs[i].size();
        po[i] = outs[1 + i].data<float>();
        mo[i] = outs[1 + n + i].data<float>();
        vo[i] = outs[1 + 2 * n + i].data<float>();
      }
      float lr = *in<float>(xs, 4 * n, temps);
      const float* prescale = prescaled ? in<float>(xs, 4 * n + 1, temps) : nullptr;
      AdamW c{floats[0], floats[1], floats[2], floats[3], floats[4], floats[5], floats[6]};
      clip_adamw(g, p, m, v, sizes, prescale, lr, c, outs[0].data<float>(), po, mo, vo);
      break;
    }
  }
}

std::vector<mx::array> make(Kind kind, std::vector<int> ints, std::vector<float> floats, std::vector<mx::Shape> shapes,
                            std::vector<mx::array> inputs) {
  auto s = mx::default_stream(mx::default_device());
  std::vector<mx::Dtype> dtypes(shapes.size(), mx::float32);
  return mx::array::make_arrays(std::move(shapes), dtypes,
                                std::make_shared<Fused>(s, kind, std::move(ints), std::move(floats)),
                                std::move(inputs));
}

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

void Fused::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (auto& i : inputs) encoder.set_input_array(i);
  for (auto& o : outputs) encoder.set_output_array(o);
  encoder.dispatch([kind = kind_, ints = ints_, floats = floats_, inputs, outputs]() mutable {
    run(kind, ints, floats, inputs, outputs);
  });
}

void Fused::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("tcgexp's fused kernels run on the CPU only (trainer.kernels=pure on a GPU)");
}

const char* Fused::name() const {
  switch (kind_) {
    case Kind::ClipAdamW: return "TcgClipAdamW";
    case Kind::Grads: return "TcgLossAndGrads";
  }
  return "TcgFused";
}

bool Fused::is_equivalent(const mx::Primitive& other) const {
  auto* o = dynamic_cast<const Fused*>(&other);
  return o && o->kind_ == kind_ && o->ints_ == ints_ && o->floats_ == floats_;
}

// ---- operations ----
std::vector<mx::array> grads_op(const std::vector<mx::array>& inputs, const std::vector<mx::array>& targets,
                                const std::vector<mx::array>& params, bool memory, int block, float aux_weight,
                                bool helper, long split_min) {
  check(inputs.size() == 7 && targets.size() == 8 && params.size() == 12, "grads: 7 inputs, 8 targets, 12 parameters");
  const auto& h0 = inputs[6];
  std::vector<mx::Shape> shapes{{7}, h0.shape()};
  for (const auto& p : params) shapes.push_back(p.shape());
  std::vector<mx::array> all(inputs);
  all.insert(all.end(), targets.begin(), targets.end());
  all.insert(all.end(), params.begin(), params.end());
  for (int i : {0, 4, 6}) check(all[i].dtype() == mx::float32, "grads: x, label_hot and h0 must be float32");
  for (int i : {1, 2, 3, 5, 8}) check(all[i].dtype() == mx::int32, "grads: indices and labels must be int32");
  check(all[7].dtype() == mx::bool_, "grads: action_mask must be bool");
  for (int i = 9; i < 27; ++i) check(all[i].dtype() == mx::float32, "grads: targets and parameters must be float32");
  check(split_min >= 0 && split_min <= INT32_MAX, "grads: split_min in [0, 2**31)");
  return make(Kind::Grads, {memory ? 1 : 0, block, helper ? 1 : 0, static_cast<int>(split_min)}, {aux_weight}, shapes, all);
}

std::vector<mx::array> clip_adamw_op(const std::vector<mx::array>& grads, const std::vector<mx::array>& params,
                                     const std::vector<mx::array>& m, const std::vector<mx::array>& v,
                                     const mx::array& lr, const std::optional<mx::array>& prescale,
                                     const std::vector<float>& consts) {
  size_t n = grads.size();
  check(params.size() == n && m.size() == n && v.size() == n && consts.size() == 7, "clip_adamw: arguments");
  std::vector<mx::array> inputs;
  std::vector<mx::Shape> shapes{{}};
  for (auto* group : {&grads, &params, &m, &v})
    for (auto& x : *group) inputs.push_back(x);
  for (int k = 0; k < 3; ++k)
    for (auto& p : params) shapes.push_back(p.shape());
  inputs.push_back(lr);
  if (prescale) inputs.push_back(*prescale);
  return make(Kind::ClipAdamW, {static_cast<int>(n), prescale ? 1 : 0}, consts, shapes, inputs);
}

}  // namespace tcg
