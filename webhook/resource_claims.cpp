#include "webhook/resource_claims.h"

#include "webhook/pod_fields.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

// A list that may be absent or null (omitempty), else must be a list.
Result<const json*> OptionalList(const json& value, const std::string& where) {
  if (!value.is_null() && !value.is_array()) return Status::Invalid(where + " must be a list");
  return &value;
}

// The container claim names (resources.claims[].name) of every container and init container.
Result<std::set<std::string>> ContainerClaimNames(const json& spec) {
  std::set<std::string> names;
  for (PodField list : {pod_fields::kContainers, pod_fields::kInitContainers}) {
    const json& containers = Member(spec, list);
    if (!containers.is_array()) continue;  // the decision reports a malformed list
    for (size_t i = 0; i < containers.size(); ++i) {
      const std::string where =
          "spec." + std::string(list.key) + "[" + std::to_string(i) + "].resources.claims";
      auto claims = OptionalList(
          Member(Member(containers[i], pod_fields::kResources), pod_fields::kClaims), where);
      if (!claims.ok()) return claims.status();
      if ((*claims)->is_null()) continue;
      for (const json& claim : **claims) {
        const json& name = Member(claim, pod_fields::kName);
        const json& request = Member(claim, pod_fields::kRequest);
        if (!name.is_string() || (!request.is_null() && !request.is_string()))
          return Status::Invalid(where + " entries must have a string name (and request)");
        names.insert(name.get<std::string>());
      }
    }
  }
  return names;
}

// The class of a request or subrequest, when it names a string one.
Result<std::string> ClassName(const json& request, const std::string& where) {
  const json& name = Member(request, "deviceClassName");
  if (!name.is_string()) return Status::Invalid(where + ".deviceClassName must be a string");
  return name.get<std::string>();
}

}  // namespace

Result<std::vector<PodClaimSource>> ReferencedPodClaims(const json& spec) {
  auto used = ContainerClaimNames(spec);
  if (!used.ok()) return used.status();
  std::vector<PodClaimSource> out;
  if (used->empty()) return out;
  auto claims = OptionalList(Member(spec, pod_fields::kResourceClaims), "spec.resourceClaims");
  if (!claims.ok()) return claims.status();
  if ((*claims)->is_null()) return out;
  for (size_t i = 0; i < (*claims)->size(); ++i) {
    const json& claim = (**claims)[i];
    const std::string where = "spec.resourceClaims[" + std::to_string(i) + "]";
    const json& name = Member(claim, pod_fields::kName);
    if (!name.is_string()) return Status::Invalid(where + ".name must be a string");
    if (!used->contains(name.get<std::string>())) continue;
    const json& by_name = Member(claim, pod_fields::kResourceClaimName);
    const json& by_template = Member(claim, pod_fields::kResourceClaimTemplateName);
    const bool has_name = !by_name.is_null(), has_template = !by_template.is_null();
    if (has_name == has_template || !(has_name ? by_name : by_template).is_string())
      return Status::Invalid(where +
                             " must set exactly one of resourceClaimName and "
                             "resourceClaimTemplateName, as a string");
    const std::string& object = (has_name ? by_name : by_template).get_ref<const std::string&>();
    if (object.empty()) return Status::Invalid(where + " names an empty object");
    out.push_back({name.get<std::string>(), has_template, object});
  }
  return out;
}

bool IsOurDeviceClass(std::string_view class_name, std::string_view domain) {
  if (domain.empty()) return false;
  if (class_name == domain) return true;
  return class_name.size() > domain.size() + 1 && class_name.ends_with(domain) &&
         class_name[class_name.size() - domain.size() - 1] == '.';
}

Result<std::set<std::string>> OurRequests(const json& object, bool is_template,
                                          std::string_view domain) {
  const char* what = is_template ? "ResourceClaimTemplate" : "ResourceClaim";
  const json& spec = is_template ? Member(Member(object, "spec"), "spec") : Member(object, "spec");
  if (!spec.is_object())
    return Status::Invalid(std::string(what) + " has no " + (is_template ? "spec.spec" : "spec"));
  const json& devices = Member(spec, "devices");
  if (!devices.is_object() && !devices.is_null())
    return Status::Invalid(std::string(what) + " spec.devices must be an object");
  auto requests = OptionalList(Member(devices, "requests"), "spec.devices.requests");
  if (!requests.ok()) return requests.status();
  std::set<std::string> ours;
  if ((*requests)->is_null()) return ours;
  for (size_t i = 0; i < (*requests)->size(); ++i) {
    const json& request = (**requests)[i];
    const std::string where = "spec.devices.requests[" + std::to_string(i) + "]";
    const json& name = Member(request, "name");
    if (!name.is_string()) return Status::Invalid(where + ".name must be a string");
    const std::string& request_name = name.get_ref<const std::string&>();
    const json& exactly = Member(request, "exactly");
    auto subrequests = OptionalList(Member(request, "firstAvailable"), where + ".firstAvailable");
    if (!subrequests.ok()) return subrequests.status();
    if (exactly.is_null() == (*subrequests)->is_null())
      return Status::Invalid(where + " must set exactly one of exactly and firstAvailable");
    if (!exactly.is_null()) {
      auto class_name = ClassName(exactly, where + ".exactly");
      if (!class_name.ok()) return class_name.status();
      if (IsOurDeviceClass(*class_name, domain)) ours.insert(request_name);
      continue;
    }
    for (size_t j = 0; j < (*subrequests)->size(); ++j) {
      const json& sub = (**subrequests)[j];
      const std::string sub_where = where + ".firstAvailable[" + std::to_string(j) + "]";
      const json& sub_name = Member(sub, "name");
      if (!sub_name.is_string()) return Status::Invalid(sub_where + ".name must be a string");
      auto class_name = ClassName(sub, sub_where);
      if (!class_name.ok()) return class_name.status();
      if (!IsOurDeviceClass(*class_name, domain)) continue;
      // Any alternative may be the one allocated: the request as a whole may be ours.
      ours.insert(request_name);
      ours.insert(request_name + "/" + sub_name.get<std::string>());
    }
  }
  return ours;
}

std::string OurClaimReference(const json& container, const PodClaims& claims) {
  const json& list = Member(Member(container, pod_fields::kResources), pod_fields::kClaims);
  if (!list.is_array()) return "";
  for (const json& claim : list) {
    const json& name = Member(claim, pod_fields::kName);
    if (!name.is_string()) continue;
    auto it = claims.ours.find(name.get<std::string>());
    if (it == claims.ours.end() || it->second.empty()) continue;
    const json& request = Member(claim, pod_fields::kRequest);
    if (!request.is_string() || request.get_ref<const std::string&>().empty()) return it->first;
    if (it->second.contains(request.get<std::string>()))
      return it->first + "/" + request.get<std::string>();
  }
  return "";
}

}  // namespace kvgpu::webhook
