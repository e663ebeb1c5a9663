// The one rule for who may call a daemon's HTTPS endpoints: with a client CA configured, every
// path but the probes (/healthz, /readyz, which kubelet calls without a certificate) needs a
// client certificate that CA signed; the TLS handshake verified it, the request says whether one
// came (HttpRequest::client_certificate). The webhook and the scheduler extender both ask here.
#pragma once

#include <optional>

#include "https/http_server.h"

namespace kvgpu::https {

// The 403 to answer, or nullopt when the request may go on.
std::optional<HttpResponse> RefuseWithoutClientCertificate(const HttpRequest& request,
                                                           bool client_ca_set);

}  // namespace kvgpu::https
