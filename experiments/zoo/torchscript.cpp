// "torchscript:<path>": any traced or scripted module as a splittable graph.
//
// The module is loaded, frozen (parameters become graph constants, nothing
// else changes, so the ops are the traced ones) and inlined. Its top-level
// nodes, in graph order, are grouped into layers: with granularity "module"
// a layer is a maximal run of nodes called from the same module (the module
// path comes from each node's inlined call stack: "layer2.1.relu"); with
// "node" every node is a layer. Split k cuts between layer k-1 and layer k.
//
// What crosses split k: every value defined before it (or the input) and used
// at or after it (skip connections, several live tensors, sizes). Constants
// never cross: each segment re-creates the ones it uses. Integers, floats and
// bools cross as 0-dim tensors (PROTOCOL.md 3.4); lists and tuples as their
// elements, rebuilt on the receiving side. A tensor used at and after a cut
// only for its metadata (aten::size, dim, numel, len, its dtype or device:
// LR-ASPP's input, read at the end for the final interpolate's size) crosses
// as its shape, a 1-D int64 tensor "NAME:shape"; the receiver rebuilds an
// uninitialised tensor of that shape and dtype for those reads (#46 item 3).
// A split where two crossing values
// may share memory (a view) and the tail writes one of them in place is
// refused with the reason: sent as separate tensors they would not share it.
//
// Segments [a, b) are graphs of their own, built on first use and cached
// (a few at a time); with optimize each is optimized for inference as
// torch.jit.optimize_for_inference does (BatchNorm folded into convolutions,
// conv-add-relu fused, MKLDNN layouts where available).
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_conv_add_relu_fusion.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/csrc/jit/passes/frozen_linear_transpose.h>
#include <torch/csrc/jit/passes/frozen_ops_to_mkldnn.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <filesystem>
#include <list>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "experiments/graph.hpp"
#include "experiments/registry.hpp"
#include "experiments/weights.hpp"

namespace tracr::experiments {

namespace tj = torch::jit;

namespace {

// The user-facing line of a LibTorch error: no backtrace, and of the
// TorchScript interpreter's report only its last line (the error itself).
std::string error_line(const std::exception& ex) {
  const auto* c = dynamic_cast<const c10::Error*>(&ex);
  std::string text = c ? c->what_without_backtrace() : ex.what();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

std::string kind_name(tj::Node* n) { return n->kind().toUnqualString(); }

// A use that reads only a tensor's metadata, never its values.
bool metadata_use(const tj::Use& u) {
  static const c10::Symbol numel = c10::Symbol::fromQualString("aten::numel");
  const auto k = u.user->kind();
  return u.offset == 0 && (k == c10::aten::size || k == c10::aten::dim || k == numel || k == c10::aten::len ||
                           k == c10::prim::dtype || k == c10::prim::device);
}

// How a crossing value travels: as tensors (its leaves).
struct Wire {
  enum Kind { tensor, integer, floating, boolean, list, tuple } kind = tensor;
  c10::TypePtr type;        // the value's declared type
  std::vector<Wire> elems;  // list / tuple elements
  void leaves(std::vector<const Wire*>& out) const {
    if (kind == list || kind == tuple) {
      for (const auto& e : elems) e.leaves(out);
    } else {
      out.push_back(this);
    }
  }
};

// A wire for a value observed as `v` at the probe; error text when it cannot travel.
std::optional<Wire> wire_of(const c10::IValue& v, const c10::TypePtr& type, std::string& why) {
  Wire w;
  w.type = type;
  if (v.isTensor()) {
    w.kind = Wire::tensor;
  } else if (v.isInt()) {
    w.kind = Wire::integer;
  } else if (v.isDouble()) {
    w.kind = Wire::floating;
  } else if (v.isBool()) {
    w.kind = Wire::boolean;
  } else if (v.isList()) {
    w.kind = Wire::list;
    auto lt = type->cast<c10::ListType>();
    if (!lt) {
      why = "a list typed " + type->annotation_str();
      return std::nullopt;
    }
    for (const auto& e : v.toListRef()) {
      auto ew = wire_of(e, lt->getElementType(), why);
      if (!ew) return std::nullopt;
      w.elems.push_back(std::move(*ew));
    }
  } else if (v.isTuple()) {
    w.kind = Wire::tuple;
    auto tt = type->cast<c10::TupleType>();
    const auto& el = v.toTupleRef().elements();
    if (!tt || tt->elements().size() != el.size()) {
      why = "a tuple typed " + type->annotation_str();
      return std::nullopt;
    }
    for (size_t i = 0; i < el.size(); ++i) {
      auto ew = wire_of(el[i], tt->elements()[i], why);
      if (!ew) return std::nullopt;
      w.elems.push_back(std::move(*ew));
    }
  } else {
    why = "a " + v.tagKind() + " (only tensors, numbers, bools and lists or tuples of them can be sent)";
    return std::nullopt;
  }
  return w;
}

// Builds a segment graph from nodes of the model graph.
struct Cloner {
  std::shared_ptr<tj::Graph> g = std::make_shared<tj::Graph>();
  std::unordered_map<tj::Value*, tj::Value*> map;

  tj::Value* lookup(tj::Value* v) {
    auto it = map.find(v);
    if (it != map.end()) return it->second;
    if (v->node()->kind() == c10::prim::Constant) {
      tj::Node* c = g->createClone(v->node(), [](tj::Value* x) { return x; });
      g->appendNode(c);
      map[v] = c->output();
      return c->output();
    }
    throw std::runtime_error("value %" + v->debugName() + " is not available in this segment");
  }
  void clone(tj::Node* n) {
    tj::Node* c = g->createClone(n, [this](tj::Value* v) { return lookup(v); });
    g->appendNode(c);
    for (size_t i = 0; i < n->outputs().size(); ++i) map[n->outputs()[i]] = c->outputs()[i];
  }
  void raw_input(tj::Value* v) {
    tj::Value* in = g->addInput();
    in->setType(v->type());
    map[v] = in;
  }
  // Adds the wire's leaves as tensor inputs and rebuilds the value.
  tj::Value* wire_input(const Wire& w) {
    switch (w.kind) {
      case Wire::tensor: {
        tj::Value* in = g->addInput();
        in->setType(w.type);
        return in;
      }
      case Wire::integer:
        return g->insert(c10::aten::Int, {g->addInput()});
      case Wire::floating:
        return g->insert(c10::aten::Float, {g->addInput()});
      case Wire::boolean:
        return g->insert(c10::aten::Bool, {g->addInput()});
      case Wire::list: {
        std::vector<tj::Value*> el;
        for (const auto& e : w.elems) el.push_back(wire_input(e));
        auto lt = w.type->cast<c10::ListType>();
        return g->appendNode(g->createList(lt->getElementType(), el))->output();
      }
      case Wire::tuple: {
        std::vector<tj::Value*> el;
        for (const auto& e : w.elems) el.push_back(wire_input(e));
        return g->appendNode(g->createTuple(el))->output();
      }
    }
    return nullptr;
  }
  // Appends the wire's leaves of segment value `v` to `slots`.
  void wire_output(tj::Value* v, const Wire& w, std::vector<tj::Value*>& slots) {
    switch (w.kind) {
      case Wire::tensor: slots.push_back(v); return;
      case Wire::integer:
      case Wire::floating:
      case Wire::boolean: slots.push_back(g->insert(c10::prim::NumToTensor, {v})); return;
      case Wire::list: {
        tj::Node* u = g->appendNode(g->createListUnpack(v, w.elems.size()));
        for (size_t i = 0; i < w.elems.size(); ++i) wire_output(u->outputs()[i], w.elems[i], slots);
        return;
      }
      case Wire::tuple: {
        tj::Node* u = g->appendNode(g->createTupleUnpack(v));
        for (size_t i = 0; i < w.elems.size(); ++i) wire_output(u->outputs()[i], w.elems[i], slots);
        return;
      }
    }
  }
  // A tensor crossing as its shape: one 1-D int64 input, its elements the
  // sizes of an uninitialised tensor of dtype `dt` on `dev`.
  tj::Value* shape_input(int64_t rank, c10::ScalarType dt, c10::Device dev) {
    tj::Value* in = g->addInput();
    in->setType(c10::TensorType::get());
    std::vector<tj::Value*> dims;
    for (int64_t i = 0; i < rank; ++i)
      dims.push_back(g->insert(c10::aten::Int, {g->insert(c10::aten::select, {in, int64_t{0}, i})}));
    tj::Value* sizes = g->appendNode(g->createList(c10::IntType::get(), dims))->output();
    return g->insert(c10::aten::empty, {sizes}, {tj::NamedValue("dtype", dt), tj::NamedValue("device", dev)});
  }
  void shape_output(tj::Value* v, std::vector<tj::Value*>& slots) {
    tj::Value* sizes = g->insert(c10::aten::size, {v});
    slots.push_back(g->insert(c10::aten::tensor, {sizes}, {tj::NamedValue("dtype", c10::ScalarType::Long)}));
  }
  void finish(const std::vector<tj::Value*>& outs) {
    g->registerOutput(g->appendNode(g->createTuple(outs))->output());
  }
};

// Runs a graph on a stack; the single output (a tuple) unpacked.
std::vector<c10::IValue> run_graph(tj::GraphFunction& fn, std::vector<c10::IValue> in) {
  tj::Stack st(std::move(in));
  fn.run(st);
  return st.back().toTupleRef().elements().vec();
}

struct Segment {
  std::unique_ptr<tj::GraphFunction> fn;
  std::vector<bool> written;  // inputs the segment writes in place (cloned first)
};

struct GLayer {
  std::string name, type;
  std::string path;  // module path of the calling module ("" = the top-level forward)
  std::vector<tj::Node*> nodes;
};

class GraphEngine : public SplitModel::Engine {
 public:
  std::string name;
  bool optimize = false;
  std::shared_ptr<tj::Graph> graph;              // frozen and inlined
  tj::Value* input = nullptr;                   // the tensor input
  std::vector<GLayer> layers;
  std::vector<std::vector<tj::Value*>> cross;   // per split k, in crossing order
  std::unordered_map<tj::Value*, Wire> wires;    // per crossing value
  struct ShapeOnly {
    int from;  // the first split after which only the tensor's metadata is read
    int64_t rank;
    c10::ScalarType dtype;
  };
  std::unordered_map<tj::Value*, ShapeOnly> shape_only;
  c10::Device device = c10::kCPU;
  // Whether `v`, crossing split k, crosses as its shape only.
  bool shaped(tj::Value* v, int k) const {
    auto it = shape_only.find(v);
    return it != shape_only.end() && k >= it->second.from;
  }

  Result<std::vector<at::Tensor>> run(int a, int b, std::vector<at::Tensor> in) const override {
    if (a == b) return in;
    auto seg = segment(a, b);
    if (!seg) return seg.error();
    std::vector<c10::IValue> stack;
    stack.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      stack.emplace_back((*seg)->written[i] ? in[i].clone() : std::move(in[i]));
    in.clear();
    std::vector<at::Tensor> out;
    try {
      for (auto& v : run_graph(*(*seg)->fn, std::move(stack))) out.push_back(v.toTensor());
    } catch (const std::exception& ex) {
      return make_error(Errc::internal, name + ": layers [" + std::to_string(a) + ", " +
                                            std::to_string(b) + ") failed: " + error_line(ex));
    }
    return out;
  }

  // The graph of [a, b) with crossing(a) leaves in and crossing(b) leaves out.
  std::shared_ptr<tj::Graph> segment_graph(int a, int b) const {
    Cloner c;
    for (tj::Value* v : cross[a]) {
      if (shaped(v, a)) {
        const auto& so = shape_only.at(v);
        c.map[v] = c.shape_input(so.rank, so.dtype, device);
      } else {
        c.map[v] = c.wire_input(wires.at(v));
      }
    }
    for (int i = a; i < b; ++i)
      for (tj::Node* n : layers[i].nodes) c.clone(n);
    std::vector<tj::Value*> slots;
    for (tj::Value* v : cross[b]) {
      if (shaped(v, b)) {
        c.shape_output(c.lookup(v), slots);
      } else {
        c.wire_output(c.lookup(v), wires.at(v), slots);
      }
    }
    c.finish(slots);
    if (optimize) {
      tj::OptimizeFrozenGraph(c.g, true);
      tj::FuseFrozenConvAddRelu(c.g);
      tj::ConvertFrozenOpsToMKLDNN(c.g);
      tj::FrozenLinearTranspose(c.g);
    }
    return c.g;
  }

  Result<std::shared_ptr<const Segment>> segment(int a, int b) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->first == std::make_pair(a, b)) {
        cache_.splice(cache_.begin(), cache_, it);
        return cache_.front().second;
      }
    auto seg = std::make_shared<Segment>();
    try {
      auto g = segment_graph(a, b);
      tj::AliasDb db(g);
      for (tj::Value* in : g->inputs()) seg->written.push_back(db.hasWriters(in));
      // The simple executor: the graph as built (and optimized above), no
      // profiling runs or re-optimisation on first use.
      seg->fn = std::make_unique<tj::GraphFunction>("tracr_segment", g, nullptr,
                                                    tj::ExecutorExecutionMode::SIMPLE);
    } catch (const std::exception& ex) {
      return make_error(Errc::internal, name + ": cannot build the graph of layers [" +
                                            std::to_string(a) + ", " + std::to_string(b) +
                                            "): " + error_line(ex));
    }
    cache_.emplace_front(std::make_pair(a, b), seg);
    // A sweep uses one head and one tail at a time; optimized segments hold
    // their own folded weights, so only a few are kept.
    while (cache_.size() > 8) cache_.pop_back();
    return std::shared_ptr<const Segment>(seg);
  }

 private:
  mutable std::mutex mu_;
  mutable std::list<std::pair<std::pair<int, int>, std::shared_ptr<const Segment>>> cache_;
};

// Module path and class of the innermost module a node was called from
// ("" and "" for the top-level forward).
std::pair<std::string, std::string> module_of(tj::Node* n) {
  auto cs = n->callstack();
  std::string path, type;
  if (!cs) return {path, type};
  for (const auto& e : (*cs)->vec()) {
    const auto& mi = std::get<tj::kModuleInstanceInfo>(e);
    // "SELF": a module calling one of its own methods (scripted Conv2d's
    // forward -> _conv_forward); the module path does not change.
    if (!mi || mi->instance_name() == "SELF") continue;
    path += (path.empty() ? "" : ".") + mi->instance_name();
    auto ct = mi->class_type();
    type = ct && ct->name() ? ct->name()->name() : std::string("Module");
  }
  return {path, type};
}

// A scripted `if` or loop at the top level: its own layer, named after the
// modules its blocks call ("if[layer1,layer2]"; "if" when they call none),
// since the branch taken is decided as it runs and cannot be cut inside.
bool is_control(tj::Node* n) { return n->kind() == c10::prim::If || n->kind() == c10::prim::Loop; }
std::string control_name(tj::Node* n) {
  std::vector<std::string> called;
  std::function<void(tj::Block*)> walk = [&](tj::Block* b) {
    for (tj::Node* x : b->nodes()) {
      const std::string p = module_of(x).first;
      if (!p.empty() && std::find(called.begin(), called.end(), p) == called.end()) called.push_back(p);
      for (tj::Block* sub : x->blocks()) walk(sub);
    }
  };
  for (tj::Block* b : n->blocks()) walk(b);
  std::string name = n->kind() == c10::prim::If ? "if" : "loop";
  if (called.empty()) return name;
  const size_t shown = std::min<size_t>(called.size(), 3);
  name += "[";
  for (size_t i = 0; i < shown; ++i) name += (i ? "," : "") + called[i];
  return name + (called.size() > shown ? ",...]" : "]");
}

std::string type_name(const tj::Module& m) {
  auto t = m.type();
  return t && t->name() ? t->name()->name() : std::string("Module");
}

// The top-level node of the graph block that (transitively) owns `n`.
tj::Node* top_level(tj::Node* n, tj::Block* top) {
  while (n->owningBlock() != top) n = n->owningBlock()->owningNode();
  return n;
}

bool is_matmul_like(tj::Node* n) {
  const auto k = n->kind();
  return k == c10::aten::_convolution || k == c10::aten::conv1d || k == c10::aten::conv2d ||
         k == c10::aten::conv3d || k == c10::aten::linear;
}

}  // namespace

struct GraphModelBuilder {
  static Result<std::unique_ptr<SplitModel>> build(const std::string& path, const ModelConfig& cfg);
};

Result<std::unique_ptr<SplitModel>> GraphModelBuilder::build(const std::string& path,
                                                             const ModelConfig& cfg) {
  const std::string name = "torchscript:" + path;
  if (cfg.granularity != "module" && cfg.granularity != "node")
    return make_error(Errc::invalid_argument, "granularity '" + cfg.granularity +
                                                  "': expected module or node");
  auto dev = resolve_device(cfg.device);
  if (!dev) return dev.error();
  // What LibTorch would say in its own words, said plainly (#46 item 6).
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st))
    return make_error(Errc::io, path + ": no such file (torchscript: names a TorchScript file, e.g. one written by "
                                       "scripts/export_model.py)");
  if (std::filesystem::is_directory(st))
    return make_error(Errc::io, path + ": is a directory; torchscript: names a TorchScript file (.pt)");
  tj::Module root;
  // scripts/export_model.py records the shape it traced at: the default input.
  tj::ExtraFilesMap extra{{"tracr/input_shape", ""}};
  try {
    root = tj::load(path, *dev, extra);
  } catch (const std::exception& ex) {
    const std::string why = error_line(ex);
    // torch.save's files (a state dict, a pickled model) are zip archives too, without TorchScript's code.
    if (why.find("constants.pkl") != std::string::npos || why.find("code/") != std::string::npos)
      return make_error(Errc::io, path + ": not a TorchScript module (a state dict or a model saved with "
                                         "torch.save?): trace it and save it with torch.jit.save, as "
                                         "scripts/export_model.py does (" + why + ")");
    return make_error(Errc::io, path + ": cannot load TorchScript module: " + why);
  }
  if (!root.find_method("forward"))
    return make_error(Errc::invalid_argument, path + ": the module (" + type_name(root) +
                                                  ") has no forward method");
  root.eval();

  std::unique_ptr<SplitModel> m(new SplitModel());
  m->name_ = name;
  m->device_ = *dev;
  m->state_fn_ = [root]() {
    std::vector<NamedTensor> out;
    for (const auto& p : root.named_parameters(true)) out.push_back({p.name, p.value});
    for (const auto& b : root.named_buffers(true)) out.push_back({b.name, b.value});
    return out;
  };
  const c10::Device loaded = *dev;
  m->move_fn_ = [loaded, path](c10::Device d) {
    if (d != loaded)
      throw std::runtime_error("a TorchScript graph model is placed when it is loaded (" +
                               loaded.str() + "); set the device in the experiment instead");
  };
  if (!cfg.weights.empty()) TRACR_TRY(load_weights(*m, cfg.weights));

  auto eng = std::make_shared<GraphEngine>();
  eng->name = name;
  eng->optimize = cfg.optimize;
  eng->device = *dev;
  try {
    tj::Module frozen = tj::freeze_module(root);
    eng->graph = frozen.get_method("forward").graph()->copy();
    tj::Inline(*eng->graph);
    // A scripted module keeps branches on frozen attributes (Dropout's
    // `if p < 0 or p > 1: raise`): folding them leaves the ops that run (#23).
    tj::ConstantPropagation(eng->graph);
  } catch (const std::exception& ex) {
    return make_error(Errc::invalid_argument,
                      path + ": cannot freeze the module (" + error_line(ex) + ")");
  }
  auto& g = *eng->graph;
  // Inputs: self, then the forward's arguments.
  if (g.inputs().size() != 2)
    return make_error(Errc::invalid_argument,
                      path + ": forward takes " + std::to_string(g.inputs().size() - 1) +
                          " arguments; tracr feeds it one tensor (the preprocessed input)");
  eng->input = g.inputs()[1];
  if (!eng->input->type()->cast<c10::TensorType>())
    return make_error(Errc::invalid_argument, path + ": forward takes a " +
                                                  eng->input->type()->annotation_str() +
                                                  ", expected a Tensor");
  if (g.inputs()[0]->hasUses())
    return make_error(Errc::invalid_argument,
                      path + ": the frozen module still reads attributes of self (freezing could "
                             "not fold them); export it with torch.jit.trace");
  if (g.outputs().size() != 1)
    return make_error(Errc::internal, path + ": forward has " + std::to_string(g.outputs().size()) +
                                          " outputs");

  // Model outputs: a returned tuple or list built at the top level is
  // returned as its elements; a dict (a torchvision segmentation model traced
  // with strict=False) as its values, each named by its key (#46 item 5).
  tj::Block* top = g.block();
  std::vector<tj::Value*> outputs{g.outputs()[0]};
  std::unordered_map<tj::Value*, std::string> out_key;
  tj::Node* out_pack = nullptr;
  {
    tj::Node* p = outputs[0]->node();
    const bool packs = p->kind() == c10::prim::TupleConstruct || p->kind() == c10::prim::ListConstruct ||
                       p->kind() == c10::prim::DictConstruct;
    if (packs && p->owningBlock() == top && outputs[0]->uses().size() == 1) {
      out_pack = p;
      outputs.assign(p->inputs().begin(), p->inputs().end());
    }
    if (out_pack && p->kind() == c10::prim::DictConstruct) {
      outputs.clear();
      for (size_t i = 0; i + 1 < p->inputs().size(); i += 2) {
        auto key = tj::toIValue(p->inputs()[i]);
        if (!key || !key->isString())
          return make_error(Errc::invalid_argument, path + ": forward returns a dict whose keys are not "
                                                           "constant strings");
        out_key.emplace(p->inputs()[i + 1], key->toStringRef());
        outputs.push_back(p->inputs()[i + 1]);
      }
    }
  }
  {
    std::vector<tj::Value*> uniq;
    for (tj::Value* v : outputs) {
      if (v->node()->kind() == c10::prim::Constant)
        return make_error(Errc::invalid_argument, path + ": forward returns a constant");
      if (std::find(uniq.begin(), uniq.end(), v) == uniq.end()) uniq.push_back(v);
    }
    outputs = uniq;
  }

  // Layers.
  std::map<std::string, int> seen;
  std::unordered_map<tj::Node*, int> layer_of;
  // A control node without a call stack between two nodes of one module
  // (a scripted leaf's own `if`, e.g. AdaptiveAvgPool2d's) is that module's.
  std::unordered_map<tj::Node*, std::pair<std::string, std::string>> inside;
  {
    std::vector<tj::Node*> seq;
    for (tj::Node* n : top->nodes())
      if (n->kind() != c10::prim::Constant && n != out_pack) seq.push_back(n);
    for (size_t i = 1; i + 1 < seq.size(); ++i) {
      if (!is_control(seq[i]) || !module_of(seq[i]).first.empty()) continue;
      auto before = module_of(seq[i - 1]);
      size_t j = i + 1;
      while (j + 1 < seq.size() && is_control(seq[j]) && module_of(seq[j]).first.empty()) ++j;
      if (!before.first.empty() && module_of(seq[j]).first == before.first) inside[seq[i]] = before;
    }
  }
  std::string prev_key;
  bool prev_control = false;
  for (tj::Node* n : top->nodes()) {
    if (n->kind() == c10::prim::Constant || n == out_pack) continue;
    auto [mpath, mtype] = inside.count(n) ? inside[n] : module_of(n);
    const bool control = is_control(n) && !inside.count(n);
    const bool fresh = cfg.granularity == "node" || eng->layers.empty() || mpath != prev_key || control || prev_control;
    prev_key = mpath;
    prev_control = control;
    if (fresh) {
      GLayer l;
      l.type = mpath.empty() ? type_name(root) : mtype;
      if (control) {
        l.name = (mpath.empty() ? "" : mpath + ":") + control_name(n);
      } else if (cfg.granularity == "node") {
        l.name = (mpath.empty() ? "" : mpath + ":") + kind_name(n);
        l.type = kind_name(n);
      } else {
        l.name = mpath;
      }
      eng->layers.push_back(std::move(l));
    }
    auto& l = eng->layers.back();
    l.path = mpath;
    l.nodes.push_back(n);
    layer_of[n] = static_cast<int>(eng->layers.size()) - 1;
    if (control) {
      l.type = kind_name(n);  // If | Loop
      continue;
    }
    if (cfg.granularity == "module" && mpath.empty() && n->outputs().size() == 1 &&
        n->output()->type()->cast<c10::TensorType>())
      l.name = "";  // named after its last tensor op below
    if (cfg.granularity == "module" && mpath.empty()) l.type = kind_name(n);
  }
  for (auto& l : eng->layers) {
    if (l.name.empty()) l.name = kind_name(l.nodes.back());
    const int c = ++seen[l.name];
    if (c > 1) l.name += "#" + std::to_string(c);
  }
  const int n_layers = static_cast<int>(eng->layers.size());
  if (n_layers == 0) return make_error(Errc::invalid_argument, path + ": forward has no operations");

  // Crossing values: defined in layer L (the input: -1), last used in layer U
  // (a model output: N); they cross split k when L < k <= U.
  // `real`: the last layer that reads its values, not only its metadata.
  struct Life {
    int def, last;
    size_t order;
    int real;
  };
  std::unordered_map<tj::Value*, Life> life;
  std::vector<tj::Value*> defined{eng->input};
  life[eng->input] = {-1, -1, 0, -1};
  for (int i = 0; i < n_layers; ++i)
    for (tj::Node* n : eng->layers[i].nodes)
      for (tj::Value* o : n->outputs()) {
        life[o] = {i, -1, defined.size(), i};
        defined.push_back(o);
      }
  for (tj::Value* v : defined)
    for (const auto& u : v->uses()) {
      if (u.user == out_pack || u.user->kind() == c10::prim::Return) continue;
      auto it = layer_of.find(top_level(u.user, top));
      if (it == layer_of.end()) continue;
      life[v].last = std::max(life[v].last, it->second);
      if (!metadata_use(u)) life[v].real = std::max(life[v].real, it->second);
    }
  for (tj::Value* v : outputs) {
    if (!life.count(v))
      return make_error(Errc::invalid_argument, path + ": forward returns a value it does not compute");
    life[v].last = life[v].real = n_layers;
  }
  eng->cross.assign(n_layers + 1, {});
  for (int k = 0; k < n_layers; ++k)
    for (tj::Value* v : defined)
      if (life[v].def < k && life[v].last >= k) eng->cross[k].push_back(v);
  eng->cross[n_layers] = outputs;

  // Probe: one run at batch 1 recording every crossing value (and the output
  // of every convolution and linear layer, for MACs).
  // All of it or nothing: a damaged record is not half a shape.
  std::vector<int64_t> traced_at;
  {
    std::stringstream ss(extra["tracr/input_shape"]);
    std::string d;
    while (std::getline(ss, d, ',')) {
      if (d.empty() || d.size() > 9 || d.find_first_not_of("0123456789") != std::string::npos || std::stoll(d) == 0) {
        traced_at.clear();
        break;
      }
      traced_at.push_back(std::stoll(d));
    }
  }
  std::vector<int64_t> in_shape{1};
  const std::vector<int64_t> sample = !cfg.input_shape.empty() ? cfg.input_shape
                                      : !traced_at.empty()     ? traced_at
                                                               : std::vector<int64_t>{3, 224, 224};
  const std::string traced_hint =
      traced_at.empty() ? " (set input_size to the shape the model was traced at)"
                        : " (it was traced at " + shape_str(traced_at) + ": set input_size to that)";
  in_shape.insert(in_shape.end(), sample.begin(), sample.end());
  std::vector<tj::Value*> probe_vals;
  {
    std::unordered_set<tj::Value*> in_probe;
    for (const auto& c : eng->cross)
      for (tj::Value* v : c)
        if (in_probe.insert(v).second) probe_vals.push_back(v);
    for (const auto& l : eng->layers)
      for (tj::Node* n : l.nodes)
        if (is_matmul_like(n) && in_probe.insert(n->output()).second) probe_vals.push_back(n->output());
  }
  std::unordered_map<tj::Value*, c10::IValue> seen_vals;
  {
    torch::NoGradGuard no_grad;
    const at::Tensor x = torch::zeros(in_shape, torch::TensorOptions().device(*dev));
    Cloner c;
    c.raw_input(eng->input);
    std::vector<tj::Value*> outs;
    bool ok = false;
    std::string failure;
    try {
      for (const auto& l : eng->layers)
        for (tj::Node* n : l.nodes) c.clone(n);
      for (tj::Value* v : probe_vals) outs.push_back(c.lookup(v));
      c.finish(outs);
      tj::GraphFunction fn("tracr_probe", c.g, nullptr, tj::ExecutorExecutionMode::SIMPLE);
      auto got = run_graph(fn, {x});
      for (size_t i = 0; i < probe_vals.size(); ++i) seen_vals[probe_vals[i]] = got[i];
      ok = true;
    } catch (const std::exception& ex) {
      failure = error_line(ex);
    }
    if (!ok) {
      // Find the node: run the graph node by node.
      std::unordered_map<tj::Value*, c10::IValue> env{{eng->input, x}};
      for (const auto& l : eng->layers)
        for (tj::Node* n : l.nodes) {
          Cloner one;
          std::vector<c10::IValue> args;
          std::string shapes;
          for (tj::Value* v : n->inputs()) {
            if (v->node()->kind() == c10::prim::Constant || one.map.count(v)) continue;
            one.raw_input(v);
            args.push_back(env[v]);
            const auto& a = args.back();
            shapes += (shapes.empty() ? "" : ", ") +
                      (a.isTensor() ? shape_str(a.toTensor().sizes()) : a.tagKind());
          }
          try {
            one.clone(n);
            std::vector<tj::Value*> o;
            for (tj::Value* v : n->outputs()) o.push_back(one.lookup(v));
            one.finish(o);
            tj::GraphFunction fn("tracr_probe_node", one.g, nullptr, tj::ExecutorExecutionMode::SIMPLE);
            auto got = run_graph(fn, std::move(args));
            for (size_t i = 0; i < got.size(); ++i) env[n->outputs()[i]] = got[i];
          } catch (const std::exception& ex) {
            return make_error(Errc::invalid_argument,
                              path + ": the graph cannot take input " + shape_str(in_shape) +
                                  ": node " + n->kind().toQualString() + " in layer '" + l.name +
                                  "' (" + l.type + ") fails on inputs (" + shapes +
                                  "): " + error_line(ex) + traced_hint);
          }
        }
      return make_error(Errc::invalid_argument, path + ": the graph cannot take input " +
                                                    shape_str(in_shape) + ": " + failure + traced_hint);
    }
  }

  // Wires and refusals.
  std::vector<std::string> refusal(n_layers + 1);
  std::unordered_set<tj::Value*> crossing_set;
  for (const auto& c : eng->cross) crossing_set.insert(c.begin(), c.end());
  for (auto& kv : seen_vals) {
    if (!crossing_set.count(kv.first)) continue;
    std::string why;
    auto w = wire_of(kv.second, kv.first->type(), why);
    if (w) {
      eng->wires[kv.first] = std::move(*w);
      continue;
    }
    for (int k = 0; k <= n_layers; ++k)
      if (std::count(eng->cross[k].begin(), eng->cross[k].end(), kv.first) && refusal[k].empty())
        refusal[k] = "value %" + kv.first->debugName() + " that crosses it is " + why;
  }
  eng->wires[eng->input] = Wire{Wire::tensor, eng->input->type(), {}};
  for (int k : {0, n_layers})
    if (!refusal[k].empty())
      return make_error(Errc::invalid_argument, path + ": " +
                                                    (k == 0 ? std::string("the input") : "an output") +
                                                    " cannot be sent: " + refusal[k]);
  // A tensor read after some cut only for its metadata crosses there as its
  // shape (never at split 0: the input is what the participant has).
  for (tj::Value* v : defined) {
    const Life& l = life[v];
    auto w = eng->wires.find(v);
    if (l.real >= l.last || w == eng->wires.end() || w->second.kind != Wire::tensor ||
        !seen_vals.count(v) || !seen_vals[v].isTensor())
      continue;
    const at::Tensor t = seen_vals[v].toTensor();
    // A 0-dim tensor is as small as its shape: it crosses as it is.
    if (t.dim() == 0 || t.layout() != c10::kStrided || t.is_quantized()) continue;
    eng->shape_only[v] = {std::max(l.real + 1, 1), t.dim(), t.scalar_type()};
  }
  auto probe_tensors = [&](tj::Value* v) {
    std::vector<at::Tensor> out;
    std::function<void(const c10::IValue&)> walk = [&](const c10::IValue& iv) {
      if (iv.isTensor()) out.push_back(iv.toTensor());
      if (iv.isList())
        for (const auto& e : iv.toListRef()) walk(e);
      if (iv.isTuple())
        for (const auto& e : iv.toTupleRef().elements()) walk(e);
    };
    if (seen_vals.count(v)) walk(seen_vals[v]);
    return out;
  };
  auto share_storage = [&](tj::Value* a, tj::Value* b) {
    for (const auto& x : probe_tensors(a))
      for (const auto& y : probe_tensors(b))
        if (x.is_alias_of(y)) return true;
    return false;
  };
  {
    tj::AliasDb db(eng->graph);
    for (int k = 1; k < n_layers; ++k) {
      if (!refusal[k].empty()) continue;
      const auto& c = eng->cross[k];
      for (size_t i = 0; i < c.size() && refusal[k].empty(); ++i)
        for (size_t j = i + 1; j < c.size() && refusal[k].empty(); ++j) {
          // Alias analysis is conservative about list elements (a chunk
          // into a list): the probe's tensors say whether the two really
          // share storage (a trace runs the same ops, so the same views).
          // A value crossing as its shape carries no data to share.
          if (eng->shaped(c[i], k) || eng->shaped(c[j], k)) continue;
          if (!db.mayContainAlias(c[i], c[j]) || !share_storage(c[i], c[j])) continue;
          tj::ValueSet vs{c[i], c[j]};
          for (int t = k; t < n_layers && refusal[k].empty(); ++t)
            for (tj::Node* n : eng->layers[t].nodes)
              if (db.writesToAlias(n, vs)) {
                refusal[k] = "crossing values %" + c[i]->debugName() + " and %" + c[j]->debugName() +
                             " may share memory and layer '" + eng->layers[t].name +
                             "' writes to it in place (" + n->kind().toQualString() +
                             "); sent as separate tensors they would not share it";
                break;
              }
        }
    }
  }

  // The SplitModel's view: every wire leaf is a named tensor.
  m->input_shape_ = sample;
  m->execution_ = cfg.optimize ? "graph-optimized" : "graph";
  std::unordered_map<tj::Value*, std::vector<int>> leaf_ids;
  std::unordered_map<tj::Value*, int> shape_id;  // the "NAME:shape" tensor of a shape-only crossing
  std::map<int, int> per_layer;  // crossing values named so far per defining layer
  auto fill = [&](TensorSpec& s, const at::Tensor& t) -> Status {
    auto dt = to_protocol_dtype(t.scalar_type());
    if (!dt) return make_error(dt.error().code, path + ": tensor '" + s.name + "': " + dt.error().message);
    s.dtype = *dt;
    s.shape = t.sizes().vec();
    s.bytes = t.numel() * static_cast<int64_t>(t.element_size());
    return {};
  };
  // A named crossing tensor's id (names are unique).
  auto add_spec = [&](TensorSpec s) -> Result<int> {
    const int id = static_cast<int>(m->value_specs_.size());
    if (!m->value_ids_.emplace(s.name, id).second)
      return make_error(Errc::internal, path + ": two crossing tensors named '" + s.name + "'");
    m->value_specs_.push_back(std::move(s));
    return id;
  };
  for (tj::Value* v : defined) {
    if (!eng->wires.count(v) || v->node()->kind() == c10::prim::Constant) continue;
    const int L = life[v].def;
    std::string base = "input";
    if (out_key.count(v)) {
      base = out_key[v];  // a dict output: its key
    } else if (L >= 0) {
      // A layer's first crossing value is named after the layer, later ones
      // get ":1", ":2" (layer names use "#" for repeats).
      const int c = per_layer[L]++;
      base = eng->layers[L].name + (c ? ":" + std::to_string(c) : std::string());
    }
    std::vector<const Wire*> leaves;
    eng->wires[v].leaves(leaves);
    // Leaf values, from the probe.
    std::vector<c10::IValue> flat;
    std::function<void(const c10::IValue&)> flatten = [&](const c10::IValue& iv) {
      if (iv.isList()) {
        for (const auto& e : iv.toListRef()) flatten(e);
      } else if (iv.isTuple()) {
        for (const auto& e : iv.toTupleRef().elements()) flatten(e);
      } else {
        flat.push_back(iv);
      }
    };
    flatten(seen_vals[v]);
    for (size_t i = 0; i < leaves.size(); ++i) {
      TensorSpec s;
      s.name = leaves.size() == 1 && eng->wires[v].kind != Wire::list && eng->wires[v].kind != Wire::tuple
                   ? base
                   : base + "[" + std::to_string(i) + "]";
      const c10::IValue& iv = flat[i];
      at::Tensor t = iv.isTensor() ? iv.toTensor()
                                   : (iv.isInt()      ? torch::tensor(iv.toInt())
                                      : iv.isDouble() ? torch::tensor(iv.toDouble(), torch::kFloat64)
                                                      : torch::tensor(iv.toBool()));
      TRACR_TRY(fill(s, t));
      auto id = add_spec(std::move(s));
      if (!id) return id.error();
      leaf_ids[v].push_back(*id);
    }
    if (auto so = eng->shape_only.find(v); so != eng->shape_only.end()) {
      TensorSpec s;
      s.name = base + ":shape";
      s.dtype = protocol::DType::int64;
      s.shape = {so->second.rank};
      s.bytes = 8 * so->second.rank;
      auto id = add_spec(std::move(s));
      if (!id) return id.error();
      shape_id[v] = *id;
    }
  }
  m->crossing_ids_.assign(n_layers + 1, {});
  for (int k = 0; k <= n_layers; ++k)
    for (tj::Value* v : eng->cross[k]) {
      if (eng->shaped(v, k)) {
        m->crossing_ids_[k].push_back(shape_id.at(v));
      } else {
        for (int id : leaf_ids[v]) m->crossing_ids_[k].push_back(id);
      }
    }
  for (tj::Value* v : outputs)
    for (int id : leaf_ids[v]) {
      m->output_names_.push_back(m->value_specs_[id].name);
      m->output_ids_.push_back(id);
    }
  // Parameters (not buffers such as running means) by owning module: to the
  // first layer called from that module, else from its nearest calling
  // ancestor (Swin's attention reads its qkv Linear's weight directly).
  std::vector<int64_t> layer_params(n_layers, 0);
  {
    std::map<std::string, int> first_of;
    for (int i = n_layers - 1; i >= 0; --i) first_of[eng->layers[i].path] = i;
    for (const auto& p : root.named_parameters(true)) {
      std::string owner = p.name.substr(0, p.name.rfind('.') == std::string::npos ? 0 : p.name.rfind('.'));
      while (!first_of.count(owner) && !owner.empty())
        owner = owner.substr(0, owner.rfind('.') == std::string::npos ? 0 : owner.rfind('.'));
      if (first_of.count(owner)) layer_params[first_of[owner]] += p.value.numel();
    }
  }
  for (int i = 0; i < n_layers; ++i) {
    const auto& gl = eng->layers[i];
    LayerInfo li;
    li.params = layer_params[i];
    li.index = i;
    li.name = gl.name;
    li.type = gl.type;
    std::set<std::string> ins;
    for (tj::Node* n : gl.nodes) {
      std::function<void(tj::Node*)> visit = [&](tj::Node* x) {
        for (tj::Value* v : x->inputs()) {
          if (v->node()->kind() == c10::prim::Constant) {
            continue;
          } else if (life.count(v) && life[v].def < i) {
            std::vector<int> ids = leaf_ids[v];
            if (eng->shaped(v, i)) ids = {shape_id.at(v)};
            for (int id : ids)
              if (ins.insert(m->value_specs_[id].name).second)
                li.inputs.push_back(m->value_specs_[id].name);
          }
        }
        for (tj::Block* b : x->blocks())
          for (tj::Node* y : b->nodes()) visit(y);
      };
      visit(n);
      if (is_matmul_like(n) && seen_vals.count(n->output()) && seen_vals[n->output()].isTensor()) {
        auto w = tj::toIValue(n->input(1));
        if (w && w->isTensor())
          li.macs += count_macs(n->kind() == c10::aten::linear ? "Linear" : "Conv",
                                {w->toTensor()}, seen_vals[n->output()].toTensor());
      }
    }
    // Output: the layer's last crossing tensor.
    for (auto it = gl.nodes.rbegin(); it != gl.nodes.rend() && li.output_shape.empty(); ++it)
      for (tj::Value* o : (*it)->outputs())
        if (leaf_ids.count(o)) {
          const auto& s = m->value_specs_[leaf_ids[o].back()];
          li.output_shape = s.shape;
          li.output_bytes = s.bytes;
        }
    m->layers_.push_back(std::move(li));
    m->nodes_.push_back({gl.name, gl.type, {}, nullptr, nullptr, true});
  }
  m->refusals_ = std::move(refusal);
  if (m->output_names_.size() == 1 && m->value_specs_[m->output_ids_[0]].shape.size() == 2 &&
      m->value_specs_[m->output_ids_[0]].dtype == protocol::DType::float32)
    m->task_ = ModelTask::classification;
  eng->graph->lint();
  m->engine_ = std::move(eng);
  return m;
}

Result<std::unique_ptr<SplitModel>> load_torchscript_model(const std::string& path,
                                                           const ModelConfig& cfg) {
  try {
    return GraphModelBuilder::build(path, cfg);
  } catch (const std::exception& ex) {
    return make_error(Errc::invalid_argument,
                      path + ": cannot split this TorchScript module: " + error_line(ex));
  }
}

}  // namespace tracr::experiments
