// Small file-system steps the kernel model builds its tree from. Private to sim/.
//
// Every attribute the model changes after layout is replaced by write-to-temp + rename, so a
// reader that opens it at any moment (through the model, a plain open(2) or the FUSE simulator)
// sees the old value or the new one, never a torn or empty one.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string_view>

#include "common/status.h"

namespace kvgpu::sim::tree {

namespace fs = std::filesystem;

// sysfs modes: most attributes are read-only, `create`/`remove` write-only.
constexpr mode_t kReadOnly = 0444;
constexpr mode_t kWriteOnly = 0200;
constexpr mode_t kReadWrite = 0644;

Status MakeDirs(const fs::path& dir);

// Writes `content` to `file` (atomically, through `scratch_dir` on the same file system) with
// `mode`. Works for a new file and for replacing an existing one.
Status PutFile(const fs::path& file, std::string_view content, mode_t mode,
               const fs::path& scratch_dir);

// A symlink at `link` pointing at `target`, stored relative to the link's directory as sysfs
// stores its links ("../../../devices/..."). Both paths must be free of symlinks.
Status Link(const fs::path& link, const fs::path& target);

// Removes a file, link or whole directory; absent is fine.
void RemoveAll(const fs::path& path);

}  // namespace kvgpu::sim::tree
