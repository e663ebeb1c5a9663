// How every act of the demo speaks and checks: a titled step, lines said or indented, and a
// check that ends the demo with what was expected and what was seen.
#pragma once

#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace kvgpu::demo {

// Thrown by Check; NodeDemo::Run catches it, keeps the scratch directory and exits 1.
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void Check(bool ok, const std::string& expected, const std::string& actual = "") {
  if (ok) return;
  throw CheckFailed("expected " + expected + (actual.empty() ? "" : "\n  but got: " + actual));
}

inline void Step(const std::string& title) {
  std::cout << "\n=== " << title << " ===\n";
}

inline void Say(const std::string& text) {
  std::cout << text << "\n";
}

inline void Indented(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) std::cout << "    " << line << "\n";
}

}  // namespace kvgpu::demo
