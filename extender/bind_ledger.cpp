#include "extender/bind_ledger.h"

#include <nlohmann/json.hpp>

namespace kvgpu::extender {

using nlohmann::json;

namespace {

Status Invalid(const std::string& what) {
  return Status::Error(ErrorCode::kInvalid, "bind ledger " + what);
}

Result<LedgerEntry> ParseEntry(const json& item, size_t index) {
  const std::string at = "binds[" + std::to_string(index) + "]";
  if (!item.is_object()) return Invalid(at + ": not an object");
  LedgerEntry entry;
  for (auto [name, value] : {std::pair{"uid", &entry.uid}, std::pair{"pod", &entry.key}}) {
    auto it = item.find(name);
    if (it == item.end() || !it->is_string() || it->get<std::string>().empty()) {
      return Invalid(at + "." + name + ": missing");
    }
    *value = it->get<std::string>();
  }
  auto when = item.find("atUnixMs");
  if (when == item.end() || !when->is_number_integer()) return Invalid(at + ".atUnixMs: missing");
  entry.at_unix_ms = when->get<int64_t>();
  auto demand = item.find("demand");
  if (demand == item.end() || !demand->is_array()) return Invalid(at + ".demand: missing");
  for (const json& container : *demand) {
    if (!container.is_object()) return Invalid(at + ".demand: not a list of objects");
    scheduling::Demand counts;
    for (const auto& [resource, n] : container.items()) {
      if (!n.is_number_unsigned() || n.get<uint64_t>() > UINT32_MAX) {
        return Invalid(at + ".demand." + resource + ": not a count");
      }
      counts[resource] = n.get<uint32_t>();
    }
    entry.demand.push_back(std::move(counts));
  }
  return entry;
}

}  // namespace

std::string RenderBindLedger(const std::vector<LedgerEntry>& entries) {
  json binds = json::array();
  for (const LedgerEntry& entry : entries) {
    json demand = json::array();
    for (const scheduling::Demand& container : entry.demand) demand.push_back(container);
    binds.push_back({{"uid", entry.uid},
                     {"pod", entry.key},
                     {"atUnixMs", entry.at_unix_ms},
                     {"demand", std::move(demand)}});
  }
  return json{{"version", kBindLedgerVersion}, {"binds", std::move(binds)}}.dump();
}

Result<std::vector<LedgerEntry>> ParseBindLedger(const std::string& text) {
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return Invalid("is not a JSON object");
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() ||
      version->get<int64_t>() != kBindLedgerVersion) {
    return Invalid("version: not " + std::to_string(kBindLedgerVersion));
  }
  auto binds = doc.find("binds");
  if (binds == doc.end() || !binds->is_array()) return Invalid("binds: missing");
  std::vector<LedgerEntry> entries;
  for (size_t i = 0; i < binds->size(); ++i) {
    Result<LedgerEntry> entry = ParseEntry((*binds)[i], i);
    if (!entry.ok()) return entry.status();
    entries.push_back(std::move(*entry));
  }
  return entries;
}

std::vector<LedgerEntry> LiveEntries(const std::vector<LedgerEntry>& entries,
                                     const scheduling::NodeVgpuState* state, int64_t now_unix_ms,
                                     std::chrono::milliseconds keep_for) {
  std::vector<LedgerEntry> live;
  for (const LedgerEntry& entry : entries) {
    if (now_unix_ms - entry.at_unix_ms > keep_for.count()) continue;
    if (state != nullptr && state->holders.contains(entry.key)) continue;
    live.push_back(entry);
  }
  return live;
}

}  // namespace kvgpu::extender
