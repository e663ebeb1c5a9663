#include "validator/cli.h"

int main(int argc, char** argv) {
  return kvgpu::validator::Main(argc, argv);
}
