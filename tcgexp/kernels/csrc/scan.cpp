// The memory's gates and its blocked scan, forward (gate_scan, pick) and backward (scan_back).
//
// The same arithmetic as tcgexp/learn/scan.py affine_scan (division form anchored at each block's
// middle, the state carried block to block) and backprop.py, per lane, in MLX's order: cumprod and
// cumsum run sequentially along the block, scatter-adds in the order of their updates.
#include <algorithm>
#include <vector>

#include "common.h"
#include "fused.h"
#include "helper.h"

namespace tcg {

namespace {

// affine_scan on one lane: a, b [Tp, H] (Tp = nb * block, padded with a = 1, b = 0), h_start [H];
// out[t] for t < T. reverse: h[t] = a[t] h[t+1] + b[t], from the end.
TCG_CLONES void lane_scan(const float* a, const float* b, const float* h_start, float* out, int T, int Tp, int H,
                          int B, bool reverse, float* keep, float* K, float* acc, float* h_in) {
  int nb = Tp / B, m = (B - 1) / 2;
  for (int i = 0; i < nb; ++i) {
    int s0 = i * B;
    for (int q = 0; q < B; ++q) {
      int t = reverse ? s0 + B - 1 - q : s0 + q;
      const float* at = a + (size_t)t * H;
      float* kt = keep + (size_t)t * H;
      if (q == 0) {
        for (int j = 0; j < H; ++j) kt[j] = at[j];
      } else {
        const float* kp = keep + (size_t)(reverse ? t + 1 : t - 1) * H;
        for (int j = 0; j < H; ++j) kt[j] = kp[j] * at[j];
      }
    }
    const float* mid = keep + (size_t)(s0 + m) * H;
    for (int q = 0; q < B; ++q) {
      int t = reverse ? s0 + B - 1 - q : s0 + q;
      const float* kt = keep + (size_t)t * H;
      const float* bt = b + (size_t)t * H;
      float* Kt = K + (size_t)t * H;
      float* ct = acc + (size_t)t * H;
      if (q == 0) {
        for (int j = 0; j < H; ++j) {
          Kt[j] = kt[j] / mid[j];
          ct[j] = bt[j] / Kt[j];
        }
      } else {
        const float* cp = acc + (size_t)(reverse ? t + 1 : t - 1) * H;
        for (int j = 0; j < H; ++j) {
          Kt[j] = kt[j] / mid[j];
          ct[j] = cp[j] + bt[j] / Kt[j];
        }
      }
    }
  }
  // the state entering each block, carried block to block
  std::copy(h_start, h_start + H, h_in + (size_t)(reverse ? nb - 1 : 0) * H);
  for (int step = 0; step + 1 < nb; ++step) {
    int i = reverse ? nb - 1 - step : step;
    int edge = reverse ? i * B : i * B + B - 1;
    const float* Ke = K + (size_t)edge * H;
    const float* ce = acc + (size_t)edge * H;
    const float* mid = keep + (size_t)(i * B + m) * H;
    const float* h = h_in + (size_t)i * H;
    float* next = h_in + (size_t)(reverse ? i - 1 : i + 1) * H;
    for (int j = 0; j < H; ++j) next[j] = Ke[j] * (mid[j] * h[j] + ce[j]);
  }
  for (int t = 0; t < T; ++t) {
    int i = t / B;
    const float* mid = keep + (size_t)(i * B + m) * H;
    const float* h = h_in + (size_t)i * H;
    const float* Kt = K + (size_t)t * H;
    const float* ct = acc + (size_t)t * H;
    float* o = out + (size_t)t * H;
    for (int j = 0; j < H; ++j) o[j] = Kt[j] * (mid[j] * h[j] + ct[j]);
  }
}

// The gates of decision (l, t): gd = per_row[first_row] + gh, then zp, z, cc and a = 1 - z (backprop.py's forward).
struct Gates {
  float zp, c, z, cc, a;
};
inline Gates gates_at(const float* pr, const float* g, int j, int H) {
  Gates r;
  float k = pr[j] + g[j];
  r.c = pr[H + j] + g[H + j];
  r.zp = 0.25f * k + 0.5f;
  r.z = minf(maxf(r.zp, 0.0f), Z_MAX);
  r.cc = minf(maxf(r.c, -1.0f), 1.0f);
  r.a = 1.0f - r.z;
  return r;
}

struct Scratch {
  std::vector<float> a, b, keep, K, acc, h_in, out;
  Scratch(int Tp, int H, int nb)
      : a((size_t)Tp * H), b((size_t)Tp * H), keep((size_t)Tp * H), K((size_t)Tp * H), acc((size_t)Tp * H),
        h_in((size_t)nb * H), out((size_t)Tp * H) {}
};

TCG_CLONES void fill_gates(const float* per_row, const float* gh, const int* first_row, int l, int T, int H,
                           float* a, float* b) {
  for (int t = 0; t < T; ++t) {
    size_t s = (size_t)l * T + t;
    const float* __restrict pr = per_row + (size_t)first_row[s] * 2 * H;
    const float* __restrict g = gh + s * 2 * H;
    float* __restrict at = a + (size_t)t * H;
    float* __restrict bt = b + (size_t)t * H;
    for (int j = 0; j < H; ++j) {
      Gates q = gates_at(pr, g, j, H);
      at[j] = q.a;
      bt[j] = q.z * q.cc;
    }
  }
}

}  // namespace

// lanes [l0, l1) of the forward scan (each lane's is independent of the others')
void gate_scan_lanes(const float* per_row, const float* gh, const int* first_row, const float* h0, float* hs,
                     const ScanShape& s, int l0, int l1) {
  int T = s.T, H = s.H, B = std::min(s.block, T);
  int nb = (T + B - 1) / B, Tp = nb * B;
  Scratch w(Tp, H, nb);
  std::fill(w.a.begin(), w.a.end(), 1.0f);
  std::fill(w.b.begin(), w.b.end(), 0.0f);
  for (int l = l0; l < l1; ++l) {
    fill_gates(per_row, gh, first_row, l, T, H, w.a.data(), w.b.data());
    float* out = hs + (size_t)l * (T + 1) * H;
    std::copy(h0 + (size_t)l * H, h0 + (size_t)(l + 1) * H, out);
    lane_scan(w.a.data(), w.b.data(), h0 + (size_t)l * H, out + H, T, Tp, H, B, false, w.keep.data(), w.K.data(),
              w.acc.data(), w.h_in.data());
  }
}

void gate_weights(const float* Wg, int H, int C, float* enc_t, float* enc_rows, float* hot_t) {
  int G = 2 * H, W = H + C;
  for (int o = 0; o < G; ++o) {
    const float* w = Wg + (size_t)o * W;
    std::copy(w, w + H, enc_rows + (size_t)o * H);
    for (int j = 0; j < H; ++j) enc_t[(size_t)j * G + o] = w[j];
    for (int j = 0; j < C; ++j) hot_t[(size_t)j * G + o] = w[H + j];
  }
}

void gate_scan(const float* per_row, const float* gh, const int* first_row, const float* h0, float* hs,
               const ScanShape& s, Helper* h) {
  split2(h, s.L, [=](int l0, int l1) { gate_scan_lanes(per_row, gh, first_row, h0, hs, s, l0, l1); });
}

void pick(const float* enc, const float* hs, const int* row_lane, const int* row_dec, const int* lane_decisions,
          float* u, float* carry, int R, int L, int T, int H) {
  for (int r = 0; r < R; ++r) {
    const float* h = hs + ((size_t)row_lane[r] * (T + 1) + row_dec[r]) * H;
    std::copy(enc + (size_t)r * H, enc + (size_t)(r + 1) * H, u + (size_t)r * 2 * H);
    std::copy(h, h + H, u + (size_t)r * 2 * H + H);
  }
  for (int l = 0; l < L; ++l) {
    const float* h = hs + ((size_t)l * (T + 1) + lane_decisions[l]) * H;
    std::copy(h, h + H, carry + (size_t)l * H);
  }
}

// lanes [l0, l1) of the scan's adjoint: their memory gradients (the rows' gradients scattered onto their
// (lane, decision) slots, rows in order) scanned in reverse, and their slots' gate gradients d_gd
TCG_CLONES void scan_back_lanes(const float* d_u, const float* per_row, const float* gh, const int* first_row,
                                const float* hs, const int* row_lane, const int* row_dec, float* d_hs, float* d_gd,
                                const ScanShape& s, int l0, int l1) {
  int R = s.R, T = s.T, H = s.H, B = std::min(s.block, T);
  int nb = (T + B - 1) / B, Tp = nb * B;
  for (int r = 0; r < R; ++r) {
    if (row_lane[r] < l0 || row_lane[r] >= l1) continue;
    float* dst = d_hs + ((size_t)row_lane[r] * (T + 1) + row_dec[r]) * H;
    const float* src = d_u + (size_t)r * 2 * H + H;
    for (int j = 0; j < H; ++j) dst[j] = dst[j] + src[j];
  }
  Scratch w(Tp, H, nb);
  std::vector<float> a_here((size_t)T * H), zeros(H, 0.0f);
  for (int l = l0; l < l1; ++l) {
    // a_next[t] = a[t + 1] (1 at the chunk's end and in the padding), b = d_hs[t + 1]
    std::fill(w.a.begin(), w.a.end(), 1.0f);
    std::fill(w.b.begin(), w.b.end(), 0.0f);
    fill_gates(per_row, gh, first_row, l, T, H, a_here.data(), w.out.data());
    std::copy(a_here.begin() + H, a_here.end(), w.a.begin());
    std::copy(d_hs + ((size_t)l * (T + 1) + 1) * H, d_hs + ((size_t)(l + 1) * (T + 1)) * H, w.b.begin());
    lane_scan(w.a.data(), w.b.data(), zeros.data(), w.out.data(), T, Tp, H, B, true, w.keep.data(), w.K.data(),
              w.acc.data(), w.h_in.data());
    const float* hl = hs + (size_t)l * (T + 1) * H;
    for (int t = 0; t < T; ++t) {
      size_t slot = (size_t)l * T + t;
      const float* __restrict pr = per_row + (size_t)first_row[slot] * 2 * H;
      const float* __restrict g = gh + slot * 2 * H;
      const float* __restrict mu = w.out.data() + (size_t)t * H;
      const float* __restrict h = hl + (size_t)t * H;
      float* __restrict dk = d_gd + slot * 2 * H;
      for (int j = 0; j < H; ++j) {
        Gates q = gates_at(pr, g, j, H);
        dk[j] = (q.zp > 0.0f && q.zp < Z_MAX) ? 0.25f * mu[j] * (q.cc - h[j]) : 0.0f;
        dk[H + j] = (q.c > -1.0f && q.c < 1.0f) ? mu[j] * q.z : 0.0f;
      }
    }
  }
}

// columns [j0, j1) of d_per_row (the slots' gate gradients scattered back onto the rows that fed them, slots in
// order) and of the gate bias's gradient (the slots' sum, in order)
TCG_CLONES void gate_grads_cols(const float* d_gd, const int* first_row, float* d_per_row, float* g_bias, int R,
                                size_t slots, int G, int j0, int j1) {
  for (int r = 0; r < R; ++r) std::fill(d_per_row + (size_t)r * G + j0, d_per_row + (size_t)r * G + j1, 0.0f);
  std::fill(g_bias + j0, g_bias + j1, 0.0f);
  for (size_t slot = 0; slot < slots; ++slot) {
    float* dst = d_per_row + (size_t)first_row[slot] * G;
    const float* src = d_gd + slot * G;
    for (int j = j0; j < j1; ++j) {
      dst[j] = dst[j] + src[j];
      g_bias[j] = g_bias[j] + src[j];
    }
  }
}

void scan_back(const float* d_u, const float* per_row, const float* gh, const int* first_row, const float* hs,
               const int* row_lane, const int* row_dec, float* d_gd, float* d_per_row, float* g_bias,
               const ScanShape& s, Helper* h) {
  int L = s.L, T = s.T, H = s.H, G = 2 * H;
  std::vector<float> d_hs((size_t)L * (T + 1) * H, 0.0f);
  float* dh = d_hs.data();
  split2(h, L, [=](int l0, int l1) {
    scan_back_lanes(d_u, per_row, gh, first_row, hs, row_lane, row_dec, dh, d_gd, s, l0, l1);
  });
  split2(h, G, [=](int j0, int j1) { gate_grads_cols(d_gd, first_row, d_per_row, g_bias, s.R, (size_t)L * T, G, j0, j1); });
}

}  // namespace tcg
