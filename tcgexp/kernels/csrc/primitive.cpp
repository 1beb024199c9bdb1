// The two operations, one MLX Primitive each (LossAndGrads, ClipAdamW), and their contract by name.
//
// A call's arrays arrive as dicts keyed by name (bindings.cpp). grads_fields and adamw_fields declare, once, every
// array an operation reads and writes: its group (the keyword argument it comes in), its name, its element type
// (the kernel's pointer's) and its shape in named dimensions. The same declaration is walked three ways: Describe
// (grads_contract: what Python selects by, docs and tests read), Check (at the call: every field present and
// expected, of its dtype and shape, or one error naming it) and Read (in the task: the pointers to the checked
// arrays, found by the same keys). No index is shared with Python, nor between the call and the task.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "fused.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/utils.h"

namespace tcg {

namespace {

// A pointer to `a`'s elements in row-major order: its own buffer when it is row-contiguous, else a copy
// (MLX's copy helpers are not exported to extensions; inputs are almost always contiguous already).
const void* dense(const mx::array& a, std::vector<std::vector<char>>& temps) {
  if (a.flags().row_contiguous) return a.data<void>();
  size_t item = a.itemsize(), n = a.size();
  temps.emplace_back(n * item);
  char* dst = temps.back().data();
  const char* src = static_cast<const char*>(a.data<void>());
  auto shape = a.shape();
  auto strides = a.strides();
  int nd = static_cast<int>(shape.size());
  std::vector<int64_t> idx(nd, 0);
  for (size_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) off += idx[d] * strides[d];
    std::memcpy(dst + e * item, src + off * item, item);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return dst;
}

// ---- fields, dimensions, shapes ----

// a call's argument that is wrong, named (Python sees ValueError)
[[noreturn]] void refuse(const std::string& op, const std::string& why) {
  throw std::invalid_argument(op + ": " + why);
}

// a field: the keyword argument (group) it comes in, "" for a top-level one, and its name there
struct Key {
  std::string group, name;
  bool operator==(const Key&) const = default;
  std::string str() const { return group.empty() ? name : group + "[\"" + name + "\"]"; }
};

template <class T>
mx::Dtype dtype_of();
template <>
mx::Dtype dtype_of<float>() { return mx::float32; }
template <>
mx::Dtype dtype_of<int>() { return mx::int32; }
template <>
mx::Dtype dtype_of<bool>() { return mx::bool_; }

std::string dtype_name(mx::Dtype t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

std::string shape_str(const mx::Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// a dimension of a call's arrays by name (R rows, H hidden, ...): fixed by the first field that has it
struct Dim {
  std::string name;
  int64_t size = -1;
  std::string from = {};  // the field that fixed it
};

// the shape a gradient's parameter and moments share: fixed by the first of them, the gradient
struct Like {
  std::optional<mx::Shape> shape;
  std::string from;
};

struct One {};  // one value, of any rank (a learning rate, a scale)

// what a field's shape must be: these dimensions, a Like's shape, or One value
struct Spec {
  std::vector<Dim*> dims;
  Like* like = nullptr;
  bool one = false;
  Spec(std::initializer_list<Dim*> d) : dims(d) {}
  Spec(std::vector<Dim*> d) : dims(std::move(d)) {}
  Spec(Like& l) : like(&l) {}
  Spec(One) : one(true) {}

  std::string describe() const {
    if (one) return "one value";
    if (like) return like->shape ? shape_str(*like->shape) + " (as " + like->from + ")" : "its gradient's shape";
    std::string out = "[";
    for (size_t i = 0; i < dims.size(); ++i) {
      out += (i ? ", " : "") + dims[i]->name;
      if (dims[i]->size >= 0 && dims[i]->name != std::to_string(dims[i]->size)) out += "=" + std::to_string(dims[i]->size);
    }
    return out + "]";
  }

  // `a`'s shape is this one: binds the dimensions not fixed yet, refuses a mismatch naming the field
  void fit(const std::string& op, const std::string& field, const mx::array& a) const {
    if (one) {
      if (a.size() != 1) refuse(op, field + " has shape " + shape_str(a.shape()) + ", expected one value");
      return;
    }
    if (like) {
      if (!like->shape) {
        like->shape = a.shape(), like->from = field;
      } else if (a.shape() != *like->shape) {
        refuse(op, field + " has shape " + shape_str(a.shape()) + ", expected " + describe());
      }
      return;
    }
    bool ok = a.ndim() == dims.size();
    for (size_t i = 0; ok && i < dims.size(); ++i) ok = dims[i]->size < 0 || dims[i]->size == a.shape(i);
    if (!ok) {
      std::string why = field + " has shape " + shape_str(a.shape()) + ", expected " + describe();
      for (auto* d : dims)
        if (d->size >= 0 && !d->from.empty()) why += "; " + d->name + " from " + d->from;
      refuse(op, why);
    }
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i]->size < 0) dims[i]->size = a.shape(i), dims[i]->from = field;
  }

  mx::Shape shape() const {  // an output's (every dimension fixed by then)
    if (one) return {};
    if (like) return *like->shape;
    mx::Shape s;
    for (auto* d : dims) s.push_back(static_cast<int>(d->size));
    return s;
  }
};

// ---- the walks over a declaration ----

// the declared fields (for the contract, and for a call's missing and unexpected ones)
struct Describe {
  struct Field {
    Key key;
    std::string dtype, shape;
    bool optional, output;
  };
  std::vector<Field> fields;
  template <class T>
  void in(const char* group, const std::string& name, const T*&, const Spec& s) {
    fields.push_back({{group, name}, dtype_name(dtype_of<T>()), s.describe(), false, false});
  }
  template <class T>
  void maybe(const char* group, const std::string& name, const T*&, const Spec& s) {
    fields.push_back({{group, name}, dtype_name(dtype_of<T>()), s.describe(), true, false});
  }
  void out(const char* group, const std::string& name, float*&, const Spec& s) {
    fields.push_back({{group, name}, dtype_name(mx::float32), s.describe(), false, true});
  }
};

using Group = std::pair<std::string, const Named*>;  // a keyword argument's arrays by name

// At the call: every declared field present, nothing undeclared, each of its dtype and shape; collects the
// primitive's inputs and its outputs' shapes, each with its key
class Check {
 public:
  Check(std::string op, std::vector<Group> groups) : op_(std::move(op)), groups_(std::move(groups)) {}

  // before the walk: a field the operation does not read, or one it needs that is not there, refused by name
  void expect(const Describe& declared) {
    std::vector<Key> missing;
    for (const auto& f : declared.fields)
      if (!f.output && !f.optional && find(f.key) == nullptr) missing.push_back(f.key);
    for (const auto& [group, arrays] : groups_)
      for (const auto& [name, _] : *arrays) {
        Key k{group, name};
        bool known = std::any_of(declared.fields.begin(), declared.fields.end(),
                                 [&](const auto& f) { return !f.output && f.key == k; });
        if (known) continue;
        std::string why = k.str() + " is not a field of " + op_;
        std::string takes;
        for (const auto& f : declared.fields)
          if (!f.output && f.key.group == group) takes += (takes.empty() ? "" : ", ") + f.key.name;
        why += " (" + (group.empty() ? std::string("its arrays") : group) + ": " + takes + ")";
        if (!missing.empty()) why += "; missing: " + missing.front().str();
        refuse(op_, why);
      }
    if (!missing.empty()) refuse(op_, missing.front().str() + " is missing");
  }

  template <class T>
  void in(const char* group, const std::string& name, const T*&, const Spec& s) {
    Key k{group, name};
    const mx::array* a = find(k);
    if (a == nullptr) refuse(op_, k.str() + " is missing");
    take(k, *a, dtype_of<T>(), s);
  }
  template <class T>
  void maybe(const char* group, const std::string& name, const T*&, const Spec& s) {
    Key k{group, name};
    if (const mx::array* a = find(k)) take(k, *a, dtype_of<T>(), s);
  }
  void out(const char* group, const std::string& name, float*&, const Spec& s) {
    shapes.push_back(s.shape());
    output_keys.push_back({group, name});
  }

  std::vector<mx::array> inputs;
  std::vector<Key> input_keys;
  std::vector<mx::Shape> shapes;
  std::vector<Key> output_keys;

 private:
  const mx::array* find(const Key& k) const {
    for (const auto& [group, arrays] : groups_)
      if (group == k.group)
        for (const auto& [name, a] : *arrays)
          if (name == k.name) return &a;
    return nullptr;
  }
  void take(const Key& k, const mx::array& a, mx::Dtype dtype, const Spec& s) {
    if (a.dtype() != dtype) refuse(op_, k.str() + " is " + dtype_name(a.dtype()) + ", expected " + dtype_name(dtype));
    s.fit(op_, k.str(), a);
    inputs.push_back(a);
    input_keys.push_back(k);
  }

  std::string op_;
  std::vector<Group> groups_;
};

// In the task: each field's pointer, found by its key among the arrays the call checked
class Read {
 public:
  Read(const std::vector<Key>& in_keys, const std::vector<mx::array>& inputs, const std::vector<Key>& out_keys,
       std::vector<mx::array>& outputs)
      : in_keys_(in_keys), inputs_(inputs), out_keys_(out_keys), outputs_(outputs) {}

  template <class T>
  void in(const char* group, const std::string& name, const T*& p, const Spec& s) {
    int i = index(in_keys_, next_in_, group, name);
    if (i < 0) throw std::logic_error("tcgexp kernels: " + Key{group, name}.str() + " was not checked");
    s.fit("", "", inputs_[i]);  // binds the dimensions (the call checked the shapes)
    p = static_cast<const T*>(dense(inputs_[i], temps_));
  }
  template <class T>
  void maybe(const char* group, const std::string& name, const T*& p, const Spec& s) {
    size_t at = next_in_;
    if (index(in_keys_, at, group, name) >= 0) in(group, name, p, s);
    else p = nullptr;
  }
  void out(const char* group, const std::string& name, float*& p, const Spec&) {
    int i = index(out_keys_, next_out_, group, name);
    if (i < 0) throw std::logic_error("tcgexp kernels: no output " + Key{group, name}.str());
    p = outputs_[i].data<float>();
  }

 private:
  // the key's position: where the walk's order puts it (the call made the arrays in that order), else searched
  static int index(const std::vector<Key>& keys, size_t& next, const char* group, const std::string& name) {
    auto is = [&](size_t i) { return keys[i].name == name && keys[i].group == group; };
    size_t i = next;
    if (i >= keys.size() || !is(i)) {
      for (i = 0; i < keys.size() && !is(i); ++i) {
      }
      if (i == keys.size()) return -1;
    }
    next = i + 1;
    return static_cast<int>(i);
  }

  const std::vector<Key>& in_keys_;
  const std::vector<mx::array>& inputs_;
  const std::vector<Key>& out_keys_;
  std::vector<mx::array>& outputs_;
  size_t next_in_ = 0, next_out_ = 0;
  std::vector<std::vector<char>> temps_;
};

// ---- the loss and gradients: its fields ----

// R rows, D features, H hidden, A action (option) slots, C what a decision chose (label_hot's width: the actions
// one-hot, or the chosen options' vectors), O an option's width, L lanes, T decisions per lane; the gates' 2H
// outputs of H + C inputs; the aux heads' 4; the stop head's 1; the values asked for
struct GradsDimNames {
  Dim R{"R"}, D{"D"}, H{"H"}, A{"A"}, C{"C"}, O{"O"}, L{"L"}, T{"T"}, G{"2H"}, HC{"H+C"}, aux{"4", 4}, one{"1", 1},
      V{"metrics"};
  void derive() {  // the gates' dimensions, once H and C are fixed
    if (H.size >= 0) G.size = 2 * H.size, G.from = H.from;
    if (H.size >= 0 && C.size >= 0) HC.size = H.size + C.size, HC.from = H.from + " and " + C.from;
  }
  GradsDims dims() const {
    return {(int)R.size, (int)D.size, (int)H.size, (int)A.size, (int)C.size, (int)O.size, (int)L.size, (int)T.size};
  }
};

// Every array the loss-and-gradients pass reads and writes, for either policy head (`options`: the option head):
// inputs (the model's, and h0, the lanes' incoming memory), targets (what the loss reads of the batch's), params
// (RecurrentPolicy's trainable parameters, named as tree_flatten names them); it returns values (the metrics asked
// for), carry (the lanes' memory after the chunk) and grads (each parameter's gradient, named and shaped as the
// parameter).
template <class V>
void grads_fields(V& v, GradsIn& in, GradsOut& out, GradsDimNames& d, bool options) {
  v.in("inputs", "x", in.x, {&d.R, &d.D});
  v.in("inputs", "row_lane", in.row_lane, {&d.R});
  v.in("inputs", "row_dec", in.row_dec, {&d.R});
  v.in("inputs", "first_row", in.first_row, {&d.L, &d.T});
  v.in("inputs", "label_hot", in.label_hot, {&d.L, &d.T, &d.C});
  v.in("inputs", "lane_decisions", in.lane_decisions, {&d.L});
  v.in("inputs", "h0", in.h0, {&d.L, &d.H});
  if (options) {
    v.in("inputs", "options", in.options, {&d.R, &d.A, &d.O});
    v.in("inputs", "pick", in.pick, {&d.R});
  }
  v.in("targets", "action_mask", in.action_mask, {&d.R, &d.A});
  v.in("targets", "label", in.label, {&d.R});
  v.in("targets", "row_weight", in.row_weight, {&d.R});
  v.in("targets", "aux_valid", in.aux_valid, {&d.R});
  v.in("targets", "aux_ko", in.aux_ko, {&d.R});
  v.in("targets", "aux_prize_delta", in.aux_prize_delta, {&d.R});
  v.in("targets", "aux_terminal", in.aux_terminal, {&d.R});
  v.in("targets", "aux_return", in.aux_return, {&d.R});
  if (options) {
    v.in("targets", "policy_weight", in.policy_weight, {&d.R});
    v.in("targets", "stop_target", in.stop_target, {&d.R});
    v.in("targets", "stop_valid", in.stop_valid, {&d.R});
  }
  d.derive();
  struct Param {
    const char* name;
    const float*& value;
    float*& grad;
    std::vector<Dim*> shape;
  };
  std::vector<Param> params = {
      {"encoder.layers.0.weight", in.W0, out.g_W0, {&d.H, &d.D}},
      {"encoder.layers.0.bias", in.b0, out.g_b0, {&d.H}},
      {"encoder.layers.2.weight", in.W2, out.g_W2, {&d.H, &d.H}},
      {"encoder.layers.2.bias", in.b2, out.g_b2, {&d.H}},
      {"gates.weight", in.Wg, out.g_Wg, {&d.G, &d.HC}},
      {"gates.bias", in.bg, out.g_bg, {&d.G}},
      {"trunk.layers.0.weight", in.Wt, out.g_Wt, {&d.H, &d.G}},
      {"trunk.layers.0.bias", in.bt, out.g_bt, {&d.H}},
  };
  if (options) {
    params.push_back({"option.weight", in.Wo, out.g_Wo, {&d.H, &d.O}});
    params.push_back({"option.bias", in.bo, out.g_bo, {&d.H}});
    params.push_back({"query.weight", in.Wq, out.g_Wq, {&d.H, &d.H}});
    params.push_back({"query.bias", in.bq, out.g_bq, {&d.H}});
    params.push_back({"stop.weight", in.Ws, out.g_Ws, {&d.one, &d.G}});
    params.push_back({"stop.bias", in.bs, out.g_bs, {&d.one}});
  } else {
    params.push_back({"policy.weight", in.Wp, out.g_Wp, {&d.A, &d.H}});
    params.push_back({"policy.bias", in.bp, out.g_bp, {&d.A}});
  }
  params.push_back({"aux.weight", in.Wa, out.g_Wa, {&d.aux, &d.H}});
  params.push_back({"aux.bias", in.ba, out.g_ba, {&d.aux}});
  for (const auto& p : params) v.in("params", p.name, p.value, p.shape);
  v.out("", "values", out.values, {&d.V});
  v.out("", "carry", out.carry, {&d.L, &d.H});
  for (const auto& p : params) v.out("grads", p.name, p.grad, p.shape);
}

// ---- clip and AdamW: its fields ----

struct AdamWArrays {
  std::vector<const float*> grads, params, m, v;
  std::vector<float*> params_out, m_out, v_out;
  std::vector<Like> shapes;  // each parameter's (its gradient's)
  const float *learning_rate = nullptr, *scale = nullptr;
  float* norm = nullptr;
  explicit AdamWArrays(size_t n)
      : grads(n), params(n), m(n), v(n), params_out(n), m_out(n), v_out(n), shapes(n) {}
};

// Per parameter (named as the gradients are, in their order): grads, params, m and v, of the gradient's shape;
// learning_rate and (optionally) scale, one value each. It returns norm (the gradients' global norm) and, per
// parameter, params, m and v: the updated ones.
template <class V>
void adamw_fields(V& v, const std::vector<std::string>& names, AdamWArrays& a) {
  size_t n = names.size();
  for (size_t i = 0; i < n; ++i) v.in("grads", names[i], a.grads[i], a.shapes[i]);
  for (size_t i = 0; i < n; ++i) v.in("params", names[i], a.params[i], a.shapes[i]);
  for (size_t i = 0; i < n; ++i) v.in("m", names[i], a.m[i], a.shapes[i]);
  for (size_t i = 0; i < n; ++i) v.in("v", names[i], a.v[i], a.shapes[i]);
  v.in("", "learning_rate", a.learning_rate, One{});
  v.maybe("", "scale", a.scale, One{});
  v.out("", "norm", a.norm, std::vector<Dim*>{});
  for (size_t i = 0; i < n; ++i) v.out("params", names[i], a.params_out[i], a.shapes[i]);
  for (size_t i = 0; i < n; ++i) v.out("m", names[i], a.m_out[i], a.shapes[i]);
  for (size_t i = 0; i < n; ++i) v.out("v", names[i], a.v_out[i], a.shapes[i]);
}

// ---- the primitives ----

// what a primitive's task needs besides its arrays: its settings and each array's key (shared with the task,
// which may run after MLX has let go of the primitive)
template <class Settings>
struct Plan {
  Settings settings;
  std::vector<Key> inputs, outputs;
  std::vector<std::string> params;  // clip_adamw: the parameters' names, in the gradients' order
  bool operator==(const Plan&) const = default;
};

// allocates the outputs and runs task(inputs, outputs) as one task on the stream
template <class Task>
void on_stream(const mx::Stream& s, const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs, Task task) {
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(s);
  for (auto& i : inputs) encoder.set_input_array(i);
  for (auto& o : outputs) encoder.set_output_array(o);
  encoder.dispatch([task = std::move(task), inputs, outputs]() mutable { task(inputs, outputs); });
}

// the whole loss and written-out backward pass (step.cpp)
class LossAndGrads : public mx::Primitive {
 public:
  LossAndGrads(mx::Stream s, std::shared_ptr<const Plan<GradsSettings>> plan) : mx::Primitive(s), plan_(plan) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    on_stream(stream(), inputs, outputs, [plan = plan_](const auto& xs, auto& outs) {
      GradsIn in{};
      GradsOut out{};
      GradsDimNames d;
      d.V.size = static_cast<int64_t>(plan->settings.values.size());
      Read r(plan->inputs, xs, plan->outputs, outs);
      grads_fields(r, in, out, d, plan->settings.options);
      loss_and_grads(in, out, d.dims(), plan->settings);
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { gpu(); }
  const char* name() const override { return "TcgLossAndGrads"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const LossAndGrads*>(&other);
    return o && *o->plan_ == *plan_;
  }
  static void gpu() {
    throw std::runtime_error("tcgexp's fused kernels run on the CPU only (trainer.kernels=pure on a GPU)");
  }

 private:
  std::shared_ptr<const Plan<GradsSettings>> plan_;
};

// global-norm clipping and AdamW over every parameter (adamw.cpp)
class ClipAdamW : public mx::Primitive {
 public:
  ClipAdamW(mx::Stream s, std::shared_ptr<const Plan<AdamW>> plan) : mx::Primitive(s), plan_(plan) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    on_stream(stream(), inputs, outputs, [plan = plan_](const auto& xs, auto& outs) {
      AdamWArrays a(plan->params.size());
      Read r(plan->inputs, xs, plan->outputs, outs);
      adamw_fields(r, plan->params, a);
      std::vector<size_t> sizes;
      for (const auto& like : a.shapes) {
        size_t n = 1;
        for (auto e : *like.shape) n *= static_cast<size_t>(e);
        sizes.push_back(n);
      }
      clip_adamw(a.grads, a.params, a.m, a.v, sizes, a.scale, *a.learning_rate, plan->settings, a.norm, a.params_out,
                 a.m_out, a.v_out);
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { LossAndGrads::gpu(); }
  const char* name() const override { return "TcgClipAdamW"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const ClipAdamW*>(&other);
    return o && *o->plan_ == *plan_;
  }

 private:
  std::shared_ptr<const Plan<AdamW>> plan_;
};

Named by_key(const std::vector<Key>& keys, const std::vector<mx::array>& arrays, const std::string& group) {
  Named out;
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i].group == group) out.emplace_back(keys[i].name, arrays[i]);
  return out;
}

const mx::array& top(const std::vector<Key>& keys, const std::vector<mx::array>& arrays, const std::string& name) {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i].group.empty() && keys[i].name == name) return arrays[i];
  throw std::logic_error("tcgexp kernels: no output " + name);
}

}  // namespace

// ---- the operations ----

Contract grads_contract(bool options) {
  GradsIn in{};
  GradsOut out{};
  GradsDimNames d;
  Describe declared;
  grads_fields(declared, in, out, d, options);
  Contract contract;
  for (const auto& f : declared.fields) {
    std::string group = f.output ? "outputs" : f.key.group;
    std::string name = f.output ? f.key.str() : f.key.name;
    auto it = std::find_if(contract.begin(), contract.end(), [&](const auto& g) { return g.first == group; });
    if (it == contract.end()) it = contract.insert(contract.end(), {group, {}});
    it->second.emplace_back(name, f.dtype + " " + f.shape);
  }
  return contract;
}

GradsResult grads_op(const GradsCall& call) {
  const std::string op = "grads";
  if (call.block < 1) refuse(op, "block=" + std::to_string(call.block) + ", expected >= 1");
  if (call.split_min < 0) refuse(op, "split_min=" + std::to_string(call.split_min) + ", expected >= 0");
  auto plan = std::make_shared<Plan<GradsSettings>>();
  plan->settings = {call.options, call.memory, call.block, call.aux_weight, call.helper, call.split_min, {}};
  const char* const* computed_end = std::begin(kMetricNames) + (call.options ? kMetrics : kActionMetrics);
  for (const auto& name : call.metrics) {
    auto* at = std::find_if(std::begin(kMetricNames), computed_end, [&](const char* m) { return name == m; });
    if (at == computed_end) {
      std::string known;
      for (auto* m = std::begin(kMetricNames); m != computed_end; ++m) known += (known.empty() ? "" : ", ") + std::string(*m);
      refuse(op, "metrics has \"" + name + "\", which the loss does not compute (it computes " + known +
                     (call.options ? "" : "; the stop head's with options=True") + ")");
    }
    plan->settings.values.push_back(static_cast<Metric>(at - std::begin(kMetricNames)));
  }
  GradsIn in{};
  GradsOut out{};
  Describe declared;
  {
    GradsDimNames d;
    grads_fields(declared, in, out, d, call.options);
  }
  Check check(op, {{"inputs", &call.inputs}, {"targets", &call.targets}, {"params", &call.params}});
  check.expect(declared);
  GradsDimNames d;
  d.V.size = static_cast<int64_t>(call.metrics.size());
  grads_fields(check, in, out, d, call.options);
  plan->inputs = check.input_keys;
  plan->outputs = check.output_keys;
  std::vector<mx::Dtype> dtypes(check.shapes.size(), mx::float32);
  auto s = mx::default_stream(mx::default_device());
  auto arrays = mx::array::make_arrays(std::move(check.shapes), dtypes, std::make_shared<LossAndGrads>(s, plan),
                                       std::move(check.inputs));
  return {top(plan->outputs, arrays, "values"), top(plan->outputs, arrays, "carry"),
          by_key(plan->outputs, arrays, "grads")};
}

ClipAdamWResult clip_adamw_op(const ClipAdamWCall& call) {
  const std::string op = "clip_adamw";
  auto plan = std::make_shared<Plan<AdamW>>();
  // as MLX's AdamW casts its Python floats: each setting to float32, 1 - beta computed in double first
  plan->settings = {static_cast<float>(call.grad_clip), static_cast<float>(call.beta1),
                    static_cast<float>(1.0 - call.beta1), static_cast<float>(call.beta2),
                    static_cast<float>(1.0 - call.beta2), static_cast<float>(call.eps),
                    static_cast<float>(call.weight_decay)};
  for (const auto& [name, _] : call.grads) plan->params.push_back(name);
  Named scalars{{"learning_rate", call.learning_rate}};
  if (call.scale) scalars.emplace_back("scale", *call.scale);
  size_t n = plan->params.size();
  Describe declared;
  {
    AdamWArrays a(n);
    adamw_fields(declared, plan->params, a);
  }
  Check check(op, {{"grads", &call.grads}, {"params", &call.params}, {"m", &call.m}, {"v", &call.v}, {"", &scalars}});
  check.expect(declared);
  AdamWArrays a(n);
  adamw_fields(check, plan->params, a);
  plan->inputs = check.input_keys;
  plan->outputs = check.output_keys;
  std::vector<mx::Dtype> dtypes(check.shapes.size(), mx::float32);
  auto s = mx::default_stream(mx::default_device());
  auto arrays = mx::array::make_arrays(std::move(check.shapes), dtypes, std::make_shared<ClipAdamW>(s, plan),
                                       std::move(check.inputs));
  return {top(plan->outputs, arrays, "norm"), by_key(plan->outputs, arrays, "params"),
          by_key(plan->outputs, arrays, "m"), by_key(plan->outputs, arrays, "v")};
}

}  // namespace tcg
