// tcgexp's fused CPU kernels for the training step: two MLX Primitives, one per operation (as in MLX's
// examples/extensions): LossAndGrads, the loss and gradients (step.cpp, built from the kernels of scan.cpp,
// head.cpp and options.cpp: either policy head, the action head or the option head), and ClipAdamW, clipping
// plus AdamW (adamw.cpp).
//
// Every kernel repeats, element by element and in the same order, the MLX operations of the pure
// step (tcgexp/learn/backprop.py, losses.loss_terms, step.py's clip and MLX's AdamW), with the
// functors of MLX's own CPU backend (binary_ops.h, unary_ops.h: maximum's NaN rule, exp, sigmoid,
// logaddexp) and sequential sums where MLX's CPU reductions and scans are sequential. Built with
// -ffp-contract=off (no fused multiply-add: MLX's CPU kernels use none), the results are
// bit-identical to the pure step's (tests/train/test_kernels.py holds that).
//
// The operations' contract is by name (primitive.cpp): Python passes every array in a dict keyed by its
// name and every setting as a keyword argument; the call checks each field (present, expected, dtype,
// shape) and refuses a wrong one naming it. Results come back as dicts keyed the same way.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlx/array.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace tcg {

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
// Wg [2H, H + C] -> Wg[:, :H].T, Wg[:, :H] and Wg[:, H:].T, each row-major: the layouts MLX's matmul
// copies them into (it hands BLAS only contiguous operands), made once per step in one task (C: the width of
// what a decision chose, label_hot's: the actions one-hot, or the chosen options' vectors)
void gate_weights(const float* Wg, int H, int C, float* enc_t, float* enc_rows, float* hot_t);
void pick(const float* enc, const float* hs, const int* row_lane, const int* row_dec, const int* lane_decisions,
          float* u, float* carry, int R, int L, int T, int H);

// the values the loss head computes (losses.METRICS names them, and STOP_METRICS the option head's stop head's;
// the caller asks for them by name, in its order)
enum Metric { kLoss, kPolicy, kAccuracy, kAuxKo, kAuxPrizeDelta, kAuxTerminal, kAuxReturn, kStop, kStopAccuracy, kMetrics };
inline constexpr const char* kMetricNames[kMetrics] = {
    "loss", "policy", "accuracy", "aux_ko", "aux_prize_delta", "aux_terminal", "aux_return", "stop", "stop_accuracy"};
constexpr int kActionMetrics = kStop;  // what the action head computes: the metrics before the stop head's

struct HeadIn {
  const float *logits, *aux, *w, *aux_valid, *ko, *prize, *terminal, *ret;
  const bool* mask;
  const int* label;
  const float* wp;  // each row's policy weight: w itself for the action head, policy_weight for the option head
  // the option head's stop head (nullptr for the action head): its logits, targets and where they count
  const float *stop = nullptr, *stop_target = nullptr, *stop_valid = nullptr;
};
// values: kMetrics floats, in Metric order (the stop head's two only with in.stop); d_logits [R, A], d_aux [R, 4],
// d_stop [R] (with in.stop); g_policy_bias (the action head's, else nullptr) and g_aux_bias: the biases' gradients
void loss_head(const HeadIn& in, int R, int A, float aux_weight, float* values, float* d_logits, float* d_aux,
               float* d_stop, float* g_policy_bias, float* g_aux_bias);
void relu_back(const float* first, int first_cols, const float* second, const float* a, int R, int N, float* d,
               float* g_bias);

// ---- the option head (options.cpp): R rows, K option slots, H hidden ----
// scores[r, k] = e[r, k, :] . q[r, :]
void option_scores(const float* e, const float* q, int R, int K, int H, float* scores);
// si[r] = concat(z[r], e[r K + pick[r]]) [R, 2H]; stop[r] = si[r] . Ws + bs
void stop_forward(const float* z, const float* e, const int* pick, const float* Ws, const float* bs, int R, int K,
                  int H, float* si, float* stop);
// the stop layer's gradients: g_Ws [2H], g_bs [1], and d_si [R, 2H] (what reaches the state and the picked option)
void stop_back(const float* d_stop, const float* si, const float* Ws, int R, int H, float* g_Ws, float* g_bs,
               float* d_si);
// d_q [R, H] (the query's gradient) and g_bq; through the encodings: d_ao [R K, H] = relu'(ao) (d_scores q, plus
// d_si's option half at the picked slot), and g_bo
void option_back(const float* d_scores, const float* e, const float* q, const float* ao, const float* d_si,
                 const int* pick, int R, int K, int H, float* d_q, float* g_bq, float* d_ao, float* g_bo);
// d [R, H] = a > 0 ? (first + second) + third[:, :H] : 0 (third's rows of `third_cols`), and g_bias its column sums
void relu_back3(const float* first, const float* second, const float* third, int third_cols, const float* a, int R,
                int H, float* d, float* g_bias);

struct AdamW {
  float grad_clip, b1, one_minus_b1, b2, one_minus_b2, eps, weight_decay;
  bool operator==(const AdamW&) const = default;
};
// grads[i], params[i], m[i], v[i] of sizes[i] floats; writes norm and the new params, m, v
void clip_adamw(const std::vector<const float*>& grads, const std::vector<const float*>& params,
                const std::vector<const float*>& m, const std::vector<const float*>& v,
                const std::vector<size_t>& sizes, const float* prescale, float lr, const AdamW& c, float* norm,
                const std::vector<float*>& params_out, const std::vector<float*>& m_out,
                const std::vector<float*>& v_out);

// The whole forward and written-out backward pass (step.cpp). primitive.cpp's grads_fields names every member
// (the dict key Python passes it under, its dtype and shape); W0 ... ba are the model's parameters
// encoder.layers.0.weight ... aux.bias, and g_W0 ... g_ba their gradients. The action head reads Wp, bp
// (policy.*); the option head options, pick, policy_weight, stop_target, stop_valid and Wo ... bs (option.*,
// query.*, stop.*) instead.
struct GradsIn {
  const float *x, *label_hot, *h0;
  const int *row_lane, *row_dec, *first_row, *lane_decisions;
  const bool* action_mask;
  const int* label;
  const float *row_weight, *aux_valid, *aux_ko, *aux_prize_delta, *aux_terminal, *aux_return;
  const float *W0, *b0, *W2, *b2, *Wg, *bg, *Wt, *bt, *Wp, *bp, *Wa, *ba;
  const float* options;  // [R, A, O]: each option slot's vector
  const int* pick;       // [R]: the slot each row picked
  const float *policy_weight, *stop_target, *stop_valid;
  const float *Wo, *bo, *Wq, *bq, *Ws, *bs;
};
struct GradsOut {
  float *values, *carry;
  float *g_W0, *g_b0, *g_W2, *g_b2, *g_Wg, *g_bg, *g_Wt, *g_bt, *g_Wp, *g_bp, *g_Wa, *g_ba;
  float *g_Wo, *g_bo, *g_Wq, *g_bq, *g_Ws, *g_bs;
};
// rows, features, hidden width, action (option) slots, what a decision chose (label_hot's width), an option's
// width (the option head), lanes and decisions per lane: read from the arrays' shapes
struct GradsDims {
  int R, D, H, A, C, O, L, T;
};
struct GradsSettings {
  bool options;  // the policy head: the option head (true) or the action head
  bool memory;
  int block;  // the scan's block (scan.py SCAN_BLOCK)
  float aux_weight;
  bool helper;                 // a second thread shares the pass (helper.h)
  long split_min;              // with it, work of at least this many multiply-adds is split over both threads
  std::vector<Metric> values;  // what out.values holds, in order
  bool operator==(const GradsSettings&) const = default;
};
void loss_and_grads(const GradsIn& in, const GradsOut& out, const GradsDims& d, const GradsSettings& s);

// ---- the operations Python calls (bindings.cpp), every array by name ----
using Named = std::vector<std::pair<std::string, mx::array>>;  // a Python dict of arrays, in its order

struct GradsCall {
  Named inputs;   // the model's inputs and h0, its incoming memory
  Named targets;  // what the loss reads of the batch's targets
  Named params;   // the trainable parameters, named as tree_flatten names them
  std::vector<std::string> metrics;  // the loss values wanted, by name (losses.METRICS), in their order
  bool options;   // the option head (the model's option_dim > 0), else the action head
  bool memory;
  int block;
  float aux_weight;
  bool helper;
  long split_min;
};
struct GradsResult {
  mx::array values, carry;
  Named grads;  // named as the parameters
};
GradsResult grads_op(const GradsCall& call);

struct ClipAdamWCall {
  Named grads, params, m, v;  // keyed alike; the norm sums the gradients in the order of `grads`
  mx::array learning_rate;
  std::optional<mx::array> scale;  // the gradients' prescale (1 / microbatches), or none
  double grad_clip, beta1, beta2, eps, weight_decay;
};
struct ClipAdamWResult {
  mx::array norm;
  Named params, m, v;
};
ClipAdamWResult clip_adamw_op(const ClipAdamWCall& call);

// grads()'s fields for a head, declared in primitive.cpp: group (inputs, targets, params, outputs) ->
// [(name, "dtype [dims]")]
using Contract = std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>;
Contract grads_contract(bool options);

}  // namespace tcg
