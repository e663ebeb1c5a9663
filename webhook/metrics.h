// Prometheus metrics of the webhook. The registry is served on --metrics-addr (plain HTTP) and
// on GET /metrics of the TLS port.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <memory>
#include <string>

#include "webhook/admission.h"

namespace kvgpu::webhook {

class Metrics {
 public:
  Metrics();
  void Observe(const ReviewReply& reply, double seconds);
  void Reload(const char* what, bool ok);
  // The notAfter of the certificate being served, set at start and on every reload.
  void CertificateExpiry(int64_t unix_seconds);
  // One review's DRA claim lookups: answered from the cache, fetched, failed.
  void ClaimLookups(uint64_t hits, uint64_t gets, uint64_t failures);
  std::string Text() const;  // Prometheus text exposition format
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* pods_;
  prometheus::Family<prometheus::Counter>* reloads_;
  std::array<prometheus::Counter*, 3> claim_lookups_{};  // hit, fetched, failed
  std::array<prometheus::Counter*, 4> by_review_outcome_{};
  std::array<prometheus::Counter*, 6> by_pod_outcome_{};
  prometheus::Counter* mutations_;
  prometheus::Counter* denials_;
  prometheus::Histogram* latency_;
  prometheus::Gauge* certificate_expiry_;
};

}  // namespace kvgpu::webhook
