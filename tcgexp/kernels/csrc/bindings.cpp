// The Python module tcgexp.kernels._fused (nanobind, in MLX's nanobind domain so mx.array passes through).
//
// Each operation takes keyword arguments only: its arrays as dicts keyed by name, its settings one by one, and
// fills the operation's call struct; it returns dicts keyed the same way. primitive.cpp checks every field.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>

#include "fused.h"
#include "mlx/version.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// the name of v's type, with its module's ("numpy.ndarray"; builtins without: "float")
std::string type_of(nb::handle v) {
  std::string module = nb::cast<std::string>(nb::str(nb::getattr(v.type(), "__module__")));
  std::string name = nb::cast<std::string>(nb::str(nb::getattr(v.type(), "__qualname__")));
  return module == "builtins" ? name : module + "." + name;
}

// a dict of arrays, in its order; a key that is not a str or a value that is not an mx.array refused by name
tcg::Named named(const char* op, const char* group, const nb::dict& d) {
  tcg::Named out;
  for (auto [k, v] : d) {
    if (!nb::isinstance<nb::str>(k))
      throw std::invalid_argument(std::string(op) + ": " + group + " has the key " + nb::repr(k).c_str() +
                                  ", expected names (str)");
    std::string name = nb::cast<std::string>(k);
    if (!nb::isinstance<mx::array>(v))
      throw std::invalid_argument(std::string(op) + ": " + group + "[\"" + name + "\"] is " +
                                  type_of(v) + ", expected an mx.array");
    out.emplace_back(std::move(name), nb::cast<mx::array>(v));
  }
  return out;
}

nb::dict dict(const tcg::Named& arrays) {
  nb::dict d;
  for (const auto& [name, a] : arrays) d[name.c_str()] = nb::cast(a);
  return d;
}

nb::dict grads(const nb::dict& inputs, const nb::dict& targets, const nb::dict& params,
               const std::vector<std::string>& metrics, bool memory, int block, float aux_weight, bool helper,
               long split_min, bool options) {
  tcg::GradsCall call{named("grads", "inputs", inputs),
                      named("grads", "targets", targets),
                      named("grads", "params", params),
                      metrics,
                      options,
                      memory,
                      block,
                      aux_weight,
                      helper,
                      split_min};
  auto r = tcg::grads_op(call);
  nb::dict out;
  out["values"] = nb::cast(r.values);
  out["carry"] = nb::cast(r.carry);
  out["grads"] = dict(r.grads);
  return out;
}

nb::dict clip_adamw(const nb::dict& grads, const nb::dict& params, const nb::dict& m, const nb::dict& v,
                    const mx::array& learning_rate, const std::optional<mx::array>& scale, double grad_clip,
                    double beta1, double beta2, double eps, double weight_decay) {
  tcg::ClipAdamWCall call{named("clip_adamw", "grads", grads),
                          named("clip_adamw", "params", params),
                          named("clip_adamw", "m", m),
                          named("clip_adamw", "v", v),
                          learning_rate,
                          scale,
                          grad_clip,
                          beta1,
                          beta2,
                          eps,
                          weight_decay};
  auto r = tcg::clip_adamw_op(call);
  nb::dict out;
  out["norm"] = nb::cast(r.norm);
  out["params"] = dict(r.params);
  out["m"] = dict(r.m);
  out["v"] = dict(r.v);
  return out;
}

nb::dict contract(bool options) {
  nb::dict out;
  for (const auto& [group, fields] : tcg::grads_contract(options)) {
    nb::dict g;
    for (const auto& [name, what] : fields) g[name.c_str()] = what;
    out[group.c_str()] = g;
  }
  return out;
}

}  // namespace

NB_MODULE(_fused, m) {
  m.doc() = "tcgexp's fused CPU kernels for the training step (see tcgexp/kernels/csrc)";
  m.attr("mlx_version") = MLX_VERSION_MAJOR * 10000 + MLX_VERSION_MINOR * 100 + MLX_VERSION_PATCH;
  m.def("grads", &grads, nb::kw_only(), "inputs"_a, "targets"_a, "params"_a, "metrics"_a, "memory"_a, "block"_a,
        "aux_weight"_a, "helper"_a = false, "split_min"_a = 1L << 19, "options"_a = false,
        "The loss and every parameter's gradient: {'values', 'carry', 'grads': {name: gradient}} (grads_fields "
        "in primitive.cpp and grads_contract() name every field); options=True: the option head's pass.");
  m.def("clip_adamw", &clip_adamw, nb::kw_only(), "grads"_a, "params"_a, "m"_a, "v"_a, "learning_rate"_a,
        "scale"_a.none() = nb::none(), "grad_clip"_a, "beta1"_a, "beta2"_a, "eps"_a, "weight_decay"_a,
        "Clipping and AdamW over every parameter: {'norm', 'params', 'm', 'v'}, each dict keyed as `grads`.");
  m.def("grads_contract", &contract, nb::kw_only(), "options"_a = false,
        "What grads() reads and returns: {group: {name: 'dtype [dimensions]'}} (group 'outputs': what it returns); "
        "options=True: the option head's fields.");
}
