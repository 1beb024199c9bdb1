// The loss head (losses.loss_terms and backprop.py's gradient of the heads: the policy's, the aux heads' and the
// option head's stop head's) and the ReLU layers' backward.
#include <cmath>
#include <limits>
#include <vector>

#include "common.h"
#include "fused.h"

namespace tcg {

namespace {

// MLX's LogSumExp on one row (mlx/backend/cpu/logsumexp.cpp, one lane wide on x86): the maximum,
// then the sum of exp(x - max) in order, then log(sum) + max.
float logsumexp_row(const float* x, int A) {
  mx::simd::Simd<float, 1> vmax(-std::numeric_limits<float>::infinity());
  for (int k = 0; k < A; ++k) vmax = mx::simd::maximum(mx::simd::Simd<float, 1>(x[k]), vmax);
  float maximum = vmax.value;
  mx::simd::Simd<float, 1> norm(0.0f);
  for (int k = 0; k < A; ++k) norm = norm + mx::simd::exp(mx::simd::Simd<float, 1>(x[k]) - maximum);
  float normalizer = norm.value;
  return std::isinf(maximum) ? maximum : std::log(normalizer) + maximum;
}

}  // namespace

TCG_CLONES void loss_head(const HeadIn& in, int R, int A, float aux_weight, float* values, float* d_logits, float* d_aux,
                          float* d_stop, float* g_policy_bias, float* g_aux_bias) {
  const bool bce[4] = {true, false, true, false};  // losses.BCE_HEADS
  float wsum = 0.0f, avsum = 0.0f;
  for (int r = 0; r < R; ++r) wsum = wsum + in.wp[r];
  float n = maxf(0.0f + wsum, 1.0f);
  std::vector<float> av(R), logp((size_t)R * A), y((size_t)R * 4);
  for (int r = 0; r < R; ++r) av[r] = in.aux_valid[r] * in.w[r];
  for (int r = 0; r < R; ++r) avsum = avsum + av[r];
  float na = maxf(0.0f + avsum, 1.0f);
  float pol = 0.0f, acc = 0.0f;
  float per_sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> masked(A);
  for (int r = 0; r < R; ++r) {
    const float* lg = in.logits + (size_t)r * A;
    const bool* mk = in.mask + (size_t)r * A;
    for (int k = 0; k < A; ++k) masked[k] = mk[k] ? lg[k] : -1e9f;
    float lse = logsumexp_row(masked.data(), A);
    float* lp = logp.data() + (size_t)r * A;
    for (int k = 0; k < A; ++k) lp[k] = masked[k] - lse;
    int best = 0;  // argmax: the first strictly greatest
    float bv = masked[0];
    for (int k = 0; k < A; ++k)
      if (masked[k] > bv) bv = masked[k], best = k;
    float hit = best == in.label[r] ? 1.0f : 0.0f;
    pol = pol + (-lp[in.label[r]]) * in.wp[r];
    acc = acc + hit * in.wp[r];
    float* yr = y.data() + (size_t)r * 4;
    yr[0] = in.ko[r], yr[1] = in.prize[r] / 4.0f, yr[2] = in.terminal[r], yr[3] = in.ret[r];
    const float* ax = in.aux + (size_t)r * 4;
    for (int j = 0; j < 4; ++j) {
      float per;
      if (bce[j]) {
        per = mx::detail::LogAddExp{}(0.0f, ax[j]) - ax[j] * yr[j];
      } else {
        float d = ax[j] - yr[j];
        per = d * d;
      }
      per_sum[j] = per_sum[j] + per * av[r];
    }
  }
  float aux_means[4], aux_total = 0.0f;
  for (int j = 0; j < 4; ++j) aux_means[j] = per_sum[j] / na;
  for (int j = 0; j < 4; ++j) aux_total = aux_total + aux_means[j];
  float policy = pol / n;
  values[kLoss] = policy + aux_weight * (0.0f + aux_total);
  values[kPolicy] = policy, values[kAccuracy] = acc / n;
  values[kAuxKo] = aux_means[0], values[kAuxPrizeDelta] = aux_means[1];  // the aux heads' order (losses.AUX_NAMES)
  values[kAuxTerminal] = aux_means[2], values[kAuxReturn] = aux_means[3];
  if (in.stop) {  // the stop head: binary cross-entropy and accuracy over the rows where stopping was a choice
    std::vector<float> sv(R);
    float svsum = 0.0f, s_loss = 0.0f, s_acc = 0.0f;
    for (int r = 0; r < R; ++r) sv[r] = in.stop_valid[r] * in.w[r];
    for (int r = 0; r < R; ++r) svsum = svsum + sv[r];
    float ns = maxf(0.0f + svsum, 1.0f);
    for (int r = 0; r < R; ++r) {
      float s = in.stop[r], t = in.stop_target[r];
      float per = mx::detail::LogAddExp{}(0.0f, s) - s * t;
      float hit = (s > 0.0f) == (t > 0.5f) ? 1.0f : 0.0f;
      s_loss = s_loss + per * sv[r];
      s_acc = s_acc + hit * sv[r];
    }
    values[kStop] = s_loss / ns, values[kStopAccuracy] = s_acc / ns;
    values[kLoss] = values[kLoss] + values[kStop];
    for (int r = 0; r < R; ++r) d_stop[r] = (mx::detail::Sigmoid{}(in.stop[r]) - in.stop_target[r]) * (sv[r] / ns);
  }
  // the heads' gradients and their biases' (column sums over rows, in order)
  if (g_policy_bias)
    for (int k = 0; k < A; ++k) g_policy_bias[k] = 0.0f;
  for (int j = 0; j < 4; ++j) g_aux_bias[j] = 0.0f;
  for (int r = 0; r < R; ++r) {
    float wn = in.wp[r] / n, avn = aux_weight * (av[r] / na);
    const float* __restrict lp = logp.data() + (size_t)r * A;
    const bool* __restrict mk = in.mask + (size_t)r * A;
    float* __restrict dl = d_logits + (size_t)r * A;
    for (int k = 0; k < A; ++k) {
      float hot = k == in.label[r] ? 1.0f : 0.0f;
      dl[k] = mk[k] ? (mx::detail::Exp{}(lp[k]) - hot) * wn : 0.0f;
    }
    if (g_policy_bias) {
      float* __restrict gpb = g_policy_bias;
      for (int k = 0; k < A; ++k) gpb[k] = gpb[k] + dl[k];
    }
    const float* ax = in.aux + (size_t)r * 4;
    const float* yr = y.data() + (size_t)r * 4;
    float* da = d_aux + (size_t)r * 4;
    for (int j = 0; j < 4; ++j) {
      float g = bce[j] ? mx::detail::Sigmoid{}(ax[j]) - yr[j] : 2.0f * (ax[j] - yr[j]);
      da[j] = g * avn;
      g_aux_bias[j] = g_aux_bias[j] + da[j];
    }
  }
}

TCG_CLONES void relu_back(const float* first, int first_cols, const float* second, const float* a, int R, int N,
                          float* d, float* g_bias) {
  for (int j = 0; j < N; ++j) g_bias[j] = 0.0f;
  for (int r = 0; r < R; ++r) {
    const float* f = first + (size_t)r * first_cols;
    const float* ar = a + (size_t)r * N;
    float* dr = d + (size_t)r * N;
    if (second) {
      const float* s = second + (size_t)r * N;
      for (int j = 0; j < N; ++j) dr[j] = ar[j] > 0.0f ? f[j] + s[j] : 0.0f;
    } else {
      for (int j = 0; j < N; ++j) dr[j] = ar[j] > 0.0f ? f[j] : 0.0f;
    }
    for (int j = 0; j < N; ++j) g_bias[j] = g_bias[j] + dr[j];
  }
}

}  // namespace tcg
