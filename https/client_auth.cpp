#include "https/client_auth.h"

namespace kvgpu::https {

std::optional<HttpResponse> RefuseWithoutClientCertificate(const HttpRequest& request,
                                                           bool client_ca_set) {
  const bool probe = request.path == "/healthz" || request.path == "/readyz";
  if (!client_ca_set || request.client_certificate || probe) return std::nullopt;
  return HttpResponse{403, "text/plain; charset=utf-8",
                      "a client certificate signed by the --client-ca-file CA is required (only "
                      "/healthz and /readyz answer without one)\n"};
}

}  // namespace kvgpu::https
