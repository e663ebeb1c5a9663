// What the DRA kubelet plugin's two files share: prepare and unprepare (dra_plugin.cpp) and the
// device-metadata files of a prepared claim (dra_plugin_metadata.cpp). Private to
// deviceplugin/dra/.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "deviceplugin/dra/claim_reader.h"
#include "kube/api_client.h"

namespace kvgpu::deviceplugin::dra {

// A claim as the logs name it: "<namespace>/<name> (<uid>)".
std::string ClaimName(const ClaimRef& ref);

// The claim as the API server has it (ReadOurDevices' GET: a missing claim is kGone).
Result<nlohmann::json> ReadClaim(kube::ApiTransport& api, const ClaimRef& ref);

}  // namespace kvgpu::deviceplugin::dra
