#include "apps/ferry-server/events_hub.hpp"

#include <chrono>

#include "apps/ferry-server/api_response.hpp"

namespace ferry::server {

EventsHub::EventsHub(ServerContext& c, std::chrono::milliseconds interval, size_t max_subscribers)
    : c_(c), interval_(interval), max_subscribers_(max_subscribers) {
  ticker_ = std::thread([this] { run(); });
}

EventsHub::~EventsHub() { stop(); }

std::string EventsHub::event() const {
  const double t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  refresh_engine_metrics(c_);
  nlohmann::json j = {{"t", t}, {"model", c_.model_name}, {"metrics", c_.registry.snapshot()},
                      {"plan", plan_json(c_.plan)}};
  return sse_event(j);
}

Handled EventsHub::subscribe(const Request& req) {
  std::lock_guard lock(mu_);
  if (stopping_ || subs_.size() >= max_subscribers_)
    return reply_error(c_, req, ApiError(503, "too many dashboard subscribers (at most " +
                                                  std::to_string(max_subscribers_) + ")", "", "too_many_subscribers",
                                         "server_error"));
  count_response(c_, 200);
  Subscriber s{req->connection_id(), std::make_unique<Stream>(req->create_response<restinio::chunked_output_t>()),
               std::make_shared<std::atomic<bool>>(false)};
  add_sse_headers(*s.stream);
  s.stream->append_chunk(event());  // a first snapshot at once, so the page fills before the first tick
  s.stream->flush();
  subs_.push_back(std::move(s));
  return restinio::request_accepted();
}

void EventsHub::connection_closed(uint64_t connection_id) {
  std::lock_guard lock(mu_);
  std::erase_if(subs_, [&](const Subscriber& s) { return s.connection_id == connection_id; });
}

void EventsHub::tick() {
  std::lock_guard lock(mu_);
  std::erase_if(subs_, [](const Subscriber& s) { return s.failed->load(); });
  if (subs_.empty()) return;
  const std::string ev = event();
  for (auto& s : subs_) {
    s.stream->append_chunk(ev);
    s.stream->flush([failed = s.failed](const asio::error_code& ec) {
      if (ec) *failed = true;
    });
  }
}

void EventsHub::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, interval_, [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    tick();
    lock.lock();
  }
}

void EventsHub::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& s : subs_) s.stream->done();
    subs_.clear();
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace ferry::server
