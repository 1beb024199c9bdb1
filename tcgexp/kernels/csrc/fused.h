// tcgexp's fused CPU kernels for the training step: one MLX Primitive of two kinds, the loss and
// gradients (step.cpp, built from the kernels of scan.cpp and head.cpp) and clipping plus AdamW (adamw.cpp).
//
// Every kernel repeats, element by element and in the same order, the MLX operations of the pure
// step (tcgexp/learn/backprop.py, losses.loss_terms, step.py's clip and MLX's AdamW), with the
// functors of MLX's own CPU backend (binary_ops.h, unary_ops.h: maximum's NaN rule, exp, sigmoid,
// logaddexp) and sequential sums where MLX's CPU reductions and scans are sequential. Built with
// -ffp-contract=off (no fused multiply-add: MLX's CPU kernels use none), the results are
// bit-identical to the pure step's (tests/train/test_kernels.py holds that).
#pragma once

#include <optional>
#include <vector>

#include "mlx/array.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace tcg {

enum class Kind { Grads, ClipAdamW };

class Fused : public mx::Primitive {
 public:
  Fused(mx::Stream s, Kind kind, std::vector<int> ints, std::vector<float> floats)
      : mx::Primitive(s), kind_(kind), ints_(std::move(ints)), floats_(std::move(floats)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override;
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  Kind kind_;
  std::vector<int> ints_;
  std::vector<float> floats_;
};

// ---- the kernels (each .cpp beside this header); pointers are to row-contiguous data ----
struct ScanShape {
  int R, L, T, H, block;
};
class Helper;  // helper.h: a second thread that shares a pass (nullptr: none)
void gate_scan(const float* per_row, const float* gh, const int* first_row, const float* h0, float* hs,
               const ScanShape& s, Helper* h);
void scan_back(const float* d_u, const float* per_row, const float* gh, const int* first_row, const float* hs,
               const int* row_lane, const int* row_dec, float* d_gd, float* d_per_row, float* g_bias,
               const ScanShape& s, Helper* h);
// Wg [2H, H + A] -> Wg[:, :H].T, Wg[:, :H] and Wg[:, H:].T, each row-major: the layouts MLX's matmul
// copies them into (it hands BLAS only contiguous operands), made once per step in one task
void gate_weights(const float* Wg, int H, int A, float* enc_t, float* enc_rows, float* hot_t);
void pick(const float* enc, const float* hs, const int* row_lane, const int* row_dec, const int* lane_decisions,
          float* u, float* carry, int R, int L, int T, int H);

struct HeadIn {
  const float *logits, *aux, *w, *aux_valid, *ko, *prize, *terminal, *ret;
  const bool* mask;
  const int* label;
};
void loss_head(const HeadIn& in, int R, int A, float aux_weight, float* values, float* d_logits, float* d_aux,
               float* g_policy_bias, float* g_aux_bias);
void relu_back(const float* first, int first_cols, const float* second, const float* a, int R, int N, float* d,
               float* g_bias);

struct AdamW {
  float grad_clip, b1, one_minus_b1, b2, one_minus_b2, eps, weight_decay;
};
// grads[i], params[i], m[i], v[i] of sizes[i] floats; writes norm and the new params, m, v
void clip_adamw(const std::vector<const float*>& grads, const std::vector<const float*>& params,
                const std::vector<const float*>& m, const std::vector<const float*>& v,
                const std::vector<size_t>& sizes, const float* prescale, float lr, const AdamW& c, float* norm,
                const std::vector<float*>& params_out, const std::vector<float*>& m_out,
                const std::vector<float*>& v_out);

// the whole forward and written-out backward pass (step.cpp); the parameters in PARAMS order (fused_step.py)
struct GradsIn {
  const float *x, *label_hot, *h0;
  const int *row_lane, *row_dec, *first_row, *lane_decisions;
  const bool* mask;
  const int* label;
  const float *w, *aux_valid, *ko, *prize, *terminal, *ret;
  const float *W0, *b0, *W2, *b2, *Wg, *bg, *Wt, *bt, *Wp, *bp, *Wa, *ba;
};
struct GradsOut {
  float *values, *carry;
  float *g_W0, *g_b0, *g_W2, *g_b2, *g_Wg, *g_bg, *g_Wt, *g_bt, *g_Wp, *g_bp, *g_Wa, *g_ba;
};
struct GradsShape {
  int R, D, H, A, L, T, block;
  bool memory;
  float aux_weight;
  bool helper;     // a second thread shares the pass (helper.h)
  long split_min;  // with it, work of at least this many multiply-adds is split over both threads
};
void loss_and_grads(const GradsIn& in, const GradsOut& out, const GradsShape& s);

// ---- the operations Python calls (bindings.cpp) ----
// inputs: x, row_lane, row_dec, first_row, label_hot, lane_decisions, h0, then the targets (action_mask, label,
// row_weight, aux_valid, aux_ko, aux_prize_delta, aux_terminal, aux_return), then the 12 parameters;
// outputs: values [7], carry [L, H], then the 12 gradients
std::vector<mx::array> grads_op(const std::vector<mx::array>& inputs, const std::vector<mx::array>& targets,
                                const std::vector<mx::array>& params, bool memory, int block, float aux_weight,
                                bool helper, long split_min);
std::vector<mx::array> clip_adamw_op(const std::vector<mx::array>& grads, const std::vector<mx::array>& params,
                                     const std::vector<mx::array>& m, const std::vector<mx::array>& v,
                                     const mx::array& lr, const std::optional<mx::array>& prescale,
                                     const std::vector<float>& consts);

}  // namespace tcg
