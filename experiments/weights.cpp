#include "experiments/weights.hpp"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <map>
#include <memory>

namespace tracr::experiments {
namespace {

// ---------------------------------------------------------------------------
// A pickle reader for what torch.save writes for a state dict in the zip
// format: protocol 2 opcodes, collections.OrderedDict, tensors rebuilt by
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter from storages named by
// persistent ids ('storage', torch.<T>Storage, key, location, numel). LibTorch's
// own unpickler turns an OrderedDict into None, hence this reader.
// ---------------------------------------------------------------------------

struct PVal;
using PPtr = std::shared_ptr<PVal>;

struct PVal {
  enum Kind { none, boolean, integer, real, str, tuple, list, dict, global, tensor, mark } kind = none;
  int64_t i = 0;
  double f = 0;
  std::string s;  // str, or "module.name" of a global
  std::vector<PPtr> items;
  std::vector<std::pair<PPtr, PPtr>> entries;
  at::Tensor t;
};

PPtr make(PVal::Kind k) {
  auto p = std::make_shared<PVal>();
  p->kind = k;
  return p;
}

struct StorageType {
  const char* name;
  c10::ScalarType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.FloatStorage", c10::kFloat},   {"torch.DoubleStorage", c10::kDouble},
    {"torch.HalfStorage", c10::kHalf},     {"torch.BFloat16Storage", c10::kBFloat16},
    {"torch.LongStorage", c10::kLong},     {"torch.IntStorage", c10::kInt},
    {"torch.ShortStorage", c10::kShort},   {"torch.CharStorage", c10::kChar},
    {"torch.ByteStorage", c10::kByte},     {"torch.BoolStorage", c10::kBool},
};

class PickleReader {
 public:
  PickleReader(const std::string& path, caffe2::serialize::PyTorchStreamReader& zip,
               const uint8_t* p, size_t n)
      : path_(path), zip_(zip), p_(p), end_(p + n) {}

  Result<PPtr> read() {
    try {
      return run();
    } catch (const std::exception& ex) {
      return make_error(Errc::invalid_argument, path_ + ": " + torch_error_text(ex));
    }
  }

 private:
  [[noreturn]] void fail(const std::string& m) { throw std::runtime_error(m); }
  const uint8_t* need(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) fail("pickle truncated");
    const uint8_t* r = p_;
    p_ += n;
    return r;
  }
  uint64_t le(size_t n) {
    const uint8_t* b = need(n);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(b[k]) << (8 * k);
    return v;
  }
  std::string line() {
    const uint8_t* s = p_;
    while (p_ < end_ && *p_ != '\n') ++p_;
    if (p_ == end_) fail("pickle truncated in GLOBAL");
    std::string r(reinterpret_cast<const char*>(s), p_ - s);
    ++p_;
    return r;
  }
  PPtr pop() {
    if (stack_.empty()) fail("pickle stack underflow");
    PPtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<PPtr> pop_to_mark() {
    if (marks_.empty()) fail("pickle MARK missing");
    size_t m = marks_.back();
    marks_.pop_back();
    if (m > stack_.size()) fail("pickle MARK beyond stack");
    std::vector<PPtr> r(stack_.begin() + m, stack_.end());
    stack_.resize(m);
    return r;
  }
  void put(uint64_t idx) {
    if (stack_.empty()) fail("pickle PUT on empty stack");
    memo_[idx] = stack_.back();
  }
  void get(uint64_t idx) {
    auto it = memo_.find(idx);
    if (it == memo_.end()) fail("pickle GET of unknown memo " + std::to_string(idx));
    stack_.push_back(it->second);
  }
  PPtr tuple_of(std::vector<PPtr> v) {
    auto t = make(PVal::tuple);
    t->items = std::move(v);
    return t;
  }
  static int64_t as_int(const PPtr& v, const char* what) {
    if (v->kind != PVal::integer && v->kind != PVal::boolean)
      throw std::runtime_error(std::string("expected an integer for ") + what);
    return v->i;
  }
  static std::vector<int64_t> as_ints(const PPtr& v, const char* what) {
    if (v->kind != PVal::tuple && v->kind != PVal::list)
      throw std::runtime_error(std::string("expected a tuple for ") + what);
    std::vector<int64_t> r;
    for (const auto& x : v->items) r.push_back(as_int(x, what));
    return r;
  }

  PPtr storage(const PPtr& pid) {
    if (pid->kind != PVal::tuple || pid->items.size() < 5 || pid->items[0]->s != "storage")
      fail("unsupported persistent id (expected ('storage', type, key, location, numel))");
    const std::string& type = pid->items[1]->s;
    const std::string& key = pid->items[2]->s;
    const int64_t numel = as_int(pid->items[4], "storage numel");
    c10::ScalarType dtype = c10::kFloat;
    bool known = false;
    for (const auto& st : kStorageTypes)
      if (type == st.name) dtype = st.dtype, known = true;
    if (!known) fail("unsupported storage type " + type);
    auto it = storages_.find(key);
    if (it == storages_.end()) {
      const std::string rec = "data/" + key;
      if (!zip_.hasRecord(rec)) fail("archive has no record " + rec);
      auto [ptr, size] = zip_.getRecord(rec);
      const int64_t expect = numel * static_cast<int64_t>(c10::elementSize(dtype));
      if (static_cast<int64_t>(size) < expect)
        fail("record " + rec + " holds " + std::to_string(size) + " bytes, expected " +
             std::to_string(expect));
      auto holder = std::make_shared<at::DataPtr>(std::move(ptr));
      at::Tensor flat = torch::from_blob(
          holder->get(), {numel}, [holder](void*) mutable { holder.reset(); },
          torch::TensorOptions().dtype(dtype));
      it = storages_.emplace(key, flat).first;
    }
    auto v = make(PVal::tensor);
    v->t = it->second;
    return v;
  }

  PPtr reduce(const PPtr& fn, const PPtr& args) {
    if (fn->kind != PVal::global) fail("REDUCE on a non-global");
    const std::string& g = fn->s;
    const auto& a = args->items;
    if (g == "collections.OrderedDict") return make(PVal::dict);
    if (g == "torch._utils._rebuild_tensor_v2" || g == "torch._utils._rebuild_tensor") {
      if (a.size() < 4 || a[0]->kind != PVal::tensor) fail("malformed " + g + " arguments");
      const int64_t offset = as_int(a[1], "storage offset");
      auto size = as_ints(a[2], "tensor size");
      auto stride = as_ints(a[3], "tensor stride");
      auto v = make(PVal::tensor);
      v->t = a[0]->t.as_strided(size, stride, offset);
      return v;
    }
    // torch::pickle_save (C++, e.g. tracrctl train's export) tags a dict
    // with its type ("Dict[str, Tensor]"): the dict itself is what counts.
    if (g == "torch.jit._pickle.restore_type_tag") {
      if (a.empty()) fail("malformed restore_type_tag");
      return a[0];
    }
    if (g == "torch._utils._rebuild_parameter") {
      if (a.empty() || a[0]->kind != PVal::tensor) fail("malformed _rebuild_parameter");
      return a[0];
    }
    fail("unsupported global " + g + " (only state dicts of tensors are read directly)");
  }

  PPtr run() {
    while (true) {
      const uint8_t op = *need(1);
      switch (op) {
        case 0x80: need(1); break;  // PROTO
        case '.': return pop();     // STOP
        case '(': marks_.push_back(stack_.size()); break;
        case 'N': stack_.push_back(make(PVal::none)); break;
        case 0x88: case 0x89: {
          auto v = make(PVal::boolean);
          v->i = op == 0x88;
          stack_.push_back(v);
          break;
        }
        case 'J': { auto v = make(PVal::integer); v->i = static_cast<int32_t>(le(4)); stack_.push_back(v); break; }
        case 'K': { auto v = make(PVal::integer); v->i = static_cast<int64_t>(le(1)); stack_.push_back(v); break; }
        case 'M': { auto v = make(PVal::integer); v->i = static_cast<int64_t>(le(2)); stack_.push_back(v); break; }
        case 0x8a: {  // LONG1
          const size_t n = le(1);
          if (n > 8) fail("LONG1 wider than 64 bits");
          uint64_t raw = le(n);
          int64_t v = static_cast<int64_t>(raw);
          if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) v -= static_cast<int64_t>(1ULL << (8 * n));
          auto p = make(PVal::integer);
          p->i = v;
          stack_.push_back(p);
          break;
        }
        case 'G': {
          uint64_t b = 0;
          const uint8_t* d = need(8);
          for (int k = 0; k < 8; ++k) b = (b << 8) | d[k];
          auto v = make(PVal::real);
          std::memcpy(&v->f, &b, 8);
          stack_.push_back(v);
          break;
        }
        case 'X': case 'T': case 'U': case 0x8c: {
          const size_t n = (op == 'U' || op == 0x8c) ? le(1) : le(4);
          const uint8_t* d = need(n);
          auto v = make(PVal::str);
          v->s.assign(reinterpret_cast<const char*>(d), n);
          stack_.push_back(v);
          break;
        }
        case ')': stack_.push_back(make(PVal::tuple)); break;
        case 't': stack_.push_back(tuple_of(pop_to_mark())); break;
        case 0x85: case 0x86: case 0x87: {
          const size_t n = op - 0x84;
          if (stack_.size() < n) fail("pickle stack underflow in TUPLE");
          std::vector<PPtr> v(stack_.end() - n, stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.push_back(tuple_of(std::move(v)));
          break;
        }
        case ']': stack_.push_back(make(PVal::list)); break;
        case '}': stack_.push_back(make(PVal::dict)); break;
        case 'a': { auto v = pop(); if (stack_.empty() || stack_.back()->kind != PVal::list) fail("APPEND to non-list"); stack_.back()->items.push_back(v); break; }
        case 'e': {
          auto v = pop_to_mark();
          if (stack_.empty() || stack_.back()->kind != PVal::list) fail("APPENDS to non-list");
          for (auto& x : v) stack_.back()->items.push_back(x);
          break;
        }
        case 's': {
          auto v = pop();
          auto k = pop();
          if (stack_.empty() || stack_.back()->kind != PVal::dict) fail("SETITEM on non-dict");
          stack_.back()->entries.emplace_back(k, v);
          break;
        }
        case 'u': {
          auto v = pop_to_mark();
          if (v.size() % 2) fail("SETITEMS with odd item count");
          if (stack_.empty() || stack_.back()->kind != PVal::dict) fail("SETITEMS on non-dict");
          for (size_t k = 0; k < v.size(); k += 2) stack_.back()->entries.emplace_back(v[k], v[k + 1]);
          break;
        }
        case 'q': put(le(1)); break;
        case 'r': put(le(4)); break;
        case 'h': get(le(1)); break;
        case 'j': get(le(4)); break;
        case '0': pop(); break;
        case '1': pop_to_mark(); break;
        case '2': if (stack_.empty()) fail("DUP on empty stack"); stack_.push_back(stack_.back()); break;
        case 'c': {
          auto v = make(PVal::global);
          std::string mod = line();
          v->s = mod + "." + line();
          stack_.push_back(v);
          break;
        }
        case 'R': {
          auto args = pop();
          auto fn = pop();
          stack_.push_back(reduce(fn, args));
          break;
        }
        case 'b': pop(); break;  // BUILD: the OrderedDict's _metadata is not needed
        case 'Q': stack_.push_back(storage(pop())); break;
        default: {
          char buf[8];
          std::snprintf(buf, sizeof buf, "0x%02x", op);
          fail(std::string("unsupported pickle opcode ") + buf);
        }
      }
    }
  }

  std::string path_;
  caffe2::serialize::PyTorchStreamReader& zip_;
  const uint8_t* p_;
  const uint8_t* end_;
  std::vector<PPtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PPtr> memo_;
  std::map<std::string, at::Tensor> storages_;
};

const char* kExportHint =
    "; convert it with: /usr/bin/python3 scripts/export_torchvision.py <in.pth> <out.pt>";

Result<std::vector<NamedTensor>> tensors_of(const std::string& path, const PPtr& root) {
  PPtr dict = root;
  if (root->kind == PVal::dict) {
    // Training checkpoints: {"state_dict": {...}} or {"model": {...}}.
    for (const auto& [k, v] : root->entries)
      if (k->kind == PVal::str && (k->s == "state_dict" || k->s == "model") && v->kind == PVal::dict)
        dict = v;
  }
  if (dict->kind != PVal::dict)
    return make_error(Errc::invalid_argument,
                      path + ": top-level object is not a dict of tensors" + kExportHint);
  std::vector<NamedTensor> out;
  for (const auto& [k, v] : dict->entries) {
    if (k->kind != PVal::str)
      return make_error(Errc::invalid_argument, path + ": state dict has a non-string key");
    if (v->kind != PVal::tensor)
      return make_error(Errc::invalid_argument,
                        path + ": state dict entry '" + k->s + "' is not a tensor" + kExportHint);
    out.push_back({k->s, v->t});
  }
  return out;
}

}  // namespace

Result<std::vector<NamedTensor>> read_state_dict(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(Errc::io, path + ": cannot open state dict file");
  char magic[4] = {};
  f.read(magic, 4);
  if (f.gcount() != 4 || std::memcmp(magic, "PK\x03\x04", 4) != 0)
    return make_error(Errc::invalid_argument,
                      path + ": not a PyTorch zip archive (legacy pre-1.6 .pth format?)" +
                          kExportHint);
  f.close();
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  at::DataPtr pkl;
  size_t pkl_size = 0;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    if (!zip->hasRecord("data.pkl"))
      return make_error(Errc::invalid_argument,
                        path + ": zip archive has no data.pkl record (a TorchScript module? "
                               "use torchscript:<path>)");
    std::tie(pkl, pkl_size) = zip->getRecord("data.pkl");
  } catch (const std::exception& ex) {
    std::string w = torch_error_text(ex);
    return make_error(Errc::io, path + ": cannot read archive: " + w.substr(0, w.find('\n')));
  }
  PickleReader reader(path, *zip, static_cast<const uint8_t*>(pkl.get()), pkl_size);
  auto root = reader.read();
  if (!root) {
    auto e = root.error();
    e.message += kExportHint;
    return e;
  }
  return tensors_of(path, *root);
}

Status load_weights(SplitModel& model, const std::string& path) {
  auto sd = read_state_dict(path);
  if (!sd) return sd.error();
  auto st = model.load_state_dict(*sd);
  if (!st) return make_error(st.error().code, path + ": " + st.error().message);
  return {};
}

}  // namespace tracr::experiments
