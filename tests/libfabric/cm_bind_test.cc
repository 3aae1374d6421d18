// What libfabric's verbs provider (1.17, prov/verbs) needs from rdma_bind_addr,
// as the kernel's rdma_cm answers it (drivers/infiniband/core/cma.c):
// - fi_getinfo without a node binds an ID to "localhost" (127.0.0.1) and,
//   when the bind succeeds with no device (id->verbs NULL), takes the
//   source addresses from the interfaces it found (vrb_fill_addr). The
//   kernel's cma_any_addr counts loopback as "any": the bind succeeds,
//   bound to no device.
// - an address on an interface without an RDMA device: ENODEV
//   (cma_acquire_dev_by_src_ip); an address of no interface: EADDRNOTAVAIL
//   (rdma_translate_ip).
// The interposer's UcmaFile over the daemon's CmRole, in one process.
// clang-format off
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
// clang-format on
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <endian.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "firmware-model/daemon/cm_role.h"
#include "firmware-model/uapi/metaroce_abi.h"
#include "kmod-shim/launcher/ucma_emulation.h"

using metaroce::daemon::CmRole;
using metaroce::launcher::UcmaFile;
namespace proto = metaroce::proto;
namespace fw = metaroce::fw;

namespace {

constexpr uint64_t kGuid = 0x5ca7e8fffec225d8;
uint32_t counter_random(void* ctx) { return ++*static_cast<uint32_t*>(ctx) * 2654435761u; }

// One device with address 10.77.0.1 on a host that also has 192.168.5.5
// on another interface; one emulated rdma_cm file (client 1).
struct Host {
  uint32_t seed = 1;
  fw::Time now = 1'000'000'000;
  std::unique_ptr<CmRole> role;
  int fds[2];
  std::unique_ptr<UcmaFile> file;
  std::deque<std::vector<uint8_t>> wire;  // frames the role sent (to itself)

  Host() {
    CmRole::Env env;
    env.send = [this](const fw::OutPacket& p) {
      proto::FrameHeaders h;
      h.src_ip = p.src_ip;
      h.dst_ip = p.dst_ip;
      std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p.packet));
      REQUIRE(proto::build_frame(h, p.packet, f) > 0);
      wire.push_back(std::move(f));
    };
    env.node_guid = kGuid;
    env.random = counter_random;
    env.random_ctx = &seed;
    env.host_has_address = [](const proto::IpAddr& ip) {
      return ip == proto::IpAddr::v4(0xC0A80505) || ip == proto::IpAddr::v4(0x0A4D0001);
    };
    role = std::make_unique<CmRole>(metaroce::cm::Config{}, metaroce::daemon::CmLimits{}, env);
    fw::PortInfo port;
    port.gids = {proto::IpAddr::v4(0x0A4D0001)};
    role->set_port(port);
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) == 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    auto transport = [this](uint16_t op, std::span<const uint8_t> body, int fd,
                            std::vector<uint8_t>* reply, std::string* reason) {
      CmRole::Reply r;
      std::vector<int> passed;
      if (fd >= 0) passed.push_back(fd);
      role->handle(1, 1000, op, body, passed, now, &r);
      *reply = r.body;
      *reason = r.reason;
      return r.err;
    };
    file = std::make_unique<UcmaFile>(fds[0], transport, 0);
    std::vector<uint8_t> reply;
    std::string why;
    REQUIRE(transport(MROCE_OP_UCMA_OPEN, {}, fds[1], &reply, &why) == 0);
    mroce_ucma_open_resp open;
    REQUIRE(reply.size() == sizeof open);
    std::memcpy(&open, reply.data(), sizeof open);
    file->set_token(open.token);
    close(fds[1]);
  }
  ~Host() {
    role->close_client(1, now);
    close(fds[0]);
  }

  template <class Cmd>
  ssize_t run(uint32_t op, const Cmd& cmd) {
    std::vector<uint8_t> b(sizeof(rdma_ucm_cmd_hdr) + sizeof cmd);
    rdma_ucm_cmd_hdr hdr{op, static_cast<uint16_t>(sizeof cmd), 0xFFFF};
    std::memcpy(b.data(), &hdr, sizeof hdr);
    std::memcpy(b.data() + sizeof hdr, &cmd, sizeof cmd);
    return file->write(b.data(), b.size());
  }
  uint32_t create() {
    rdma_ucm_create_id_resp resp{};
    rdma_ucm_create_id cmd{};
    cmd.response = reinterpret_cast<uintptr_t>(&resp);
    cmd.ps = RDMA_PS_TCP;
    cmd.qp_type = 2;  // IBV_QPT_RC
    REQUIRE(run(RDMA_USER_CM_CMD_CREATE_ID, cmd) > 0);
    return resp.id;
  }
  ssize_t bind(uint32_t id, int family, const char* ip, uint16_t port) {
    rdma_ucm_bind_ip cmd{};
    cmd.id = id;
    if (family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&cmd.addr);
      a->sin_family = AF_INET;
      a->sin_port = htons(port);
      inet_pton(AF_INET, ip, &a->sin_addr);
    } else {
      cmd.addr.sin6_family = AF_INET6;
      cmd.addr.sin6_port = htons(port);
      inet_pton(AF_INET6, ip, &cmd.addr.sin6_addr);
    }
    return run(RDMA_USER_CM_CMD_BIND_IP, cmd);
  }
  // Frames back into the role's rx path, as the soft NIC's loopback does.
  void pump() {
    for (int i = 0; i < 100 && !wire.empty(); i++) {
      std::vector<uint8_t> f = std::move(wire.front());
      wire.pop_front();
      REQUIRE(role->on_frame(f, now));
      role->poll(now);
    }
  }
  int64_t event(rdma_ucm_event_resp* resp) {
    rdma_ucm_get_event cmd{reinterpret_cast<uintptr_t>(resp)};
    return run(RDMA_USER_CM_CMD_GET_EVENT, cmd) > 0 ? static_cast<int64_t>(resp->event) : int64_t{-1};
  }
  // QUERY ADDR, as librdmacm's ucma_query_addr after a bind.
  rdma_ucm_query_addr_resp query(uint32_t id) {
    rdma_ucm_query_addr_resp r{};
    rdma_ucm_query cmd{reinterpret_cast<uintptr_t>(&r), id, RDMA_USER_CM_QUERY_ADDR};
    REQUIRE(run(RDMA_USER_CM_CMD_QUERY, cmd) > 0);
    return r;
  }
};

std::string reason() { return UcmaFile::last_error(); }

}  // namespace

TEST_CASE("bind__loopback_succeeds_bound_to_no_device_as_the_kernel") {
  Host h;
  const uint32_t v4 = h.create(), v6 = h.create();
  REQUIRE(h.bind(v4, AF_INET, "127.0.0.1", 0) > 0);
  rdma_ucm_query_addr_resp q = h.query(v4);
  CHECK(q.node_guid == 0);  // librdmacm leaves id->verbs NULL
  CHECK(q.port_num == 0);
  const auto* src = reinterpret_cast<const sockaddr_in*>(&q.src_addr);
  CHECK(src->sin_family == AF_INET);
  CHECK(ntohl(src->sin_addr.s_addr) == 0x7F000001);
  CHECK(ntohs(src->sin_port) >= 32768);  // an ephemeral port, reserved
  REQUIRE(h.bind(v6, AF_INET6, "::1", 7471) > 0);
  CHECK(h.query(v6).node_guid == 0);
  // Loopback is "any": the port is taken for every address of the device.
  const uint32_t other = h.create();
  CHECK(h.bind(other, AF_INET6, "::", 7471) == -EADDRINUSE);
}

TEST_CASE("bind__an_address_of_the_device_binds_to_it") {
  Host h;
  const uint32_t id = h.create();
  REQUIRE(h.bind(id, AF_INET, "10.77.0.1", 0) > 0);
  rdma_ucm_query_addr_resp q = h.query(id);
  CHECK(q.node_guid == htobe64(kGuid));
  CHECK(q.port_num == 1);
}

TEST_CASE("bind__another_interfaces_address_is_enodev_no_interfaces_is_eaddrnotavail") {
  Host h;
  const uint32_t id = h.create();
  CHECK(h.bind(id, AF_INET, "192.168.5.5", 0) == -ENODEV);
  CHECK(reason() == "address is on an interface without a MetaRoCE device");
  CHECK(h.bind(id, AF_INET, "192.0.2.1", 0) == -EADDRNOTAVAIL);
  CHECK(reason() == "no interface has this address");
  CHECK(h.bind(id, AF_INET, "10.77.0.1", 0) > 0);  // the failures left it unbound
}

// rdma_resolve_addr to 127.0.0.1 (rping -a 127.0.0.1, "localhost"): the
// kernel's cma_resolve_loopback resolves at once on the device, whose own
// GID becomes the destination GID; the REQ goes to the device itself.
TEST_CASE("resolve__loopback_destination_is_the_device_itself") {
  Host h;
  enum : uint32_t { kAddrResolved = 0, kRouteResolved = 2, kConnectRequest = 4 };
  const uint32_t lid = h.create();
  REQUIRE(h.bind(lid, AF_INET, "0.0.0.0", 7471) > 0);
  rdma_ucm_listen l{lid, 8};
  REQUIRE(h.run(RDMA_USER_CM_CMD_LISTEN, l) > 0);
  const uint32_t id = h.create();
  rdma_ucm_resolve_ip r{};
  auto* dst = reinterpret_cast<sockaddr_in*>(&r.dst_addr);
  dst->sin_family = AF_INET;
  dst->sin_port = htons(7471);
  inet_pton(AF_INET, "127.0.0.1", &dst->sin_addr);
  r.id = id;
  r.timeout_ms = 2000;
  REQUIRE(h.run(RDMA_USER_CM_CMD_RESOLVE_IP, r) > 0);
  rdma_ucm_event_resp ev{};
  REQUIRE(h.event(&ev) == kAddrResolved);  // at once: no neighbour to ask
  CHECK(ev.status == 0);
  rdma_ucm_resolve_route rr{id, 2000};
  REQUIRE(h.run(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr) > 0);
  REQUIRE(h.event(&ev) == kRouteResolved);
  rdma_ucm_query_route_resp q{};
  rdma_ucm_query qc{reinterpret_cast<uintptr_t>(&q), id, 0};
  REQUIRE(h.run(RDMA_USER_CM_CMD_QUERY_ROUTE, qc) > 0);
  CHECK(q.node_guid == htobe64(kGuid));  // bound to the device
  CHECK(ntohl(reinterpret_cast<sockaddr_in*>(&q.dst_addr)->sin_addr.s_addr) == 0x7F000001);
  CHECK(std::memcmp(q.ib_route[0].dgid, q.ib_route[0].sgid, 16) == 0);
  const proto::IpAddr own = proto::IpAddr::v4(0x0A4D0001);
  CHECK(std::memcmp(q.ib_route[0].sgid, own.bytes.data(), 16) == 0);
  rdma_ucm_connect c{};
  c.id = id;
  c.conn_param.qp_num = 0x111;
  c.conn_param.responder_resources = 1;
  c.conn_param.initiator_depth = 1;
  c.conn_param.retry_count = 7;
  REQUIRE(h.run(RDMA_USER_CM_CMD_CONNECT, c) > 0);
  h.pump();
  REQUIRE(h.event(&ev) == kConnectRequest);  // the listener on the device took it
  CHECK(ev.param.conn.qp_num == 0x111);
}
