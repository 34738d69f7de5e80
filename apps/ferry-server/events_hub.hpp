// The dashboard feed (GET /events): every subscriber gets a server-sent event with a snapshot of the
// metrics registry every `interval`, from one ticker thread. A subscriber whose connection closed or
// whose write failed is dropped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "apps/ferry-server/http_util.hpp"

namespace ferry::server {

class EventsHub {
 public:
  EventsHub(ServerContext& c, std::chrono::milliseconds interval, size_t max_subscribers = 64);
  ~EventsHub();  // stops the ticker and ends every stream

  // Starts an SSE stream on req (answers 503 when max_subscribers are connected).
  Handled subscribe(const Request& req);
  void connection_closed(uint64_t connection_id);
  void stop();

 private:
  using Stream = restinio::response_builder_t<restinio::chunked_output_t>;
  struct Subscriber {
    uint64_t connection_id;
    std::unique_ptr<Stream> stream;
    std::shared_ptr<std::atomic<bool>> failed;
  };
  std::string event() const;  // one snapshot as an SSE event
  void tick();
  void run();

  ServerContext& c_;
  const std::chrono::milliseconds interval_;
  const size_t max_subscribers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Subscriber> subs_;
  bool stopping_ = false;
  std::thread ticker_;
};

}  // namespace ferry::server
