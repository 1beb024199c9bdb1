// What the kernels share: MLX's own scalar functors and the build's vectorisation targets.
#pragma once

#include "mlx/backend/cpu/binary_ops.h"
#include "mlx/backend/cpu/unary_ops.h"

namespace mx = mlx::core;

namespace tcg {

// One body, compiled for AVX-512, AVX2 and baseline x86-64; the loader picks by CPU at run time. The
// arithmetic is the same IEEE operations in every clone (-ffp-contract=off: no fused multiply-add).
#if defined(__x86_64__) && !defined(TCG_NO_CLONES)
#define TCG_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TCG_CLONES
#endif

inline float maxf(float a, float b) { return mx::detail::Maximum{}(a, b); }  // NaN in a wins, as in MLX
inline float minf(float a, float b) { return mx::detail::Minimum{}(a, b); }

constexpr float Z_MAX = 0.9f;  // tcgexp/learn/scan.py Z_MAX, as the float32 MLX compares with

}  // namespace tcg
