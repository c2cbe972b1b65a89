#include "fleet/staging.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "fleet/deploy.hpp"
#include "protocol/crypto.hpp"

namespace tracr::fleet {

using namespace tracr::settings;
namespace fs = std::filesystem;

namespace {

const std::string kTorchscript = "torchscript:";

// Files hashed in this process, by path, size and modification time: several
// devices (and a run's several launches) reading the same data hash it once.
Result<std::string> cached_file_hash(const std::string& path, uint64_t* size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return make_error(Errc::not_found, fmt::format("{} does not exist", path));
  if (!S_ISREG(st.st_mode))
    return make_error(Errc::io, fmt::format("{} is not a regular file (a device, FIFO or socket): it cannot be "
                                            "hashed or staged",
                                            path));
  *size = static_cast<uint64_t>(st.st_size);
  using Key = std::tuple<std::string, uint64_t, int64_t, int64_t>;
  static std::mutex mu;
  static std::map<Key, std::string> cache;
  const Key k{path, *size, static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec)};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
  }
  auto h = sha256_file(path);
  if (!h) return h;
  std::lock_guard<std::mutex> lock(mu);
  cache[k] = *h;
  return h;
}

// The regular files ("./rel" names, sorted bytewise) and directories of a tree.
struct Tree {
  std::vector<std::string> files;
  std::vector<std::string> dirs;
};

Result<Tree> walk(const std::string& root) {
  Tree t;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, ec), end;
  if (ec) return make_error(Errc::io, fmt::format("cannot read the directory {}: {}", root, ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) return make_error(Errc::io, fmt::format("cannot read the directory {}: {}", root, ec.message()));
    const std::string rel = "./" + fs::relative(it->path(), root, ec).generic_string();
    if (rel.find('\n') != std::string::npos || rel.find('\\') != std::string::npos)
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: {} has a newline or backslash in its name; rename it to stage the directory",
                                    root, rel));
    if (it->is_symlink() && it->is_directory())
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: {} is a link to a directory; replace it by the directory to stage it", root, rel));
    if (it->is_directory()) t.dirs.push_back(rel);
    else if (it->is_regular_file()) t.files.push_back(rel);
    else
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: {} is neither a file nor a directory; only those can be staged", root, rel));
  }
  std::sort(t.files.begin(), t.files.end());
  std::sort(t.dirs.begin(), t.dirs.end());
  return t;
}

}  // namespace

std::vector<AgentFile> agent_files(const ExperimentConfig& cfg, wire::AgentRole role) {
  std::vector<AgentFile> v;
  if (cfg.model.rfind(kTorchscript, 0) == 0) v.push_back({"model", cfg.model.substr(kTorchscript.size())});
  if (!cfg.weights.empty()) v.push_back({"weights", cfg.weights});
  if (wire::drives_session(role)) {  // it reads the data
    if (cfg.dataset.kind != DatasetKind::synthetic && !cfg.dataset.path.empty())
      v.push_back({"dataset.path", cfg.dataset.path});
    if (!cfg.dataset.class_names_file.empty()) v.push_back({"dataset.class_names", cfg.dataset.class_names_file});
    for (size_t i = 0; i < cfg.exits.size(); ++i)  // the PARTICIPANT's exit heads (#44)
      v.push_back({fmt::format("exits[{}]", i), exit_head_file(cfg, i)});
  }
  return v;
}

namespace {

// The shell line that prints a tree's manifest hash on the device: what
// content_hash computes here (sha256sum's listing of the sorted files).
std::string tree_sha256_cmd(const std::string& dir) {
  return "cd " + shell_quote(dir) +
         " && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-64";
}

}  // namespace

Result<ContentHash> content_hash(const std::string& path) {
  ContentHash h;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return make_error(Errc::not_found, fmt::format("{} does not exist", path));
  if (!fs::is_directory(st)) {
    auto s = cached_file_hash(path, &h.bytes);
    if (!s) return std::move(s.error());
    h.sha256 = *s;
    h.files = 1;
    return h;
  }
  h.is_dir = true;
  auto tree = walk(path);
  if (!tree) return std::move(tree.error());
  std::string listing;  // what sha256sum prints for the sorted files
  for (const auto& rel : tree->files) {
    uint64_t size = 0;
    auto s = cached_file_hash((fs::path(path) / rel.substr(2)).string(), &size);
    if (!s) return std::move(s.error());
    listing += *s + "  " + rel + "\n";
    h.bytes += size;
    ++h.files;
  }
  const auto d = protocol::sha256(reinterpret_cast<const uint8_t*>(listing.data()), listing.size());
  h.sha256 = protocol::to_hex(d.data(), d.size());
  return h;
}

std::string human_bytes(uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < (1u << 20)) return fmt::format("{:.1f} KiB", n / 1024.0);
  if (n < (1u << 30)) return fmt::format("{:.1f} MiB", n / 1048576.0);
  return fmt::format("{:.2f} GiB", n / 1073741824.0);
}

std::string StagedFile::describe() const {
  if (how == How::declared) return fmt::format("{} {} -> {} (declared in the devices file's paths)", key, local, remote);
  const std::string what = hash.is_dir ? fmt::format("{} files, {}", hash.files, human_bytes(hash.bytes))
                                       : human_bytes(hash.bytes);
  const char* done = how == How::uploaded ? "uploaded" : how == How::present ? "already there" : "would be uploaded";
  return fmt::format("{} {} -> {} (sha256 {}, {}, {}{})", key, local, remote, hash.sha256, what, done,
                     replaced.empty() ? "" : "; " + replaced);
}

std::optional<std::string> declared_device_path(const DeviceConfig& dev, const std::string& local) {
  const fs::path l = fs::path(local).lexically_normal();
  std::optional<std::string> best;
  size_t best_len = 0;
  for (const auto& [from, to] : dev.paths) {
    const fs::path f(from);
    auto rel = l.lexically_relative(f);
    if (rel.empty() || *rel.begin() == "..") continue;
    if (from.size() < best_len) continue;  // the longest declared prefix wins
    best_len = from.size();
    best = rel == "." ? to : (fs::path(to) / rel).string();
  }
  return best;
}

namespace {

// Uploads one file to `remote` and checks its sha256 there (a copy that
// differs is removed).
Status upload_file(SshSession& s, const std::string& local, const ContentHash& h, const std::string& remote) {
  if (auto up = s.upload(local, remote, 0644); !up) return up.error();
  auto got = remote_sha256(s, remote, h.bytes);
  if (!got) return got.error();
  if (*got == h.sha256) return {};
  (void)s.run("rm -f " + shell_quote(remote));
  return make_error(Errc::io, fmt::format("{} on {} has sha256 {} after upload, expected {}", remote, s.label(),
                                          got->empty() ? "(missing)" : *got, h.sha256));
}

// Uploads a directory tree into a temporary directory beside `remote`,
// checks its manifest hash there, then renames it into place (another
// controller's copy that got there first stays).
Status upload_tree(SshSession& s, const std::string& local, const ContentHash& h, const std::string& dir,
                   const std::string& name, const std::string& remote) {
  auto tree = walk(local);
  if (!tree) return tree.error();
  uint8_t rnd[6] = {};
  TRACR_TRY(protocol::random_bytes(rnd, sizeof rnd));
  const std::string tmp = dir + "/." + name + ".tmp-" + protocol::to_hex(rnd, sizeof rnd);
  std::string dirs;
  for (const auto& d : tree->dirs) dirs += d + '\0';
  auto md = s.run(fmt::format("mkdir -p {0} && cd {0} && xargs -0 -r mkdir -p --", shell_quote(tmp)), dirs);
  if (!md) return md.error();
  if (md->exit_status != 0)
    return make_error(Errc::io, fmt::format("cannot create {} on {}: {}", tmp, s.label(), trim(md->err)));
  auto drop = [&](Error e) {
    (void)s.run("rm -rf " + shell_quote(tmp));
    return e;
  };
  for (const auto& rel : tree->files)
    if (auto up = s.upload((fs::path(local) / rel.substr(2)).string(), tmp + "/" + rel.substr(2), 0644); !up)
      return drop(up.error());
  auto got = s.run(tree_sha256_cmd(tmp), "", 600000);
  if (!got) return drop(got.error());
  if (trim(got->out) != h.sha256)
    return drop(make_error(Errc::io, fmt::format("{} on {} hashes to {} after upload, expected {}{}", tmp, s.label(),
                                                 trim(got->out), h.sha256,
                                                 got->err.empty() ? "" : " (" + trim(got->err) + ")")));
  // Another controller may have staged the same tree meanwhile: theirs stays.
  auto mv = s.run(fmt::format("mv -T {0} {1} 2>/dev/null || {{ test -d {1} && rm -rf {0}; }}", shell_quote(tmp),
                              shell_quote(remote)));
  if (!mv) return drop(mv.error());
  if (mv->exit_status != 0)
    return drop(make_error(Errc::io, fmt::format("cannot rename {} to {} on {}", tmp, remote, s.label())));
  return {};
}

// Whether the tree at sf.remote is this one. Only a complete, verified tree
// is ever renamed to that name, but its files may have been changed or
// deleted on the device since: its manifest hash is checked as a single
// file's is (#24: a tree was trusted by name). A tree that differs is
// removed to be staged again (unless check_only), and sf.replaced says so.
Result<bool> tree_present(SshSession& s, const std::string& local, const ContentHash& h, bool check_only,
                          StagedFile& sf) {
  auto t = s.run("test -d " + shell_quote(sf.remote) + " && { " + tree_sha256_cmd(sf.remote) + "; }", "", 600000);
  if (!t) return t.error();
  const std::string have = trim(t->out);
  const bool present = t->exit_status == 0 && have == h.sha256;
  if (t->exit_status != 0 || present) return present;
  const std::string was = have.empty() ? "(nothing)" : have;
  if (check_only) {
    sf.replaced = fmt::format("the copy there hashes to {}: it would be staged again", was);
    return false;
  }
  sf.replaced = fmt::format("the copy there hashed to {}: staged again", was);
  auto rm = s.run("rm -rf " + shell_quote(sf.remote));
  if (!rm) return rm.error();
  if (rm->exit_status != 0)
    return make_error(Errc::io, fmt::format("{} on {} differs from {} (sha256 {} there) and cannot be removed: {}",
                                            sf.remote, s.label(), local, have, trim(rm->err)));
  return false;
}

}  // namespace

Result<std::vector<StagedFile>> stage_files(SshSession& s, const DeviceConfig& dev, const std::vector<AgentFile>& files,
                                            bool check_only) {
  std::vector<StagedFile> out;
  if (files.empty()) return out;
  auto fail = [&](Errc code, const std::string& what) {
    return make_error(code, fmt::format("device {}: {}", dev.name, what));
  };
  auto pwd = s.run("pwd");
  if (!pwd) return fail(pwd.error().code, pwd.error().message);
  const std::string home = trim(pwd->out);
  // Absolute device paths: the agent's working directory is no promise.
  auto on_device = [&](std::string p) {
    if (p == "~") p.clear();
    else if (p.rfind("~/", 0) == 0) p = p.substr(2);
    if (p.empty() || p.front() != '/') p = home + (p.empty() ? "" : "/" + p);
    return p;
  };
  const std::string data_dir = on_device(normalize_remote_dir(dev.work_dir)) + "/data";
  for (const auto& f : files) {
    StagedFile sf;
    sf.key = f.key;
    sf.local = f.local;
    if (auto d = declared_device_path(dev, f.local)) {
      sf.remote = on_device(*d);
      sf.how = StagedFile::How::declared;
      auto t = s.run("test -e " + shell_quote(sf.remote));
      if (!t) return fail(t.error().code, t.error().message);
      if (t->exit_status != 0)
        return fail(Errc::config, fmt::format("{} {} is declared in the devices file's paths as {}, which does not "
                                              "exist on {}",
                                              f.key, f.local, sf.remote, s.label()));
      out.push_back(std::move(sf));
      continue;
    }
    auto h = content_hash(f.local);
    if (!h) return fail(h.error().code, fmt::format("{} {}: {}", f.key, f.local, h.error().message));
    sf.hash = *h;
    const std::string dir = data_dir + "/" + h->sha256.substr(0, 16);
    std::string name = fs::path(f.local).lexically_normal().filename().string();
    if (name.empty() || name == ".") name = fs::path(f.local).lexically_normal().parent_path().filename().string();
    sf.remote = dir + "/" + name;
    bool present = false;
    if (!h->is_dir) {
      auto have = remote_sha256(s, sf.remote, h->bytes);
      if (!have) return fail(have.error().code, have.error().message);
      present = *have == h->sha256;
    } else {
      auto have = tree_present(s, f.local, *h, check_only, sf);
      if (!have) return fail(have.error().code, have.error().message);
      present = *have;
    }
    if (present || check_only) {
      sf.how = present ? StagedFile::How::present : StagedFile::How::would_upload;
      out.push_back(std::move(sf));
      continue;
    }
    auto mk = s.run("mkdir -p " + shell_quote(dir));
    if (!mk) return fail(mk.error().code, mk.error().message);
    if (mk->exit_status != 0) return fail(Errc::io, fmt::format("cannot create {} on {}: {}", dir, s.label(), trim(mk->err)));
    const Status up = h->is_dir ? upload_tree(s, f.local, *h, dir, name, sf.remote) : upload_file(s, f.local, *h, sf.remote);
    if (!up) return fail(up.error().code, up.error().message);
    sf.how = StagedFile::How::uploaded;
    out.push_back(std::move(sf));
  }
  return out;
}

ExperimentConfig with_device_paths(ExperimentConfig cfg, const std::vector<StagedFile>& staged) {
  for (const auto& f : staged) {
    if (f.key == "weights") cfg.weights = f.remote;
    else if (f.key == "dataset.path") cfg.dataset.path = f.remote;
    else if (f.key == "dataset.class_names") cfg.dataset.class_names_file = f.remote;
    else if (f.key == "model") cfg.model = kTorchscript + f.remote;
    for (size_t i = 0; i < cfg.exits.size(); ++i)
      if (f.key == fmt::format("exits[{}]", i)) {
        cfg.exits[i].file = f.remote;
        if (cfg.exits[i].head != "linear") cfg.exits[i].head = kTorchscript + f.remote;
      }
  }
  return cfg;
}

}  // namespace tracr::fleet
