// kvgpu-validator's command line (docs/configuration.md): the flags, the API client, one run or a
// run every --interval, and where the result goes.
#pragma once

namespace kvgpu::validator {

// 0: the node is validated (the last run, with --interval 0); 1: it is not; 2: bad flags or no
// API server configuration, nothing done.
int Main(int argc, char** argv);

}  // namespace kvgpu::validator
