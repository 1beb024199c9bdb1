// The Python module tcgexp.kernels._fused (nanobind, in MLX's nanobind domain so mx.array passes through).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "fused.h"
#include "mlx/version.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_fused, m) {
  m.doc() = "tcgexp's fused CPU kernels for the training step (see tcgexp/kernels/csrc)";
  m.attr("mlx_version") = MLX_VERSION_MAJOR * 10000 + MLX_VERSION_MINOR * 100 + MLX_VERSION_PATCH;
  m.def("grads", &tcg::grads_op, "inputs"_a, "targets"_a, "params"_a, "memory"_a, "block"_a, "aux_weight"_a,
        "helper"_a = false, "split_min"_a = 1L << 19);
  m.def("clip_adamw", &tcg::clip_adamw_op, "grads"_a, "params"_a, "m"_a, "v"_a, "lr"_a, "prescale"_a.none(),
        "consts"_a);
}
