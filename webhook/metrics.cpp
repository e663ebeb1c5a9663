#include "webhook/metrics.h"

#include <prometheus/text_serializer.h>

#include <sstream>

namespace kvgpu::webhook {

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("kvgpu_webhook_requests_total")
                   .Help("AdmissionReview requests by outcome")
                   .Register(*registry_);
  for (size_t i = 0; i < by_review_outcome_.size(); ++i)
    by_review_outcome_[i] =
        &requests_->Add({{"outcome", ReviewOutcomeName(static_cast<ReviewOutcome>(i))}});
  pods_ = &prometheus::BuildCounter()
               .Name("kvgpu_webhook_pod_decisions_total")
               .Help("Pod CREATE decisions by reason")
               .Register(*registry_);
  for (size_t i = 0; i < by_pod_outcome_.size(); ++i)
    by_pod_outcome_[i] = &pods_->Add({{"decision", PodOutcomeName(static_cast<PodOutcome>(i))}});
  mutations_ = &prometheus::BuildCounter()
                    .Name("kvgpu_webhook_mutations_total")
                    .Help("Pods patched with the vGPU setup")
                    .Register(*registry_)
                    .Add({});
  denials_ = &prometheus::BuildCounter()
                  .Name("kvgpu_webhook_denials_total")
                  .Help("Pods refused (vGPU requested outside Kata)")
                  .Register(*registry_)
                  .Add({});
  reloads_ = &prometheus::BuildCounter()
                  .Name("kvgpu_webhook_reloads_total")
                  .Help("Reloads of the TLS certificate or the config, by result")
                  .Register(*registry_);
  auto& lookups = prometheus::BuildCounter()
                      .Name("kvgpu_webhook_claim_lookups_total")
                      .Help("DRA claim lookups: answered from the cache, fetched, failed")
                      .Register(*registry_);
  claim_lookups_ = {&lookups.Add({{"result", "hit"}}), &lookups.Add({{"result", "fetched"}}),
                    &lookups.Add({{"result", "failed"}})};
  certificate_expiry_ = &prometheus::BuildGauge()
                             .Name("kvgpu_webhook_certificate_expiry_timestamp_seconds")
                             .Help("notAfter of the TLS certificate being served, Unix seconds")
                             .Register(*registry_)
                             .Add({});
  latency_ =
      &prometheus::BuildHistogram()
           .Name("kvgpu_webhook_request_duration_seconds")
           .Help("Time to answer one AdmissionReview, body received to reply built")
           .Register(*registry_)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                            0.0025, 0.005, 0.01, 0.025, 0.1});
}

void Metrics::Observe(const ReviewReply& reply, double seconds) {
  by_review_outcome_[static_cast<size_t>(reply.outcome)]->Increment();
  if (reply.outcome != ReviewOutcome::kBadRequest)
    by_pod_outcome_[static_cast<size_t>(reply.pod_outcome)]->Increment();
  if (reply.outcome == ReviewOutcome::kMutated) mutations_->Increment();
  if (reply.outcome == ReviewOutcome::kDenied) denials_->Increment();
  latency_->Observe(seconds);
}

void Metrics::Reload(const char* what, bool ok) {
  reloads_->Add({{"what", what}, {"result", ok ? "ok" : "error"}}).Increment();
}

void Metrics::ClaimLookups(uint64_t hits, uint64_t gets, uint64_t failures) {
  claim_lookups_[0]->Increment(static_cast<double>(hits));
  claim_lookups_[1]->Increment(static_cast<double>(gets - failures));
  claim_lookups_[2]->Increment(static_cast<double>(failures));
}

void Metrics::CertificateExpiry(int64_t unix_seconds) {
  certificate_expiry_->Set(static_cast<double>(unix_seconds));
}

std::string Metrics::Text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace kvgpu::webhook
