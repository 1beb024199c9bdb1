// The whole loss-and-gradients pass as one task: tcgexp/learn/fused_step.py's composition, in C++.
//
// The matrix products are the very BLAS calls MLX's Matmul and AddMM make for the same operands
// (mlx/backend/cpu/matmul.cpp: a row-contiguous operand goes as it is, a transposed view of one as
// CblasTrans with its row length as leading dimension; AddMM first fills the output with the bias,
// then calls sgemm with beta = 1). cblas_sgemm is left undefined here and bound by the dynamic
// linker exactly as libmlx's own reference is (MKL when tcgexp loaded it globally, else MLX's BLAS),
// so a product here equals MLX's bit for bit. Everything between two products is the kernels of
// scan.cpp, head.cpp and options.cpp (the option head), and the ReLU forward is MLX's maximum(x, 0).
//
// With a helper thread (helper.h) the pass shares two cores: a product of at least split_min multiply-adds is
// computed as two blocks of rows, one on each thread (the same call on fewer rows: under MKL_CBWR=AUTO,STRICT
// every element comes out as in the whole product), the scan by lanes, and the weight gradients (dY.T X,
// which nothing later in the pass reads) go to the helper whole.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common.h"
#include "fused.h"
#include "helper.h"

extern "C" void cblas_sgemm(int order, int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A,
                            int lda, const float* B, int ldb, float beta, float* C, int ldc);

namespace tcg {

namespace {

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// C [M, N] = op(A) op(B) (+ C when accumulate): A is [M, K] row-major, or (ta) the transpose of a row-major
// [K, M] (MLX's view a.T of a contiguous a, which it passes as CblasTrans with lda = M); likewise B.
void mm(const float* A, bool ta, const float* B, bool tb, int M, int N, int K, float* C, bool accumulate) {
  cblas_sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, M, N, K, 1.0f, A, ta ? M : K, B,
              tb ? K : N, accumulate ? 1.0f : 0.0f, C, N);
}

// rows [r0, r1) of C = op(A) op(B) (+ C), optionally first filled with `bias`: MLX's product restricted to those
// rows. With MKL_CBWR=AUTO,STRICT each element of C comes out the same whatever block of rows a call computes
// (tests/train/test_kernels.py holds the split against the whole product)
void mm_rows(const float* A, bool ta, const float* B, bool tb, int M, int N, int K, float* C, bool accumulate,
             const float* bias, int r0, int r1) {
  if (r1 <= r0) return;
  if (bias)
    for (int r = r0; r < r1; ++r) std::memcpy(C + (size_t)r * N, bias, sizeof(float) * N);
  const float* a = ta ? A + r0 : A + (size_t)r0 * K;
  cblas_sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, r1 - r0, N, K, 1.0f, a, ta ? M : K, B,
              tb ? K : N, (accumulate || bias) ? 1.0f : 0.0f, C + (size_t)r0 * N, N);
}

// the product on two threads where there is a helper and it is large enough: the lower rows posted to the
// helper, the upper ones here, then joined (the stream's thread runs the posted half when the helper has not
// taken it)
void mm2(Helper* h, long split_min, const float* A, bool ta, const float* B, bool tb, int M, int N, int K, float* C,
         bool accumulate, const float* bias = nullptr) {
  if (h == nullptr || (double)M * N * K < (double)split_min || M < 2) {
    mm_rows(A, ta, B, tb, M, N, K, C, accumulate, bias, 0, M);
    return;
  }
  int half = M >= 16 ? M / 2 / 8 * 8 : M / 2;  // rows of whole vectors where there are enough
  int i = h->post([=] { mm_rows(A, ta, B, tb, M, N, K, C, accumulate, bias, half, M); });
  mm_rows(A, ta, B, tb, M, N, K, C, accumulate, bias, 0, half);
  h->join(i);
}

// mx.addmm(bias, A, W.T) for a row-major A [M, K] and a parameter W [N, K]: the bias copied to every row, then the product
void linear(Helper* h, long split_min, const float* A, const float* W, const float* bias, int M, int N, int K,
            float* out) {
  mm2(h, split_min, A, false, W, true, M, N, K, out, true, bias);
}

TCG_CLONES void relu(const float* __restrict a, float* __restrict out, size_t n) {
  for (size_t e = 0; e < n; ++e) out[e] = maxf(a[e], 0.0f);
}

// scratch that lives on the stream's thread from step to step (no page faults for fresh buffers), one named buffer
// each. With the helper, a buffer a posted weight gradient reads is never written again in the pass, a split
// product's halves write disjoint rows and are joined before their output is read, and no buffer is asked for with
// a larger size while a task that uses it may run (that would move it under the task)
struct Scratch {
  // the forward pass: each layer's pre-activation and activation, the trunk's input u = [enc, memory], the heads
  std::vector<float> a1, e1, a2, enc, u, a3, zt, logits, aux;
  // the option head: the options' encodings (pre-activation, activation), the query, the stop head's input and logits
  std::vector<float> ao, e, q, si, stop;
  // the memory: the gate weights' layouts (gate_weights), the rows' and the slots' gate inputs, the lanes' states
  std::vector<float> wg_enc_t, wg_enc, wg_hot_t, per_row, gh, hs;
  // the backward pass: the heads' gradients, the products between the layers, each layer's gradient, the gates'
  std::vector<float> d_logits, d_aux, t1, t2, d_a3, d_u, d_a2, d_a1, d_gd, d_per_row;
  // the option head's: the stop logits', the stop head's input's, the query's and the encodings' gradients
  std::vector<float> d_stop, d_si, d_q, d_ao;
};

// `buf`, at least n floats
float* get(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

void loss_and_grads(const GradsIn& in, const GradsOut& out, const GradsDims& d, const GradsSettings& s) {
  thread_local Scratch w;
  thread_local Helper* helper = nullptr;  // one per stream thread, made when a pass first asks for it
  if (s.helper && helper == nullptr) helper = new Helper();
  Helper* h = s.helper ? helper : nullptr;
  auto later = [h](std::function<void()> fn) {  // a weight gradient: on the helper when there is one
    if (h) h->post(std::move(fn)); else fn();
  };
  // A: action slots (the option head: option slots); C: what a decision chose (label_hot's width), O: an option's
  const int R = d.R, D = d.D, H = d.H, A = d.A, C = d.C, L = d.L, T = d.T, G = 2 * H, W = H + C;
  const size_t LT = (size_t)L * T;
  // the scan's lanes over both threads when the scan is worth it (~16 operations per element and decision)
  Helper* scan_helper = h && (double)LT * H * 16 >= (double)s.split_min ? h : nullptr;
  float* a1 = get(w.a1, (size_t)R * H);
  float* e1 = get(w.e1, (size_t)R * H);
  float* a2 = get(w.a2, (size_t)R * H);
  float* enc = get(w.enc, (size_t)R * H);
  float* u = get(w.u, (size_t)R * G);
  float* a3 = get(w.a3, (size_t)R * H);
  float* zt = get(w.zt, (size_t)R * H);
  float* logits = get(w.logits, (size_t)R * A);
  float* aux = get(w.aux, (size_t)R * 4);
  float* d_logits = get(w.d_logits, (size_t)R * A);
  float* d_aux = get(w.d_aux, (size_t)R * 4);
  float* t1 = get(w.t1, (size_t)R * H);
  float* t2 = get(w.t2, (size_t)R * H);
  float* d_a3 = get(w.d_a3, (size_t)R * H);
  float* d_u = get(w.d_u, (size_t)R * G);
  float* d_a2 = get(w.d_a2, (size_t)R * H);
  float* d_a1 = get(w.d_a1, (size_t)R * H);

  // ---- forward ----
  float *per_row = nullptr, *gh = nullptr, *hs = nullptr, *wg_enc = nullptr, *wg_enc_t = nullptr, *wg_hot_t = nullptr;
  int gw = -1;  // the gate weights' layouts, made beside the encoder's products when there is a helper
  if (s.memory) {
    wg_enc_t = get(w.wg_enc_t, (size_t)H * G);
    wg_enc = get(w.wg_enc, (size_t)G * H);
    wg_hot_t = get(w.wg_hot_t, (size_t)C * G);
    auto layouts = [=, Wg = in.Wg] { gate_weights(Wg, H, C, wg_enc_t, wg_enc, wg_hot_t); };
    if (h) gw = h->post(layouts); else layouts();
  }
  linear(h, s.split_min, in.x, in.W0, in.b0, R, H, D, a1);
  relu(a1, e1, (size_t)R * H);
  linear(h, s.split_min, e1, in.W2, in.b2, R, H, H, a2);
  relu(a2, enc, (size_t)R * H);
  if (s.memory) {
    if (h) h->join(gw);
    per_row = get(w.per_row, (size_t)R * G);
    mm2(h, s.split_min, enc, false, wg_enc_t, false, R, G, H, per_row, false);  // enc @ Wg[:, :H].T (contiguous copy, as MLX's)
    gh = get(w.gh, LT * G);
    mm2(h, s.split_min, in.label_hot, false, wg_hot_t, false, (int)LT, G, C, gh, true, in.bg);  // addmm(bg, hot, Wg[:, H:].T)
    hs = get(w.hs, (size_t)L * (T + 1) * H);
    ScanShape sc{R, L, T, H, s.block};
    gate_scan(per_row, gh, in.first_row, in.h0, hs, sc, scan_helper);
    pick(enc, hs, in.row_lane, in.row_dec, in.lane_decisions, u, out.carry, R, L, T, H);
  } else {
    for (int r = 0; r < R; ++r) {
      std::memcpy(u + (size_t)r * G, enc + (size_t)r * H, sizeof(float) * H);
      std::fill(u + (size_t)r * G + H, u + (size_t)(r + 1) * G, 0.0f);
    }
    std::memcpy(out.carry, in.h0, sizeof(float) * (size_t)L * H);
  }
  linear(h, s.split_min, u, in.Wt, in.bt, R, H, G, a3);
  relu(a3, zt, (size_t)R * H);
  linear(h, s.split_min, zt, in.Wa, in.ba, R, 4, H, aux);
  const size_t RK = (size_t)R * A;  // the option head's (row, option slot) pairs
  float *ao = nullptr, *e = nullptr, *q = nullptr, *si = nullptr, *stop = nullptr;
  if (s.options) {
    ao = get(w.ao, RK * H);
    e = get(w.e, RK * H);
    q = get(w.q, (size_t)R * H);
    si = get(w.si, (size_t)R * G);
    stop = get(w.stop, (size_t)R);
    linear(h, s.split_min, in.options, in.Wo, in.bo, (int)RK, H, d.O, ao);  // addmm(bo, options [R K, O], Wo.T)
    relu(ao, e, RK * H);
    linear(h, s.split_min, zt, in.Wq, in.bq, R, H, H, q);
    option_scores(e, q, R, A, H, logits);
    stop_forward(zt, e, in.pick, in.Ws, in.bs, R, A, H, si, stop);
  } else {
    linear(h, s.split_min, zt, in.Wp, in.bp, R, A, H, logits);
  }

  // ---- the loss and the heads' gradient ----
  HeadIn head{logits,          aux,           in.row_weight,   in.aux_valid, in.aux_ko,
              in.aux_prize_delta, in.aux_terminal, in.aux_return, in.action_mask, in.label,
              s.options ? in.policy_weight : in.row_weight};
  float* d_stop = nullptr;
  if (s.options) {
    head.stop = stop, head.stop_target = in.stop_target, head.stop_valid = in.stop_valid;
    d_stop = get(w.d_stop, (size_t)R);
  }
  float values[kMetrics];
  loss_head(head, R, A, s.aux_weight, values, d_logits, d_aux, d_stop, s.options ? nullptr : out.g_bp, out.g_ba);
  for (size_t i = 0; i < s.values.size(); ++i) out.values[i] = values[s.values[i]];  // the metrics asked for

  // ---- backward ----
  if (s.options) {
    later([=] { mm(d_aux, true, zt, false, 4, H, R, out.g_Wa, false); });  // d_aux.T @ zt
    mm(d_aux, false, in.Wa, false, R, H, 4, t2, false);                    // d_aux @ Wa
    float* d_si = get(w.d_si, (size_t)R * G);
    float* d_q = get(w.d_q, (size_t)R * H);
    float* d_ao = get(w.d_ao, RK * H);
    stop_back(d_stop, si, in.Ws, R, H, out.g_Ws, out.g_bs, d_si);
    option_back(d_logits, e, q, ao, d_si, in.pick, R, A, H, d_q, out.g_bq, d_ao, out.g_bo);
    const float* opts = in.options;
    const int O = d.O;
    later([=] {
      mm(d_q, true, zt, false, H, H, R, out.g_Wq, false);        // d_q.T @ zt
      mm(d_ao, true, opts, false, H, O, (int)RK, out.g_Wo, false);  // d_ao.T @ options
    });
    mm2(h, s.split_min, d_q, false, in.Wq, false, R, H, H, t1, false);  // d_q @ Wq
    relu_back3(t1, t2, d_si, G, a3, R, H, d_a3, out.g_bt);
  } else {
    later([=] {
      mm(d_logits, true, zt, false, A, H, R, out.g_Wp, false);  // d_logits.T @ zt
      mm(d_aux, true, zt, false, 4, H, R, out.g_Wa, false);
    });
    mm2(h, s.split_min, d_logits, false, in.Wp, false, R, H, A, t1, false);  // d_logits @ Wp
    mm(d_aux, false, in.Wa, false, R, H, 4, t2, false);
    relu_back(t1, H, t2, a3, R, H, d_a3, out.g_bt);
  }
  later([=] { mm(d_a3, true, u, false, H, G, R, out.g_Wt, false); });  // d_a3.T @ u
  mm2(h, s.split_min, d_a3, false, in.Wt, false, R, G, H, d_u, false);  // d_a3 @ Wt
  if (s.memory) {
    float* d_gd = get(w.d_gd, LT * G);
    float* d_per_row = get(w.d_per_row, (size_t)R * G);
    ScanShape sc{R, L, T, H, s.block};
    scan_back(d_u, per_row, gh, in.first_row, hs, in.row_lane, in.row_dec, d_gd, d_per_row, out.g_bg, sc, scan_helper);
    // gates.weight = concatenate([d_per_row.T @ enc, d_gd.T @ hot], axis=1)
    float* left = get(w.wg_enc_t, (size_t)G * H);   // the same size; the forward's products were its last readers
    float* right = get(w.wg_hot_t, (size_t)G * C);  // likewise
    const float* hot = in.label_hot;
    float* g_Wg = out.g_Wg;
    later([=] {
      mm(d_per_row, true, enc, false, G, H, R, left, false);
      mm(d_gd, true, hot, false, G, C, (int)LT, right, false);
      for (int o = 0; o < G; ++o) {
        std::memcpy(g_Wg + (size_t)o * W, left + (size_t)o * H, sizeof(float) * H);
        std::memcpy(g_Wg + (size_t)o * W + H, right + (size_t)o * C, sizeof(float) * C);
      }
    });
    float* t3 = get(w.t1, (size_t)R * H);  // t1's buffer (relu_back read t1 already)
    mm2(h, s.split_min, d_per_row, false, wg_enc, false, R, H, G, t3, false);  // d_per_row @ Wg[:, :H]
    relu_back(d_u, G, t3, a2, R, H, d_a2, out.g_b2);
  } else {
    std::fill(out.g_Wg, out.g_Wg + (size_t)G * W, 0.0f);
    std::fill(out.g_bg, out.g_bg + G, 0.0f);
    relu_back(d_u, G, nullptr, a2, R, H, d_a2, out.g_b2);
  }
  later([=] { mm(d_a2, true, e1, false, H, H, R, out.g_W2, false); });  // d_a2.T @ e1
  float* t4 = get(w.t2, (size_t)R * H);  // t2's buffer (relu_back read t2 already)
  mm2(h, s.split_min, d_a2, false, in.W2, false, R, H, H, t4, false);  // d_a2 @ W2
  relu_back(t4, H, nullptr, a1, R, H, d_a1, out.g_b0);
  mm2(h, s.split_min, d_a1, true, in.x, false, H, D, R, out.g_W0, false);  // d_a1.T @ x
  if (h) h->finish();  // every weight gradient written before the task ends
}

}  // namespace tcg
