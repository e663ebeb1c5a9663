#include <iostream>

#include "mdev/vgpuctl/vgpuctl.h"

int main(int argc, char** argv) {
  kvgpu::mdev::PosixSysfsIo io;
  std::vector<std::string> args(argv + 1, argv + argc);
  return kvgpu::vgpuctl::Run(args, io, std::cout, std::cerr);
}
