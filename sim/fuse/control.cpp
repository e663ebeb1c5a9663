#include "sim/fuse/control.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <optional>
#include <sstream>
#include <vector>

#include "common/ascii.h"

namespace kvgpu::sim {

namespace {

std::vector<std::string> Words(std::string_view line) {
  std::vector<std::string> words;
  std::istringstream in{std::string(line)};
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

Status Bad(const std::string& message) {
  return Status::FromErrno(EINVAL, "control: " + message);
}

// The errno names a scenario is likely to want; anything else by number.
std::optional<int> ParseErrno(const std::string& text) {
  static const std::pair<const char*, int> kNames[] = {
      {"EPERM", EPERM},   {"ENOENT", ENOENT}, {"EIO", EIO},
      {"EAGAIN", EAGAIN}, {"ENOMEM", ENOMEM}, {"EACCES", EACCES},
      {"EBUSY", EBUSY},   {"EEXIST", EEXIST}, {"ENODEV", ENODEV},
      {"EINVAL", EINVAL}, {"ENOSPC", ENOSPC}, {"EUSERS", EUSERS},
      {"EINTR", EINTR},   {"ENXIO", ENXIO},   {"ETIMEDOUT", ETIMEDOUT}};
  for (const auto& [name, value] : kNames) {
    if (text == name) return value;
  }
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value <= 0) return std::nullopt;
  return value;
}

std::optional<Op> ParseOp(const std::string& text) {
  if (text == "read") return Op::kRead;
  if (text == "write") return Op::kWrite;
  if (text == "list") return Op::kList;
  if (text == "readlink") return Op::kReadLink;
  return std::nullopt;
}

bool HasVgpu(const KernelModel& model, const std::string& id) {
  for (const auto& vgpu : model.Vgpus()) {
    if (vgpu.id == id) return true;
  }
  return false;
}

// RemoveGpu/RestoreGpu answer with typed codes; the control file answers with an errno.
Status GpuStatus(const Status& status) {
  if (status.ok()) return status;
  switch (status.code()) {
    case ErrorCode::kUnknownParent:
      return Status::FromErrno(ENOENT, "control: " + status.message());
    case ErrorCode::kGone:
    case ErrorCode::kExists:
      return Status::FromErrno(EALREADY, "control: " + status.message());
    default:
      return status.sys_errno() != 0 ? status : Status::FromErrno(EIO, status.message());
  }
}

Status ApplyLine(KernelModel& model, const std::vector<std::string>& words) {
  const std::string& command = words[0];
  if (command == "busy" || command == "release") {
    if (words.size() != 2) return Bad(command + " takes one vGPU id");
    // The model keys vGPUs by lower-case UUID, as the kernel compares them.
    std::string id = AsciiLower(words[1]);
    if (!HasVgpu(model, id)) return Status::FromErrno(ENOENT, "control: no vGPU " + words[1]);
    model.SetBusy(id, command == "busy");
    return Status::Ok();
  }
  if (command == "unplug" || command == "restore") {
    if (words.size() != 2) return Bad(command + " takes one GPU address");
    return GpuStatus(command == "unplug" ? model.RemoveGpu(words[1]) : model.RestoreGpu(words[1]));
  }
  if (command == "heterogeneous" || command == "mig") {
    if (words.size() != 3 || (words[2] != "on" && words[2] != "off")) {
      return Bad(command + " takes a GPU address and on|off");
    }
    const bool on = words[2] == "on";
    return command == "mig" ? model.SetMig(words[1], on) : model.SetHeterogeneous(words[1], on);
  }
  if (command == "gi-create" || command == "gi-destroy") {
    uint32_t number = 0;
    if (words.size() == 3) {
      const std::string& n = words[2];
      auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), number);
      if (ec != std::errc() || end != n.data() + n.size()) number = UINT32_MAX;
    }
    if (words.size() != 3 || number == UINT32_MAX) {
      return Bad(command + " takes a GPU address and a number");
    }
    if (command == "gi-destroy") return model.DestroyGpuInstance(words[1], number);
    return model.CreateGpuInstance(words[1], number).status();
  }
  if (command == "fault") {
    if (words.size() != 4 && words.size() != 5) {
      return Bad("usage: fault <read|write|list|readlink> <path-suffix> <errno> [times]");
    }
    auto op = ParseOp(words[1]);
    if (!op) return Bad("unknown operation '" + words[1] + "'");
    auto err = ParseErrno(words[3]);
    if (!err) return Bad("'" + words[3] + "' is not an errno name or positive number");
    int times = 1;
    if (words.size() == 5) {
      const std::string& t = words[4];
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), times);
      if (ec != std::errc() || end != t.data() + t.size() || times == 0 || times < -1) {
        return Bad("times must be a positive number or -1, not '" + t + "'");
      }
    }
    model.InjectFault(*op, words[2], *err, times);
    return Status::Ok();
  }
  if (command == "clear-faults") {
    if (words.size() != 1) return Bad("clear-faults takes no argument");
    model.ClearFaults();
    return Status::Ok();
  }
  return Bad("unknown command '" + command + "'");
}

}  // namespace

Status ApplyControl(KernelModel& model, std::string_view text) {
  bool any = false;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    auto words = Words(line);
    if (words.empty()) continue;
    any = true;
    if (Status s = ApplyLine(model, words); !s.ok()) return s;
  }
  if (!any) return Bad("empty command");
  return Status::Ok();
}

std::string StateText(const KernelModel& model) {
  std::string out = "profile " + model.profile().name + "\n";
  for (const GpuSpec& gpu : model.profile().gpus) {
    out += "gpu " + gpu.address + (model.GpuPresent(gpu.address) ? " present\n" : " unplugged\n");
  }
  for (const auto& vgpu : model.Vgpus()) {
    out += "vgpu " + vgpu.id + " " + vgpu.parent + " " + vgpu.type +
           (vgpu.busy ? " busy\n" : " idle\n");
  }
  return out;
}

}  // namespace kvgpu::sim
