// Kubernetes quantities as the allocator model reads them from ResourceSlices: the whole-number
// forms only (a plain integer, a binary suffix Ki..Ei, a decimal suffix k..E), as int64. The
// forms are k8s.io/apimachinery pkg/api/resource/quantity.go's; fractions, milli units and
// exponents are refused, since counters in this project's slices never need them.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace kvgpu::testing::dra {

Result<int64_t> ParseQuantity(std::string_view text);

}  // namespace kvgpu::testing::dra
