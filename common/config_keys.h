// The unknown-key rule both daemons' configs follow: a key the schema does not name is refused,
// not ignored, so a typo never falls back to a default silently. One message for both.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace kvgpu {

// "unknown key 'x' in <where> (known here: a, b, c)" for the first of `present` that `known`
// lacks; empty when all are known.
std::string UnknownKeyMessage(const std::vector<std::string>& present,
                              const std::set<std::string>& known, const std::string& where);

}  // namespace kvgpu
