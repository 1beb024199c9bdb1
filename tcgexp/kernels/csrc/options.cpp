// The option head (tcgexp/learn/model.py's option_head, backprop.py's gradient of it): the parts between its
// matrix products (those are step.cpp's BLAS calls, as MLX makes them).
//
// Each loop repeats the pure step's MLX operations element by element, in their order: a row-wise dot product is
// MLX's product then its reduction over the last axis (sequential from 0: MLX's CPU reduce is one lane wide on
// x86, so 0 + ((0 + p0) + p1) ..., the leading 0 changing nothing), a sum over options or rows is MLX's strided
// reduction (sequential from 0, in index order), a gather a copy and its scatter-add one addition per element.
#include <cstring>

#include "common.h"
#include "fused.h"

namespace tcg {

// (e.reshape(R, K, H) * q[:, None, :]).sum(axis=-1)
TCG_CLONES void option_scores(const float* e, const float* q, int R, int K, int H, float* scores) {
  for (int r = 0; r < R; ++r) {
    const float* __restrict qr = q + (size_t)r * H;
    for (int k = 0; k < K; ++k) {
      const float* __restrict er = e + ((size_t)r * K + k) * H;
      float acc = 0.0f;
      for (int h = 0; h < H; ++h) acc = acc + er[h] * qr[h];
      scores[(size_t)r * K + k] = 0.0f + acc;
    }
  }
}

// si = concatenate([z, take(e, r K + pick)], axis=-1); stop = (si * Ws).sum(axis=-1) + bs
TCG_CLONES void stop_forward(const float* z, const float* e, const int* pick, const float* Ws, const float* bs, int R,
                             int K, int H, float* si, float* stop) {
  const int G = 2 * H;
  for (int r = 0; r < R; ++r) {
    float* __restrict row = si + (size_t)r * G;
    std::memcpy(row, z + (size_t)r * H, sizeof(float) * H);
    std::memcpy(row + H, e + ((size_t)r * K + pick[r]) * H, sizeof(float) * H);
    float acc = 0.0f;
    for (int j = 0; j < G; ++j) acc = acc + row[j] * Ws[j];
    stop[r] = (0.0f + acc) + bs[0];
  }
}

// g_Ws = (d_stop[:, None] * si).sum(axis=0, keepdims=True); g_bs = d_stop.sum(keepdims=True);
// d_si = d_stop[:, None] * Ws
TCG_CLONES void stop_back(const float* d_stop, const float* si, const float* Ws, int R, int H, float* g_Ws, float* g_bs,
                          float* d_si) {
  const int G = 2 * H;
  for (int j = 0; j < G; ++j) g_Ws[j] = 0.0f;
  float bias = 0.0f;
  for (int r = 0; r < R; ++r) {
    const float* __restrict row = si + (size_t)r * G;
    float* __restrict d = d_si + (size_t)r * G;
    const float ds = d_stop[r];
    for (int j = 0; j < G; ++j) g_Ws[j] = g_Ws[j] + ds * row[j];
    for (int j = 0; j < G; ++j) d[j] = ds * Ws[j];
    bias = bias + ds;
  }
  g_bs[0] = 0.0f + bias;
}

// d_q = (d_scores[:, :, None] * e.reshape(R, K, H)).sum(axis=1); g_bq = d_q.sum(axis=0);
// d_e = (d_scores[:, :, None] * q[:, None, :]).reshape(R K, H).at[r K + pick].add(d_si[:, H:]);
// d_ao = where(ao > 0, d_e, 0); g_bo = d_ao.sum(axis=0)
TCG_CLONES void option_back(const float* d_scores, const float* e, const float* q, const float* ao, const float* d_si,
                            const int* pick, int R, int K, int H, float* d_q, float* g_bq, float* d_ao, float* g_bo) {
  for (int h = 0; h < H; ++h) g_bq[h] = 0.0f, g_bo[h] = 0.0f;
  for (int r = 0; r < R; ++r) {
    float* __restrict dq = d_q + (size_t)r * H;
    const float* __restrict qr = q + (size_t)r * H;
    const float* __restrict ds = d_scores + (size_t)r * K;
    for (int h = 0; h < H; ++h) dq[h] = 0.0f;
    for (int k = 0; k < K; ++k) {
      const size_t at = ((size_t)r * K + k) * H;
      const float* __restrict er = e + at;
      const float* __restrict ar = ao + at;
      float* __restrict dr = d_ao + at;
      const float g = ds[k];
      for (int h = 0; h < H; ++h) dq[h] = dq[h] + g * er[h];
      if (k == pick[r]) {
        const float* __restrict extra = d_si + (size_t)r * 2 * H + H;
        for (int h = 0; h < H; ++h) dr[h] = ar[h] > 0.0f ? g * qr[h] + extra[h] : 0.0f;
      } else {
        for (int h = 0; h < H; ++h) dr[h] = ar[h] > 0.0f ? g * qr[h] : 0.0f;
      }
      for (int h = 0; h < H; ++h) g_bo[h] = g_bo[h] + dr[h];
    }
    for (int h = 0; h < H; ++h) g_bq[h] = g_bq[h] + dq[h];
  }
}

// where(a > 0, (first + second) + third[:, :H], 0) and its column sums (the trunk's ReLU under the option head:
// the query's, the aux heads' and the stop head's gradients)
TCG_CLONES void relu_back3(const float* first, const float* second, const float* third, int third_cols, const float* a,
                           int R, int H, float* d, float* g_bias) {
  for (int h = 0; h < H; ++h) g_bias[h] = 0.0f;
  for (int r = 0; r < R; ++r) {
    const float* __restrict f = first + (size_t)r * H;
    const float* __restrict s = second + (size_t)r * H;
    const float* __restrict t = third + (size_t)r * third_cols;
    const float* __restrict ar = a + (size_t)r * H;
    float* __restrict dr = d + (size_t)r * H;
    for (int h = 0; h < H; ++h) dr[h] = ar[h] > 0.0f ? (f[h] + s[h]) + t[h] : 0.0f;
    for (int h = 0; h < H; ++h) g_bias[h] = g_bias[h] + dr[h];
  }
}

}  // namespace tcg
