#include "demo/pod_view.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "fakes/common/child_process.h"

namespace kvgpu::demo {

namespace {

bool NeedsQuotes(const std::string& text) {
  if (text.empty() || text.front() == ' ' || text.back() == ' ') return true;
  static const char* const kWords[] = {"true", "false", "yes",  "no",    "on",   "off",
                                       "null", "~",     "True", "False", "Yes",  "No",
                                       "On",   "Off",   "Null", "NULL",  "TRUE", "FALSE"};
  for (const char* word : kWords) {
    if (text == word) return true;
  }
  if (text.find_first_not_of("0123456789.+-eE") == std::string::npos) return true;
  if (std::string("-?:,[]{}#&*!|>'\"%@`").find(text.front()) != std::string::npos) return true;
  return text.find(": ") != std::string::npos || text.find(" #") != std::string::npos ||
         text.find('\n') != std::string::npos || text.back() == ':';
}

std::string Scalar(const nlohmann::json& value) {
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    return NeedsQuotes(text) ? value.dump() : text;  // a JSON string is a valid YAML scalar
  }
  return value.dump();
}

bool IsEmptyCollection(const nlohmann::json& value) {
  return (value.is_object() || value.is_array()) && value.empty();
}

void Emit(const nlohmann::json& value, int indent, std::ostringstream& out);

// `prefix` is what precedes the value on its line ("key:" or "-"); nested collections go below.
void EmitEntry(const std::string& prefix, const nlohmann::json& value, int indent,
               std::ostringstream& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (IsEmptyCollection(value)) {
    out << pad << prefix << ' ' << (value.is_object() ? "{}" : "[]") << '\n';
  } else if (value.is_object() || value.is_array()) {
    out << pad << prefix << '\n';
    // List items under a key sit at the key's indentation, as kubectl prints them.
    Emit(value, value.is_array() && prefix != "-" ? indent : indent + 2, out);
  } else {
    out << pad << prefix << ' ' << Scalar(value) << '\n';
  }
}

void Emit(const nlohmann::json& value, int indent, std::ostringstream& out) {
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      EmitEntry(Scalar(nlohmann::json(key)) + ":", item, indent, out);
    }
  } else if (value.is_array()) {
    const std::string pad(static_cast<size_t>(indent), ' ');
    for (const auto& item : value) {
      if (item.is_object() && !item.empty()) {
        // The first key shares the dash's line.
        std::ostringstream nested;
        Emit(item, indent + 2, nested);
        std::string text = nested.str();
        text.replace(0, static_cast<size_t>(indent) + 2, pad + "- ");
        out << text;
      } else {
        EmitEntry("-", item, indent, out);
      }
    }
  } else {
    out << std::string(static_cast<size_t>(indent), ' ') << Scalar(value) << '\n';
  }
}

}  // namespace

std::string ToYaml(const nlohmann::json& value) {
  std::ostringstream out;
  Emit(value, 0, out);
  return out.str();
}

std::string UnifiedDiff(const std::string& before, const std::string& after,
                        const std::string& label_before, const std::string& label_after,
                        const std::filesystem::path& scratch) {
  const auto before_file = scratch / "before.yaml";
  const auto after_file = scratch / "after.yaml";
  const auto output = scratch / "diff.out";
  std::ofstream(before_file) << before;
  std::ofstream(after_file) << after;
  std::filesystem::remove(output);
  testing::ChildProcess diff({"/usr/bin/diff", "-u", "--label", label_before, "--label",
                              label_after, before_file.string(), after_file.string()},
                             output);
  if (!diff.Start()) throw std::runtime_error(diff.error());
  const auto code = diff.Wait(std::chrono::seconds(10));
  // diff: 0 equal, 1 different, 2 trouble.
  if (!code || *code > 1) throw std::runtime_error("diff failed: " + diff.Log());
  return diff.Log();
}

}  // namespace kvgpu::demo
