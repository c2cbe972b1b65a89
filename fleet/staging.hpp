// The experiment's files on the devices that read them. The controller checks
// weights, dataset.path (a file or an image-folder tree), dataset.class_names
// (a file) and a torchscript: model file on its own disk; an agent reached
// over SSH gets each one it reads either at a path the devices file declares
// for that device (`paths:`, the data already lives there) or staged by
// content hash, as the agent binary is: <work_dir>/data/<first 16 hex of the
// sha256>/<name>, uploaded only when not already there, and the experiment
// sent to that agent names the device path.
//
// A directory's hash is the sha256 of its `sha256sum` listing: one line
// "<sha256 of the file>  ./<relative path>\n" per regular file, sorted by
// path bytewise (what `find . -type f | LC_ALL=C sort | xargs sha256sum`
// prints on the device). A directory is uploaded file by file over SFTP
// (streamed) into a temporary directory, hashed on the device, and renamed
// into place: a staged directory that exists is complete.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wire/agent_role.hpp"
#include "fleet/ssh.hpp"
#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::fleet {

// A file or directory tree an agent reads, named by the experiment.
struct AgentFile {
  std::string key;    // experiment key: weights, dataset.path, dataset.class_names, model
  std::string local;  // absolute path on the controller
};

// The files an agent in `role` reads from cfg (paths made absolute, as
// agent_experiment does): every role builds the model (model file, weights);
// PARTICIPANT and TRAIN_OWNER also read the data set and its class names.
std::vector<AgentFile> agent_files(const settings::ExperimentConfig& cfg, wire::AgentRole role);

struct ContentHash {
  std::string sha256;  // hex; a directory's as described above
  uint64_t bytes = 0;  // total size of the file(s)
  uint64_t files = 0;  // 1 for a file
  bool is_dir = false;
};
// Hashes a file or a directory tree, reading each file in chunks.
// Errors: not_found, io, invalid_argument (a directory holding something that
// is neither a file nor a directory, or a name with a newline or backslash).
Result<ContentHash> content_hash(const std::string& path);

struct StagedFile {
  enum class How { declared, present, uploaded, would_upload };
  std::string key;     // experiment key
  std::string local;   // controller path
  std::string remote;  // path on the device, as the agent is given it
  ContentHash hash;    // of the controller's copy (empty sha256 for a declared path)
  How how = How::present;
  // Set when the copy on the device under this hash's name differed (a
  // tree whose files were changed or deleted there) and was staged again.
  std::string replaced;
  std::string describe() const;  // one line for events and `devices check`
};

// The device path declared for `local` in dev.paths (exact, or beneath a
// declared directory); nullopt when none is declared.
std::optional<std::string> declared_device_path(const settings::DeviceConfig& dev, const std::string& local);

// Makes each file available on the device: a declared path must exist there
// (error config naming the device, the controller path and the device path);
// otherwise the content-hashed copy under <work_dir>/data is used when present,
// else uploaded and verified by hash. With check_only nothing is uploaded or
// created: missing copies come back as would_upload (devices check).
// Errors name the device and the file; plus the session's transport errors.
Result<std::vector<StagedFile>> stage_files(SshSession& session, const settings::DeviceConfig& dev,
                                            const std::vector<AgentFile>& files, bool check_only = false);

// cfg with every staged file's key pointing at its device path.
settings::ExperimentConfig with_device_paths(settings::ExperimentConfig cfg, const std::vector<StagedFile>& staged);

// "12.3 MB" style size.
std::string human_bytes(uint64_t n);

}  // namespace tracr::fleet
