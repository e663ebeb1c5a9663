// The ListAndWatch streams of a device plugin server (list_and_watch.h): the gRPC reactor of one
// kubelet stream, which writes one list at a time and keeps the newest one offered meanwhile, and
// the server's set of open streams that every change is offered to.
#include "deviceplugin/kubelet/list_and_watch.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>

namespace kvgpu::deviceplugin {
namespace {

namespace api = ::v1beta1;

WireList ToWire(const std::vector<Device>& devices) {
  WireList out;
  out.reserve(devices.size());
  for (const Device& d : devices) out.push_back({d.id, d.healthy, d.numa_node});
  return out;
}

api::ListAndWatchResponse ToList(const WireList& devices) {
  api::ListAndWatchResponse response;
  for (const WireDevice& device : devices) {
    api::Device* out = response.add_devices();
    out->set_id(device.id);
    out->set_health(device.healthy ? kHealthy : kUnhealthy);
    // No topology is kubelet's "no NUMA affinity"; a node makes the Topology Manager's hint.
    if (device.numa_node) out->mutable_topology()->add_nodes()->set_id(*device.numa_node);
  }
  return response;
}

}  // namespace

using Clock = std::chrono::steady_clock;

// One kubelet ListAndWatch stream. gRPC holds it (self_) until OnDone; the server's Streams only
// watch it, so a stream that ended on its own is never touched by a later change.
// gRPC may run a reaction (OnWriteDone, OnDone) inline in whichever thread starts an operation,
// so no lock is held while StartWrite or Finish is called; and Finish is only called with no
// write in flight, which is what makes the calls made after unlocking safe: OnDone (and the
// reactor's end) cannot come before them.
class ListAndWatchStream final : public grpc::ServerWriteReactor<api::ListAndWatchResponse> {
 public:
  using Observers = std::shared_ptr<const PluginObservers>;
  ListAndWatchStream(std::string resource, Observers observers)
      : resource_(std::move(resource)), observers_(std::move(observers)) {}

  static std::shared_ptr<ListAndWatchStream> Open(std::string resource, Observers observers) {
    auto stream = std::make_shared<ListAndWatchStream>(std::move(resource), std::move(observers));
    {
      // Also publishes the constructed stream to the threads gRPC runs its reactions on, in a
      // way TSan sees (gRPC's own hand-off is in uninstrumented code): every reaction locks first.
      std::lock_guard lock(stream->mutex_);
      stream->self_ = stream;
    }
    spdlog::info("listandwatch opened resource={}", stream->resource_);
    return stream;
  }

  // Writes `devices` unless kubelet has them already; offered during a write, they go out after it.
  void Offer(WireList devices, Clock::time_point noticed) {
    {
      std::lock_guard lock(mutex_);
      const uint64_t offer = ++offered_;
      if (ending_) return;
      if (writing_) {
        if (!next_) next_noticed_ = noticed;  // the oldest change not yet written
        next_ = std::move(devices);
        next_offer_ = offer;
        return;
      }
      if (!PrepareLocked(std::move(devices), noticed, offer)) {
        written_ = offer;  // nothing in flight: kubelet has this list
        return;
      }
    }
    StartWrite(&message_);
  }

  // Waits until every list offered before the call is written (gRPC took it for the transport),
  // the stream ended, or `deadline` passed; false on the deadline.
  bool WaitWritten(Clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    const uint64_t wanted = offered_;
    return written_cv_.wait_until(lock, deadline, [&] { return written_ >= wanted || ending_; });
  }

  // Ends the stream with OK: the plugin stops serving (ours), or kubelet cancelled it.
  void End(bool ours = true) {
    {
      std::lock_guard lock(mutex_);
      ended_by_us_ = ended_by_us_ || ours;
      ending_ = true;
    }
    written_cv_.notify_all();  // nothing more is written: no one waits for it
    {
      std::lock_guard lock(mutex_);
      if (writing_ || finished_) return;  // a write in flight finishes it when done
      finished_ = true;
    }
    Finish(grpc::Status::OK);
  }

 private:
  // Makes `devices` the message of the next write; false when kubelet already has them.
  bool PrepareLocked(WireList devices, Clock::time_point noticed, uint64_t offer) {
    if (sent_ && *sent_ == devices) return false;
    message_ = ToList(devices);
    sent_ = std::move(devices);
    writing_ = true;
    writing_noticed_ = noticed;
    writing_offer_ = offer;
    return true;
  }

  void OnWriteDone(bool ok) override {
    std::optional<std::chrono::nanoseconds> push;
    size_t count = 0;
    bool write = false;
    bool finish = false;
    uint64_t written = 0;  // the newest offer kubelet now has
    {
      std::lock_guard lock(mutex_);
      writing_ = false;
      if (ok) {
        count = sent_->size();
        if (written_once_) push = Clock::now() - writing_noticed_;
        written_once_ = true;
        written = writing_offer_;
      } else {
        ending_ = true;  // kubelet went away; the stream cannot carry anything more
      }
      if (ending_) {
        finish = !finished_;
        finished_ = true;
      } else if (next_) {
        WireList devices = std::move(*next_);
        next_.reset();
        write = PrepareLocked(std::move(devices), next_noticed_, next_offer_);
        if (!write) written = next_offer_;  // the list just written is the one offered since
      }
    }
    // The first list is the stream's opening, not a push of a change.
    if (push && observers_->on_push) observers_->on_push(resource_, *push);
    if (ok) spdlog::debug("listandwatch pushed resource={} devices={}", resource_, count);
    {
      // Only now, after the observers: a waiter (an Allocate about to answer) returns after
      // everything this write set off.
      std::lock_guard lock(mutex_);
      written_ = std::max(written_, written);
    }
    written_cv_.notify_all();
    if (write) StartWrite(&message_);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnCancel() override { End(/*ours=*/false); }

  void OnDone() override {
    std::shared_ptr<ListAndWatchStream> self;  // released last: it may be the final owner
    bool kubelet_left = false;
    {
      std::lock_guard lock(mutex_);
      self = std::move(self_);
      kubelet_left = !ended_by_us_;
    }
    spdlog::info("listandwatch closed resource={}{}", resource_,
                 kubelet_left ? " (by kubelet)" : "");
    if (kubelet_left && observers_->on_kubelet_left) observers_->on_kubelet_left(resource_);
  }

  const std::string resource_;
  const Observers observers_;
  std::mutex mutex_;  // guards the members below
  std::shared_ptr<ListAndWatchStream> self_;
  api::ListAndWatchResponse message_;  // of the write in flight; left alone until it is done
  std::optional<WireList> sent_;
  std::optional<WireList> next_;
  Clock::time_point writing_noticed_;
  Clock::time_point next_noticed_;
  // Offers are numbered; written_ is the newest one kubelet has (written, or equal to what was).
  uint64_t offered_ = 0;
  uint64_t writing_offer_ = 0;
  uint64_t next_offer_ = 0;
  uint64_t written_ = 0;
  std::condition_variable written_cv_;
  bool writing_ = false;
  bool written_once_ = false;
  bool ending_ = false;
  bool ended_by_us_ = false;  // End() from our side: the server stops, kubelet did not leave
  bool finished_ = false;
};

grpc::ServerWriteReactor<api::ListAndWatchResponse>* ListAndWatchStreams::Open() {
  std::lock_guard lock(mutex_);
  std::shared_ptr<ListAndWatchStream> stream = ListAndWatchStream::Open(resource_, observers_);
  if (ended_) {
    stream->End();
  } else {
    Prune();
    open_.push_back(stream);
    stream->Offer(Current(), Clock::now());
  }
  return stream.get();
}

void ListAndWatchStreams::Notify() {
  Clock::time_point noticed = Clock::now();
  std::lock_guard lock(mutex_);
  Prune();
  if (open_.empty()) return;
  WireList devices = Current();
  for (const auto& weak : open_) {
    if (auto stream = weak.lock()) stream->Offer(devices, noticed);
  }
}

bool ListAndWatchStreams::WaitWritten(Clock::time_point deadline) {
  std::vector<std::shared_ptr<ListAndWatchStream>> streams;
  {
    std::lock_guard lock(mutex_);
    for (const auto& weak : open_) {
      if (auto stream = weak.lock()) streams.push_back(std::move(stream));
    }
  }
  bool all = true;
  for (const auto& stream : streams) all = stream->WaitWritten(deadline) && all;
  return all;
}

void ListAndWatchStreams::EndAll() {
  std::lock_guard lock(mutex_);
  ended_ = true;
  for (const auto& weak : open_) {
    if (auto stream = weak.lock()) stream->End();
  }
  open_.clear();
}

void ListAndWatchStreams::Prune() {
  std::erase_if(open_, [](const auto& weak) { return weak.expired(); });
}

WireList ListAndWatchStreams::Current() const {
  return withheld_->load() ? WireList{} : ToWire(manager_.Devices(resource_));
}

}  // namespace kvgpu::deviceplugin
