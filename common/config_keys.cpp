#include "common/config_keys.h"

namespace kvgpu {

std::string UnknownKeyMessage(const std::vector<std::string>& present,
                              const std::set<std::string>& known, const std::string& where) {
  for (const std::string& key : present) {
    if (known.contains(key)) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    return "unknown key '" + key + "' in " + where + " (known here: " + list + ")";
  }
  return {};
}

}  // namespace kvgpu
