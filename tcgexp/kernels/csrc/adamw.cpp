// Global-norm clipping and MLX's AdamW (no bias correction) over all parameters in one task.
//
// step.py's clip: norm = sqrt(sum(square(concatenate(g)))) summed in order, as MLX's CPU reduction
// does (one lane wide on x86), g * min(clip / (norm + 1e-6), 1); then per element, in
// mlx.optimizers.AdamW's order: p (1 - lr wd), m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p - lr m / (sqrt(v) + eps).
#include <cmath>
#include <vector>

#include "common.h"
#include "fused.h"

namespace tcg {

namespace {

// (constants by value and restrict pointers: else every store might change them, and nothing vectorises)
TCG_CLONES void update(const float* __restrict g, const float* __restrict p, const float* __restrict m,
                       const float* __restrict v, size_t n, float pre, bool prescaled, float scale, bool clipped,
                       float lr, float decay, const AdamW c, float* __restrict po, float* __restrict mo,
                       float* __restrict vo) {
  const float b1 = c.b1, b1c = c.one_minus_b1, b2 = c.b2, b2c = c.one_minus_b2, eps = c.eps;
  for (size_t e = 0; e < n; ++e) {
    float ge = prescaled ? g[e] * pre : g[e];
    if (clipped) ge = ge * scale;
    float pd = p[e] * decay;
    float me = b1 * m[e] + b1c * ge;
    float ve = b2 * v[e] + b2c * (ge * ge);
    mo[e] = me, vo[e] = ve;
    po[e] = pd - lr * me / (std::sqrt(ve) + eps);
  }
}

}  // namespace

TCG_CLONES void clip_adamw(const std::vector<const float*>& grads, const std::vector<const float*>& params,
                const std::vector<const float*>& m, const std::vector<const float*>& v,
                const std::vector<size_t>& sizes, const float* prescale, float lr, const AdamW& c, float* norm,
                const std::vector<float*>& params_out, const std::vector<float*>& m_out,
                const std::vector<float*>& v_out) {
  float pre = prescale ? *prescale : 1.0f;
  float sum = 0.0f;  // a strict chain of additions: the order MLX's sum has
  for (size_t i = 0; i < grads.size(); ++i) {
    const float* g = grads[i];
    for (size_t e = 0; e < sizes[i]; ++e) {
      float ge = prescale ? g[e] * pre : g[e];
      sum = sum + ge * ge;
    }
  }
  float nrm = std::sqrt(0.0f + sum);
  *norm = nrm;
  bool clipped = c.grad_clip > 0.0f;
  float scale = clipped ? minf(c.grad_clip / (nrm + 1e-6f), 1.0f) : 1.0f;
  float decay = 1.0f - lr * c.weight_decay;
  for (size_t i = 0; i < grads.size(); ++i)
    update(grads[i], params[i], m[i], v[i], sizes[i], pre, prescale != nullptr, scale, clipped, lr, decay, c,
           params_out[i], m_out[i], v_out[i]);
}

}  // namespace tcg
