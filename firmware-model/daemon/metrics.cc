#include "firmware-model/daemon/metrics.h"

#include <cstring>

#include "firmware-model/daemon/device.h"
#include "firmware-model/uapi/metaroce_abi.h"

namespace metaroce::daemon {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

bool valid_name(const std::string& n) {
  return !n.empty() && n.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") ==
                           std::string::npos;
}

// `# TYPE` once per family, then a sample per label set.
struct Families {
  std::map<std::string, std::string> samples;  // metric name -> sample lines
  void add(const std::string& metric, const std::string& labels, uint64_t v) {
    samples[metric] += metric + "{" + labels + "} " + std::to_string(v) + "\n";
  }
  std::string text(const char* type) const {
    std::string s;
    for (const auto& [name, lines] : samples) s += "# TYPE " + name + " " + type + "\n" + lines;
    return s;
  }
};

}  // namespace

std::string exposition_text(const std::string& device, const std::vector<MetricValue>& dev,
                            const std::vector<std::pair<uint32_t, std::vector<MetricValue>>>& qps,
                            const std::vector<MetricValue>& server) {
  Families counters, gauges;
  std::string d = "device=\"" + device + "\"";
  for (const MetricValue& m : dev)
    if (valid_name(m.name)) counters.add("metaroce_" + m.name + "_total", d, m.value);
  for (const auto& [qpn, list] : qps) {
    std::string l = d + ",qpn=\"" + std::to_string(qpn) + "\"";
    for (const MetricValue& m : list)
      if (valid_name(m.name)) counters.add("metaroce_qp_" + m.name + "_total", l, m.value);
  }
  for (const MetricValue& m : server) {
    if (!valid_name(m.name)) continue;
    bool gauge = m.name == "qps" || m.name == "qps_omitted";
    (gauge ? gauges : counters).add("metaroce_" + m.name + (gauge ? "" : "_total"), d, m.value);
  }
  return counters.text("counter") + gauges.text("gauge") + "# EOF\n";
}

std::vector<MetricValue> device_counters(Device& device, uint32_t qpn) {
  mroce_query_counters_req q{qpn, 0};
  Device::Request req;
  req.op = MROCE_OP_QUERY_COUNTERS;
  req.body = {reinterpret_cast<const uint8_t*>(&q), sizeof(q)};
  Device::Reply reply;
  device.handle_internal(req, &reply);
  std::vector<MetricValue> out;
  if (reply.err || reply.body.size() < sizeof(mroce_query_counters_resp)) return out;
  size_t n = (reply.body.size() - sizeof(mroce_query_counters_resp)) / sizeof(mroce_counter);
  for (size_t i = 0; i < n; i++) {
    mroce_counter c;
    std::memcpy(&c, reply.body.data() + sizeof(mroce_query_counters_resp) + i * sizeof(c),
                sizeof(c));
    c.name[sizeof(c.name) - 1] = '\0';
    out.push_back({c.name, c.value});
  }
  return out;
}

std::string render_device_metrics(Device& device, const std::string& ibdev,
                                  const MetricsServerStats& server, size_t max_qps) {
  std::vector<std::pair<uint32_t, std::vector<MetricValue>>> qps;
  std::vector<uint32_t> numbers = device.qp_numbers();
  for (uint32_t qpn : numbers) {
    if (qps.size() == max_qps) break;
    qps.emplace_back(qpn, device_counters(device, qpn));
  }
  std::vector<MetricValue> own = {
      {"metrics_scrapes", server.scrapes + 1},  // this one included
      {"metrics_refused_busy", server.refused_busy},
      {"metrics_bad_requests", server.bad_requests},
      {"metrics_timeouts", server.timeouts},
      {"qps", numbers.size()},
      {"qps_omitted", numbers.size() - qps.size()},
  };
  return exposition_text(ibdev, device_counters(device, 0xffffffffu), qps, own);
}

// ---------------- the HTTP side ----------------

struct MetricsServer::Conn {
  Conn(asio::io_context& io, tcp::socket s, size_t max)
      : socket(std::move(s)), timer(io), buf(max) {}
  tcp::socket socket;
  asio::steady_timer timer;
  asio::streambuf buf;
  std::string out;
};

MetricsServer::MetricsServer(asio::io_context& io, Render render, MetricsLimits limits)
    : io_(io), render_(std::move(render)), limits_(limits), acceptor_(io) {}

MetricsServer::~MetricsServer() {
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (auto& [p, c] : conns_) c->socket.close(ec);
}

int MetricsServer::start(const std::string& addr, uint16_t port, std::string* why) {
  boost::system::error_code ec;
  tcp::endpoint ep(asio::ip::make_address(addr, ec), port);
  if (!ec) acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(static_cast<int>(limits_.max_connections), ec);
  if (ec) {
    *why = "metrics: cannot listen on " + addr + " port " + std::to_string(port) + ": " +
           (ec == asio::error::address_in_use ? "the port is already in use" : ec.message());
    return ec.value();
  }
  accept_next();
  return 0;
}

uint16_t MetricsServer::port() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec).port();
}

void MetricsServer::accept_next() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      if (conns_.size() >= limits_.max_connections) {
        stats_.refused_busy++;
        boost::system::error_code ignored;
        s.close(ignored);
      } else {
        auto c = std::make_shared<Conn>(io_, std::move(s), limits_.max_request_bytes);
        conns_[c.get()] = c;
        serve(c);
      }
    }
    accept_next();
  });
}

void MetricsServer::serve(const std::shared_ptr<Conn>& c) {
  c->timer.expires_after(limits_.request_timeout);
  c->timer.async_wait([this, w = std::weak_ptr<Conn>(c)](const boost::system::error_code& ec) {
    auto c = w.lock();  // the deadline covers the request and the reply
    if (ec || !c) return;
    stats_.timeouts++;
    close(c.get());
  });
  asio::async_read_until(
      c->socket, c->buf, "\r\n\r\n", [this, c](const boost::system::error_code& ec, size_t) {
        if (ec == asio::error::operation_aborted || !conns_.count(c.get())) return;
        if (ec && ec != asio::error::not_found) return close(c.get());  // peer went away
        std::string head(asio::buffers_begin(c->buf.data()), asio::buffers_end(c->buf.data()));
        std::string line = head.substr(0, head.find("\r\n"));
        if (ec == asio::error::not_found) {
          stats_.bad_requests++;
          return reply(c, "431 Request Header Fields Too Large", "request too large\n");
        }
        if (line.rfind("GET ", 0) != 0) {
          stats_.bad_requests++;
          return reply(c, "405 Method Not Allowed", "only GET /metrics is served\n");
        }
        if (line != "GET /metrics HTTP/1.1" && line != "GET /metrics HTTP/1.0") {
          stats_.bad_requests++;
          return reply(c, "404 Not Found", "only GET /metrics is served\n");
        }
        std::string body = render_(stats_);
        stats_.scrapes++;
        reply(c, "200 OK", body);
      });
}

void MetricsServer::reply(const std::shared_ptr<Conn>& c, const std::string& status,
                          const std::string& body) {
  c->out = "HTTP/1.1 " + status +
           "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  asio::async_write(c->socket, asio::buffer(c->out),
                    [this, c](const boost::system::error_code&, size_t) { close(c.get()); });
}

void MetricsServer::close(Conn* c) {
  auto it = conns_.find(c);
  if (it == conns_.end()) return;
  std::shared_ptr<Conn> keep = it->second;
  conns_.erase(it);
  boost::system::error_code ec;
  keep->timer.cancel(ec);
  keep->socket.shutdown(tcp::socket::shutdown_both, ec);
  keep->socket.close(ec);
}

}  // namespace metaroce::daemon
