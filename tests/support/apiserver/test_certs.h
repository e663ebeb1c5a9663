// Moved to tests/support/common/test_pki.h; this name stays until its last includer
// (tests/support/cluster) includes that directly.
#pragma once

#include "tests/support/common/test_pki.h"
