// A JSON string literal written straight into a text being built, for the answers the webhook and
// the extender write without a JSON document (a JSON Patch, the extender's filter and priority
// answers). One writer, so that both answer valid JSON whatever a peer's name holds.
#pragma once

#include <string>
#include <string_view>

namespace kvgpu {

// Appends `text` to `out` as a JSON string (RFC 8259): quote and backslash escaped, control
// characters as \n, \t, ... or \u00XX, valid UTF-8 copied as it is. A byte that does not start a
// valid UTF-8 sequence (RFC 3629: shortest form, no surrogates, at most U+10FFFF) becomes one
// U+FFFD each, as \ufffd: the answer stays JSON that any parser reads, instead of carrying the
// bytes and being refused whole.
void AppendJsonString(std::string& out, std::string_view text);

}  // namespace kvgpu
