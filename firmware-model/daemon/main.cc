// metaroced: the MetaRoCE soft NIC. One process per host (or network
// namespace) per device: owns an Ethernet interface, hosts the transport
// engine on it, publishes it as RDMA device metaroceN, and serves clients
// on <run-dir>/<ibdev>.sock. docs/daemon.md.
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <utility>

#include <boost/asio.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "firmware-model/daemon/control_server.h"
#include "firmware-model/daemon/daemon_loop.h"
#include "firmware-model/daemon/device.h"
#include "firmware-model/daemon/log.h"
#include "firmware-model/daemon/metrics.h"
#include "firmware-model/daemon/net/netlink_monitor.h"
#include "firmware-model/daemon/options.h"
#include "firmware-model/daemon/service.h"
#include "firmware-model/engine/congestion.h"
#include "firmware-model/hw/device_model.h"
#include "firmware-model/hw/model_backend.h"
#include "firmware-model/hw/probe.h"
#include "kmod-shim/sysfs/sysfs_publisher.h"

namespace metaroce::daemon {
namespace {

int mkdirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); i++) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      cur = path.substr(0, i);
      if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return errno;
    }
  }
  return 0;
}

// Link facts for the device and the sysfs tree, kept current from netlink.
// Thread-safe: with --backend hw --hw-device model the device model's
// thread resolves neighbours while the loop processes netlink. One lock
// covers the monitor and the neighbour cache; netlink callbacks run under
// it and only record, and the device is told (refresh) after it is
// released: telling a hw device is an admin command the model's thread
// must be free to answer.
class HostLink : public LinkInterface, public net::NetlinkMonitorVisitor {
 public:
  HostLink(const Options& o, kmod_shim::SysfsPublisher& publisher)
      : options_(o), publisher_(publisher) {}

  bool open(std::string* why) {
    monitor_ = net::NetlinkMonitor::open(options_.netdev, this, why);
    return monitor_ != nullptr;
  }
  void attach(Device* device) { device_ = device; }
  net::NetlinkMonitor& monitor() { return *monitor_; }

  bool resolve(const proto::IpAddr& ip, proto::MacAddr* mac) override {
    std::lock_guard g(mu_);
    auto it = neighbours_.find(ip.bytes);
    if (it != neighbours_.end()) {
      *mac = it->second;
      return true;
    }
    if (monitor_->resolve(ip, mac) != net::Resolve::kResolved) return false;
    neighbours_[ip.bytes] = *mac;
    return true;
  }
  proto::MacAddr local_mac() const override {
    std::lock_guard g(mu_);
    return monitor_->link().mac;
  }
  // Netlink input (the loop's), then what it changed to the device.
  void process() {
    {
      std::lock_guard g(mu_);
      monitor_->process();
    }
    if (pending_) {
      bool state = pending_state_;
      pending_ = pending_state_ = false;
      refresh(state);
    }
  }
  std::string neighbour_counters() const {
    std::lock_guard g(mu_);
    return net::format_counters(monitor_->neighbour_counters());
  }

  void on_link(const net::LinkState& now, const net::LinkState& old) override {
    neighbours_.clear();
    defer_refresh(now.oper_up != old.oper_up);
  }
  void on_address(const net::IfAddress& a, bool added) override { defer_refresh(false); }
  void on_neighbour(const proto::IpAddr& ip, const proto::MacAddr& mac, bool valid) override {
    if (valid) {
      neighbours_[ip.bytes] = mac;
    } else {
      neighbours_.erase(ip.bytes);
    }
  }
  void on_link_removed() override {
    log_line(LogLevel::kWarn, "interface " + options_.netdev + " went away: port down");
    gone_ = true;
    defer_refresh(true);
  }
  void defer_refresh(bool state_changed) {
    pending_ = true;
    pending_state_ = pending_state_ || state_changed;
  }

  fw::PortInfo port_info() const {
    std::lock_guard g(mu_);
    fw::PortInfo p;
    net::LinkState l = monitor_->link();
    p.gids = monitor_->gid_table();
    if (p.gids.size() > kGidTableLen) p.gids.resize(kGidTableLen);
    p.link_mtu = l.mtu ? l.mtu : 1500;
    p.active = l.oper_up && !gone_;
    return p;
  }

  kmod_shim::DeviceInfo device_info(uint64_t guid) const {
    kmod_shim::DeviceInfo d;
    d.ibdev = options_.ibdev;
    d.node_guid = d.sys_image_guid = guid;
    fw::PortInfo p = port_info();
    d.port_active = p.active;
    d.netdev = options_.netdev;
    for (const auto& g : p.gids) {
      kmod_shim::GidEntry e;
      e.gid = g.bytes;
      e.ndev = options_.netdev;
      d.gids.push_back(e);
    }
    return d;
  }

  // Addresses, MTU or state changed: tell the engine, the tree, the clients.
  void refresh(bool state_changed) {
    if (!device_) return;
    fw::PortInfo p = port_info();
    device_->set_port(p);
    std::string why;
    if (!publisher_.publish(device_info(guid_), &why))
      log_line(LogLevel::kError, "sysfs update failed: " + why);
    if (state_changed) {
      log_line(p.active ? LogLevel::kInfo : LogLevel::kWarn,
               std::string("port ") + (p.active ? "ACTIVE" : "DOWN"));
      device_->port_event(p.active);
    }
  }
  void set_guid(uint64_t g) { guid_ = g; }

  static constexpr size_t kGidTableLen = 16;

 private:
  const Options& options_;
  kmod_shim::SysfsPublisher& publisher_;
  std::unique_ptr<net::NetlinkMonitor> monitor_;
  Device* device_ = nullptr;
  mutable std::recursive_mutex mu_;  // monitor_, neighbours_, gone_
  std::map<std::array<uint8_t, 16>, proto::MacAddr> neighbours_;
  uint64_t guid_ = 0;
  bool gone_ = false;
  bool pending_ = false, pending_state_ = false;  // a refresh recorded under mu_
};

// --cpu: the whole daemon (the loop is its only busy thread) on one CPU.
// With --spin on a machine without a core to spare, the spinning NIC takes
// a core the applications need: said at start.
bool pin_to_cpu(int cpu, bool spin, std::string* why) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    *why = "--cpu " + std::to_string(cpu) + ": sched_setaffinity: " + std::strerror(errno) +
           " (the CPU is not online or not in this process's cpuset)";
    return false;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (spin && cpus <= 2)
    log_line(LogLevel::kWarn, "--spin on " + std::to_string(cpus) +
                                  " CPUs: the spinning NIC takes CPU " + std::to_string(cpu) +
                                  " from the applications (docs/daemon.md §Placement)");
  return true;
}

std::string counters_text(const Device& device) {
  std::string out = "counters:";
  Device::Reply reply;
  Device::Request req;
  mroce_query_counters_req q{0xffffffffu, 0};
  req.op = MROCE_OP_QUERY_COUNTERS;
  req.body = {reinterpret_cast<const uint8_t*>(&q), sizeof(q)};
  const_cast<Device&>(device).handle_internal(req, &reply);
  size_t n = (reply.body.size() - sizeof(mroce_query_counters_resp)) / sizeof(mroce_counter);
  for (size_t i = 0; i < n; i++) {
    mroce_counter c;
    std::memcpy(&c, reply.body.data() + sizeof(mroce_query_counters_resp) + i * sizeof(c),
                sizeof(c));
    if (c.value) out += std::string(" ") + c.name + "=" + std::to_string(c.value);
  }
  return out;
}

int run(const Options& o) {
  if (o.backend == "hw" && o.hw_device == "pci") {
    std::string why;
    if (hw::probe(o.netdev, &why) != 0) {
      log_line(LogLevel::kError, why);
      return 1;
    }
  }
  if (!fw::make_congestion_control(o.cc, {})) {
    log_line(LogLevel::kError, "unknown congestion control '" + o.cc + "' (known: default)");
    return 2;
  }
  int err = mkdirs(o.run_dir);
  if (err) {
    log_line(LogLevel::kError,
             "cannot create run directory " + o.run_dir + ": " + std::strerror(err));
    return 1;
  }

  std::string claim_why;
  int claim = claim_interface(o.netdev, &claim_why);
  if (claim < 0) {
    log_line(LogLevel::kError, claim_why);
    return 1;
  }

  kmod_shim::PublisherOptions po;
  po.sysfs_root = o.sysfs_root;
  po.uverbs_index = static_cast<uint32_t>(o.uverbs_index);
  po.gid_table_len = HostLink::kGidTableLen;
  kmod_shim::SysfsPublisher publisher(po);

  HostLink link(o, publisher);
  std::string why;
  if (!link.open(&why)) {
    log_line(LogLevel::kError, "cannot watch " + o.netdev + ": " + why);
    return 1;
  }

  io::IoOptions io_opts;
  io_opts.ifname = o.netdev;
  io_opts.backend = o.io;
  io_opts.xdp_mode = o.xdp_mode;
  io_opts.gso = o.gso;
  io_opts.log = log_sink();
  std::unique_ptr<io::PacketIo> pio = io::open_packet_io(io_opts, &why);
  if (!pio) {
    log_line(LogLevel::kError, "cannot open packet I/O on " + o.netdev + ": " + why);
    return 1;
  }
  log_line(LogLevel::kInfo, "packet I/O: " + std::string(pio->name()) + " on " + o.netdev);

  int doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (doorbell < 0) {
    log_line(LogLevel::kError, std::string("eventfd: ") + std::strerror(errno));
    return 1;
  }

  DeviceConfig cfg;
  cfg.ibdev = o.ibdev;
  proto::MacAddr mac = link.local_mac();
  cfg.node_guid = kmod_shim::guid_from_mac(mac);
  cfg.engine.port = link.port_info();
  cfg.engine.num_paths = o.paths;
  cfg.engine.path_train = o.path_train ? o.path_train : o.gso ? 16 : 1;
  cfg.engine.congestion = o.cc;
  cfg.engine.base_rtt = static_cast<fw::Time>(o.base_rtt_us) * 1000;
  cfg.engine.link_bps = static_cast<uint64_t>(o.link_gbps) * 1'000'000'000;
  cfg.engine.violate = o.violate;
  if (o.violate)
    log_line(LogLevel::kWarn, "--violate: " + std::to_string(std::popcount(o.violate)) +
                                  " protocol rule(s) broken on purpose (" +
                                  fw::violation_names(o.violate) +
                                  "): this device is NOT conformant; for tests only");
  cfg.limits.max_qp = o.max_qp_per_client;
  cfg.user_limits.max_qp = o.uid_max_qp;
  cfg.user_limits.max_srq = o.uid_max_srq;
  cfg.user_limits.max_cq = o.uid_max_cq;
  cfg.user_limits.max_pd = o.uid_max_pd;
  cfg.user_limits.max_mr = o.uid_max_mr;
  cfg.limits.max_mw = o.max_mw_per_client;  // mw2
  cfg.user_limits.max_mw = o.uid_max_mw;
  cfg.user_limits.max_connections = o.uid_max_connections;
  cfg.user_limits.max_ring_bytes = uint64_t{o.uid_max_ring_mb} << 20;
  cfg.cm_limits.max_ids_per_client = o.max_cm_ids_per_client;
  cfg.cm_limits.max_ids_per_user = o.uid_max_cm_ids;
  cfg.ifindex = static_cast<uint32_t>(link.monitor().link().ifindex);
  cfg.gid_tbl_len = HostLink::kGidTableLen;
  // The one place the transport is chosen: the soft NIC on this packet
  // I/O, or the hw driver over a device model that owns the packet I/O.
  // The model outlives the device (declared first): the driver quiesces
  // it before freeing the memory it DMAs.
  std::unique_ptr<hw::DeviceModel> model;
  std::string hw_error;
  BackendFactory backend = soft_nic_backend(pio.get(), &link);
  if (o.backend == "hw") {
    hw::DeviceModelOptions mo;
    mo.io = pio.get();
    mo.link = &link;
    mo.rt_priority = o.rt_priority;
    model = std::make_unique<hw::DeviceModel>(cfg.engine, mo);
    if (model->start(&why)) {
      log_line(LogLevel::kError, why);
      return 1;
    }
    backend = hw::model_backend(model.get(), &hw_error);  // kept alive with the device
    log_line(LogLevel::kInfo, "transport: hw backend on the device model (" +
                                  std::string(pio->name()) + " is its MAC)");
  }
  cfg.link = &link;
  Device device(cfg, backend, doorbell);
  if (!hw_error.empty()) {
    log_line(LogLevel::kError, hw_error);
    return 1;
  }
  link.set_guid(cfg.node_guid);
  link.attach(&device);

  boost::asio::io_context io;
  std::string sock = o.run_dir + "/" + o.ibdev + ".sock";
  ControlServer server(io, device, sock, log_sink());
  if (server.start(&why)) {
    log_line(LogLevel::kError, why);
    return 1;
  }
  std::unique_ptr<MetricsServer> metrics;
  if (o.metrics_port) {
    metrics = std::make_unique<MetricsServer>(io, [&](const MetricsServerStats& s) {
      return render_device_metrics(device, o.ibdev, s, MetricsLimits{}.max_qps);
    });
    if (metrics->start(o.metrics_addr, o.metrics_port, &why)) {
      log_line(LogLevel::kError, why);
      return 1;
    }
  }
  if (!publisher.publish(link.device_info(cfg.node_guid), &why)) {
    log_line(LogLevel::kError,
             "cannot publish the device tree under " + o.sysfs_root + ": " + why);
    return 1;
  }
  // Where the provider finds this device's control socket.
  {
    std::ofstream f(publisher.ibdev_dir() + "/metaroce_socket");
    f << sock << "\n";
  }
  if (!o.pidfile.empty()) std::ofstream(o.pidfile) << getpid() << "\n";

  // Applications busy-poll their CQs on the same cores as this NIC. At
  // normal priority a woken daemon waits a scheduler slice (milliseconds)
  // behind them; SCHED_FIFO lets it run at once, as a hardware NIC would.
  // The loop sleeps after spin_us idle, and the kernel's RT throttling
  // bounds it regardless.
  if (o.rt_priority) {
    sched_param sp{};
    sp.sched_priority = static_cast<int>(o.rt_priority);
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
      log_line(LogLevel::kWarn, std::string("SCHED_FIFO unavailable (") + std::strerror(errno) +
               "): running at normal priority; expect millisecond latencies on busy cores");
    }
  }
  if (o.cpu >= 0 && !pin_to_cpu(o.cpu, o.spin, &why)) {
    log_line(LogLevel::kError, why);
    return 1;
  }
  LoopOptions lo;
  // Spinning pays off only with a CPU to spare: on 1-2 CPUs the NIC at
  // SCHED_FIFO would take the cores busy-polling applications need
  // (docs/daemon.md §The loop has the measurements).
  int spin_us = o.spin_us >= 0 ? o.spin_us : (sysconf(_SC_NPROCESSORS_ONLN) <= 2 ? 0 : 50);
  lo.spin_ns = static_cast<uint64_t>(spin_us) * 1000;
  lo.busy_horizon_ns = uint64_t{o.busy_horizon_us} * 1000;
  lo.dedicated = o.spin;
  if (o.spin)
    log_line(LogLevel::kInfo, std::string("dedicated-core mode (--spin): the loop never sleeps") +
                                  (o.cpu >= 0 ? ", on CPU " + std::to_string(o.cpu) : ", unpinned"));
  DaemonLoop loop(io, device, doorbell, link.monitor().fd(),
                  [&link] { link.process(); }, lo);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (!ec) {
      log_line(LogLevel::kInfo, std::string("signal ") + strsignal(sig) + ": shutting down");
      loop.stop();
    }
  });
  // SIGUSR1: dump every non-zero counter to the log (operators, tests).
  boost::asio::signal_set usr1(io, SIGUSR1);
  std::function<void()> arm_usr1 = [&] {
    usr1.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      log_line(LogLevel::kInfo, counters_text(device) + link.neighbour_counters());
      for (uint32_t qpn : device.qp_numbers()) log_line(LogLevel::kInfo, device.describe_qp(qpn));
      arm_usr1();
    });
  };
  arm_usr1();
  log_line(LogLevel::kInfo, o.ibdev + " up on " + o.netdev + " (" + publisher.dev_node_note() + "), " +
           std::to_string(cfg.engine.port.gids.size()) + " GIDs, socket " + sock +
           (metrics ? ", metrics on " + o.metrics_addr + ":" + std::to_string(metrics->port())
                    : std::string()));
  // Readiness only now: the device is published and its socket listens.
  if (notify_service_manager("READY=1\nSTATUS=" + o.ibdev + " up on " + o.netdev, &why))
    log_line(LogLevel::kWarn, why);
  loop.run();
  notify_service_manager("STOPPING=1", &why);

  publisher.unpublish();
  if (!o.pidfile.empty()) unlink(o.pidfile.c_str());
  close(doorbell);
  close(claim);
  return 0;
}

}  // namespace
}  // namespace metaroce::daemon

int main(int argc, char** argv) {
  using namespace metaroce::daemon;
  std::vector<std::string> args;
  Options o;
  std::string error;
  bool help = false;
  if (!expand_config_option({argv + 1, argv + argc}, &args, &error) ||
      !parse_options(args, &o, &error, &help)) {
    // One line, no usage dump: under metaroce-ctl link add or systemd the
    // reason must be the log's last line, not scrolled off by the usage.
    log_init(false);
    if (error.find("--help") == std::string::npos) error += " (see --help)";
    log_line(LogLevel::kError, error);
    return 2;
  }
  if (help) {
    std::fputs(usage(), stdout);
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  log_init(o.verbose);
  return run(o);
}
