// metaroced's metrics endpoint (--metrics ADDR:PORT, docs/operations.md
// §Metrics): device and per-QP counters in the Prometheus text exposition
// format at http://ADDR:PORT/metrics, served from the daemon's own loop.
//
// The names are the control protocol's counter names (QUERY_COUNTERS), so
// `metaroce-ctl stat`, `metaroce-ctl -j stat` and the metrics share one
// list: metaroce_<name>_total{device=...} and
// metaroce_qp_<name>_total{device=...,qpn=...}.
//
// Every client is hostile: connections are bounded (extra ones are closed
// at once), a request is at most 4 KiB, and request and reply must be
// done within 5 s (a client that does not read is cut off); only
// `GET /metrics` is served, one request per connection. Each refusal is
// counted and exported.
#pragma once

#include <utility>  // before Asio: Boost 1.74 + GCC 12

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace metaroce::daemon {

class Device;

struct MetricValue {
  std::string name;  // [a-z0-9_]+, as in QUERY_COUNTERS
  uint64_t value = 0;
};

struct MetricsServerStats {
  uint64_t scrapes = 0;            // 200 replies
  uint64_t refused_busy = 0;       // connections over the limit, closed unread
  uint64_t bad_requests = 0;       // malformed, too large, not GET, not /metrics
  uint64_t timeouts = 0;           // request or reply not done in time
};

struct MetricsLimits {
  size_t max_connections = 16;
  size_t max_request_bytes = 4096;
  std::chrono::milliseconds request_timeout{5000};
  size_t max_qps = 1024;  // QPs exported per scrape; the rest are counted as omitted
};

// The exposition text: one `# TYPE` line per metric, then its samples,
// then `# EOF`. Names that are not [a-z0-9_]+ are left out. Pure.
std::string exposition_text(const std::string& device, const std::vector<MetricValue>& dev,
                            const std::vector<std::pair<uint32_t, std::vector<MetricValue>>>& qps,
                            const std::vector<MetricValue>& server);

// Device counters (qpn 0xffffffff) or one QP's, through the device's
// QUERY_COUNTERS handler: the same reply metaroce-ctl reads.
std::vector<MetricValue> device_counters(Device& device, uint32_t qpn);

class MetricsServer {
 public:
  using Render = std::function<std::string(const MetricsServerStats&)>;
  MetricsServer(boost::asio::io_context& io, Render render, MetricsLimits limits = {});
  ~MetricsServer();
  // Binds and listens; 0 or an errno with *why ("port 9464 on 127.0.0.1 is
  // already in use").
  int start(const std::string& addr, uint16_t port, std::string* why);
  uint16_t port() const;
  const MetricsServerStats& stats() const { return stats_; }

 private:
  struct Conn;
  void accept_next();
  void serve(const std::shared_ptr<Conn>& c);
  void reply(const std::shared_ptr<Conn>& c, const std::string& status, const std::string& body);
  void close(Conn* c);

  boost::asio::io_context& io_;
  Render render_;
  MetricsLimits limits_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::map<Conn*, std::shared_ptr<Conn>> conns_;
  MetricsServerStats stats_;
};

// Renders the whole page for `device`: its counters, each QP's (at most
// limits.max_qps), the server's own counters.
std::string render_device_metrics(Device& device, const std::string& ibdev,
                                  const MetricsServerStats& server, size_t max_qps);

}  // namespace metaroce::daemon
