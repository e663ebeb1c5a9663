// The CEL device selectors the allocator model can evaluate: exactly the forms the project's
// DeviceClasses use (deploy/components/dra/device-classes.yaml), a conjunction (&&) of
//   device.driver == "<string>"
//   device.attributes["<domain>"].<name> == "<string>"
// Anything else is refused at parse time with the text it could not read, never guessed.
//
// Semantics follow KEP-4381 (kubernetes/enhancements keps/sig-node/4381-dra-structured-parameters,
// "CEL"), as k8s.io/dynamic-resource-allocation/cel builds the device variable: an attribute whose
// name has no domain prefix belongs to the driver's domain; a missing attribute, or one that is not
// a string, is an evaluation error (CEL's "no such key" / "no such overload"); `&&` is CEL's
// commutative and: any false term makes it false even when another term errs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgpu::testing::dra {

class CelSelector {
 public:
  static Result<CelSelector> Parse(std::string_view expression);

  // `device` is a ResourceSlice device (its "attributes" map: name -> {"string": ...} etc.).
  Result<bool> Matches(const std::string& driver, const nlohmann::json& device) const;

  const std::string& expression() const { return expression_; }

 private:
  struct Term {
    std::string domain;  // empty: device.driver
    std::string name;
    std::string value;
  };
  std::string expression_;
  std::vector<Term> terms_;
};

}  // namespace kvgpu::testing::dra
