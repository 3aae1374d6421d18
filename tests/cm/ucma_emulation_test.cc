// Tests of the ucma ABI emulation (kmod-shim/launcher/ucma_emulation.cc)
// over the daemon's connection manager (firmware-model/daemon/cm_role.cc),
// both real and in one process: each UcmaFile's transport calls
// CmRole::handle directly, and the role's packets are framed by the real
// codec and fed back to its rx path (one device, loopback, as two programs
// on one host). Commands and events are the kernel's layouts (system
// <rdma/rdma_user_cm.h>), written as librdmacm writes them.
// clang-format off
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
// clang-format on
#include "kmod-shim/launcher/ucma_emulation.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
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

using metaroce::daemon::CmLimits;
using metaroce::daemon::CmRole;
using metaroce::launcher::UcmaFile;
namespace proto = metaroce::proto;
namespace fw = metaroce::fw;

namespace {

enum : uint32_t {  // enum rdma_cm_event_type
  kAddrResolved = 0,
  kRouteResolved = 2,
  kConnectRequest = 4,
  kConnectResponse = 5,
  kRejected = 8,
  kEstablished = 9,
  kDisconnected = 10,
  kTimewaitExit = 15,
  kMulticastJoin = 17,
};

uint32_t counter_random(void* ctx) { return ++*static_cast<uint32_t*>(ctx) * 2654435761u; }

// One device: the role, its loopback wire and a virtual clock.
struct Device {
  uint32_t seed = 1;
  fw::Time now = 1'000'000'000;
  std::deque<std::vector<uint8_t>> wire;
  std::unique_ptr<CmRole> role;
  explicit Device(CmLimits limits = {}) {
    CmRole::Env env;
    env.send = [this](const fw::OutPacket& p) {
      proto::FrameHeaders h;
      h.src_ip = p.src_ip;
      h.dst_ip = p.dst_ip;
      std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p.packet));
      REQUIRE(proto::build_frame(h, p.packet, f) > 0);
      wire.push_back(std::move(f));
    };
    env.node_guid = 0x5ca7e8fffec225d8;
    env.random = counter_random;
    env.random_ctx = &seed;
    role = std::make_unique<CmRole>(metaroce::cm::Config{}, limits, env);
    fw::PortInfo port;
    port.gids = {proto::IpAddr::v4(0x0A4D0001)};  // 10.77.0.1
    role->set_port(port);
  }
  // Delivers every frame in flight and runs the timers, until quiet.
  void pump() {
    for (int i = 0; i < 100 && !wire.empty(); i++) {
      std::vector<uint8_t> f = std::move(wire.front());
      wire.pop_front();
      REQUIRE(role->on_frame(f, now));
      role->poll(now);
    }
    role->poll(now);
  }
};

// One emulated rdma_cm file: a channel socket pair and a client of `dev`.
struct File {
  Device& dev;
  fw::OwnerId client;
  int fds[2];
  std::unique_ptr<UcmaFile> file;
  File(Device& d, fw::OwnerId c, uid_t uid = 1000) : dev(d), client(c) {
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) == 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    auto transport = [this, uid](uint16_t op, std::span<const uint8_t> body, int fd,
                                 std::vector<uint8_t>* reply, std::string* reason) {
      CmRole::Reply r;
      std::vector<int> passed;
      if (fd >= 0) passed.push_back(fd);
      dev.role->handle(client, uid, op, body, passed, dev.now, &r);
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
    close(fds[1]);  // the role keeps its own copy, as the daemon does
  }
  ~File() {
    dev.role->close_client(client, dev.now);
    close(fds[0]);
  }

  template <class Cmd>
  ssize_t run(uint32_t op, const Cmd& cmd, uint16_t out = 0xFFFF) {
    std::vector<uint8_t> b(sizeof(rdma_ucm_cmd_hdr) + sizeof cmd);
    rdma_ucm_cmd_hdr hdr{op, static_cast<uint16_t>(sizeof cmd), out};
    std::memcpy(b.data(), &hdr, sizeof hdr);
    std::memcpy(b.data() + sizeof hdr, &cmd, sizeof cmd);
    return file->write(b.data(), b.size());
  }
  uint32_t create(uint64_t uid = 77, uint16_t ps = RDMA_PS_TCP) {
    rdma_ucm_create_id_resp resp{};
    rdma_ucm_create_id cmd{};
    cmd.uid = uid;
    cmd.response = reinterpret_cast<uintptr_t>(&resp);
    cmd.ps = ps;
    cmd.qp_type = ps == RDMA_PS_UDP ? 4 : 2;  // IBV_QPT_UD, IBV_QPT_RC
    REQUIRE(run(RDMA_USER_CM_CMD_CREATE_ID, cmd) > 0);
    return resp.id;
  }
  static sockaddr_in6 v4(const char* ip, uint16_t port) {
    sockaddr_in6 s{};
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, ip, &a->sin_addr);
    return s;
  }
  ssize_t bind_v4(uint32_t id, const char* ip, uint16_t port) {
    rdma_ucm_bind_ip cmd{};
    cmd.id = id;
    cmd.addr = v4(ip, port);
    return run(RDMA_USER_CM_CMD_BIND_IP, cmd);
  }
  ssize_t listen(uint32_t id, uint32_t backlog = 8) {
    rdma_ucm_listen cmd{id, backlog};
    return run(RDMA_USER_CM_CMD_LISTEN, cmd);
  }
  // GET_EVENT, non-blocking: the event, or -1 when none is waiting.
  int64_t event(rdma_ucm_event_resp* resp) {
    rdma_ucm_get_event cmd{reinterpret_cast<uintptr_t>(resp)};
    const ssize_t r = run(RDMA_USER_CM_CMD_GET_EVENT, cmd);
    return r > 0 ? static_cast<int64_t>(resp->event) : int64_t{-1};
  }
  // Reads every waiting event of `type` (the role refills the socket from
  // its queue as it drains); stops at another event or when none is left.
  int count(uint32_t type) {
    rdma_ucm_event_resp ev{};
    int n = 0;
    for (;;) {
      const int64_t e = event(&ev);
      if (e == type) n++;
      else if (e != -1 || dev.role->poll(dev.now) == 0) return n;
    }
  }
  // RESOLVE_IP, RESOLVE_ROUTE and CONNECT to 10.77.0.1:port (QP 0x111).
  void connect(uint32_t id, uint16_t port) {
    rdma_ucm_resolve_ip r{};
    r.dst_addr = v4("10.77.0.1", port);
    r.id = id;
    r.timeout_ms = 2000;
    REQUIRE(run(RDMA_USER_CM_CMD_RESOLVE_IP, r) > 0);
    rdma_ucm_event_resp ev{};
    REQUIRE(event(&ev) == kAddrResolved);
    rdma_ucm_resolve_route rr{id, 2000};
    REQUIRE(run(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr) > 0);
    REQUIRE(event(&ev) == kRouteResolved);
    rdma_ucm_connect c{};
    c.id = id;
    c.conn_param.qp_num = 0x111;
    c.conn_param.responder_resources = 1;
    c.conn_param.initiator_depth = 1;
    c.conn_param.retry_count = 7;
    REQUIRE(run(RDMA_USER_CM_CMD_CONNECT, c) > 0);
  }
  ssize_t accept(uint32_t id, uint32_t qpn, uint64_t uid) {
    rdma_ucm_accept a{};
    a.uid = uid;
    a.id = id;
    a.conn_param.qp_num = qpn;
    a.conn_param.responder_resources = 1;
    a.conn_param.initiator_depth = 1;
    return run(RDMA_USER_CM_CMD_ACCEPT, a);
  }
  // JOIN_IP_MCAST, as librdmacm without AF_IB writes it; the group's handle in *group.
  ssize_t join(uint32_t id, const char* group, uint64_t uid = 55, uint32_t* handle = nullptr) {
    rdma_ucm_create_id_resp resp{};
    rdma_ucm_join_ip_mcast cmd{};
    cmd.response = reinterpret_cast<uintptr_t>(&resp);
    cmd.uid = uid;
    cmd.addr = v4(group, 0);
    cmd.id = id;
    const ssize_t r = run(RDMA_USER_CM_CMD_JOIN_IP_MCAST, cmd);
    if (handle) *handle = resp.id;
    return r;
  }
  ssize_t leave(uint32_t group, uint32_t* reported = nullptr) {
    rdma_ucm_destroy_id_resp resp{};
    rdma_ucm_destroy_id cmd{reinterpret_cast<uintptr_t>(&resp), group, 0};
    const ssize_t r = run(RDMA_USER_CM_CMD_LEAVE_MCAST, cmd);
    if (reported) *reported = resp.events_reported;
    return r;
  }
  ssize_t destroy(uint32_t id, uint32_t* reported = nullptr) {
    rdma_ucm_destroy_id_resp resp{};
    rdma_ucm_destroy_id cmd{reinterpret_cast<uintptr_t>(&resp), id, 0};
    const ssize_t r = run(RDMA_USER_CM_CMD_DESTROY_ID, cmd);
    if (reported) *reported = resp.events_reported;
    return r;
  }
};

std::string reason() { return UcmaFile::last_error(); }

uint64_t counter(const CmRole& role, const std::string& name) {
  uint64_t v = ~uint64_t{0};
  role.for_each_counter([&](const std::string& n, uint64_t x) {
    if (n == name) v = x;
  });
  return v;
}

// A listener on :7000 (client 1) and an active ID (client 2) up to
// ESTABLISHED on both sides; returns the passive child's handle.
struct Pair {
  Device dev;
  File server{dev, 1}, client{dev, 2};
  uint32_t lid = 0, cid = 0, child = 0;
  void establish() {
    lid = server.create(11);
    REQUIRE(server.bind_v4(lid, "10.77.0.1", 7000) > 0);
    REQUIRE(server.listen(lid) > 0);
    cid = client.create(22);
    client.connect(cid, 7000);
    dev.pump();
    rdma_ucm_event_resp ev{};
    REQUIRE(server.event(&ev) == kConnectRequest);
    CHECK(ev.uid == 11);  // the listener's cookie; ev.id names the new ID
    CHECK(ev.param.conn.qp_num == 0x111);
    child = ev.id;
    REQUIRE(server.accept(child, 0x222, 33) > 0);
    dev.pump();
    REQUIRE(client.event(&ev) == kConnectResponse);
    CHECK(ev.param.conn.qp_num == 0x222);
    REQUIRE(client.accept(cid, 0, 0) > 0);  // librdmacm's ACCEPT after CONNECT_RESPONSE: the RTU
    dev.pump();
    REQUIRE(server.event(&ev) == kEstablished);
    CHECK(ev.uid == 33);  // ACCEPT gave the child its cookie
  }
};

}  // namespace

TEST_CASE("ucma__malformed_writes_are_refused_with_a_reason") {
  Device d;
  File f(d, 1);
  uint8_t four[4] = {};
  CHECK(f.file->write(four, sizeof four) == -EINVAL);
  CHECK(reason() == "shorter than struct rdma_ucm_cmd_hdr");
  rdma_ucm_cmd_hdr hdr{RDMA_USER_CM_CMD_CREATE_ID, 200, 4};
  CHECK(f.file->write(&hdr, sizeof hdr) == -EINVAL);
  CHECK(reason() == "hdr.in runs past the write");
  struct Short {
    uint32_t x;
  } s{};
  CHECK(f.run(RDMA_USER_CM_CMD_CREATE_ID, s) == -EINVAL);
  CHECK(reason() == "command shorter than its struct");
  CHECK(f.run(99u, s) == -EINVAL);
  CHECK(reason() == "unknown rdma_cm command");
  CHECK(f.run(RDMA_USER_CM_CMD_JOIN_IP_MCAST, s) == -EINVAL);
  CHECK(reason() == "command shorter than its struct");
}

// The interposer is the client's: the daemon checks every command again.
TEST_CASE("cm_role__revalidates_commands_the_interposer_would_refuse") {
  Device d;
  File f(d, 1);
  CmRole::Reply r;
  rdma_ucm_cmd_hdr hdr{RDMA_USER_CM_CMD_CREATE_ID, 200, 4};
  std::vector<uint8_t> body(sizeof hdr + 8);
  std::memcpy(body.data(), &hdr, sizeof hdr);
  d.role->handle(1, 1000, MROCE_OP_UCMA_CMD, body, {}, d.now, &r);
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "hdr.in runs past the message");
  CHECK(counter(*d.role, "cm_cmd_malformed") == 1);
  rdma_ucm_create_id c{};
  c.ps = 0x4242;
  hdr = {RDMA_USER_CM_CMD_CREATE_ID, sizeof c, sizeof(rdma_ucm_create_id_resp)};
  body.resize(sizeof hdr + sizeof c);
  std::memcpy(body.data(), &hdr, sizeof hdr);
  std::memcpy(body.data() + sizeof hdr, &c, sizeof c);
  r = {};
  d.role->handle(1, 1000, MROCE_OP_UCMA_CMD, body, {}, d.now, &r);
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "unknown port space");
  r = {};
  d.role->handle(9, 1000, MROCE_OP_UCMA_CMD, body, {}, d.now, &r);  // never opened a channel
  CHECK(r.err == EPROTO);
}

TEST_CASE("cm_role__ids_are_bounded_per_client_and_per_user") {
  CmLimits limits;
  limits.max_ids_per_client = 3;
  limits.max_ids_per_user = 4;
  Device d(limits);
  File a(d, 1), b(d, 2), other(d, 3, 2000);
  for (int i = 0; i < 3; i++) a.create();
  rdma_ucm_create_id_resp resp{};
  rdma_ucm_create_id cmd{};
  cmd.response = reinterpret_cast<uintptr_t>(&resp);
  cmd.ps = RDMA_PS_TCP;
  cmd.qp_type = 2;
  CHECK(a.run(RDMA_USER_CM_CMD_CREATE_ID, cmd) == -ENOMEM);
  CHECK(reason().find("--max-cm-ids-per-client") != std::string::npos);
  b.create();  // the user's fourth
  CHECK(b.run(RDMA_USER_CM_CMD_CREATE_ID, cmd) == -ENOMEM);
  CHECK(reason().find("--uid-max-cm-ids") != std::string::npos);
  other.create();  // another user is not affected
  CHECK(counter(*d.role, "cm_ids_client_limit") == 1);
  CHECK(counter(*d.role, "cm_ids_user_limit") == 1);
}

// Ports live in the daemon: two files (two programs) cannot both bind one.
TEST_CASE("cm_role__ports_are_per_device_not_per_process") {
  Device d;
  File a(d, 1), b(d, 2);
  const uint32_t x = a.create(), y = b.create();
  CHECK(a.bind_v4(x, "0.0.0.0", 18515) > 0);
  CHECK(b.bind_v4(y, "10.77.0.1", 18515) == -EADDRINUSE);
  CHECK(b.bind_v4(y, "192.0.2.1", 1) == -EADDRNOTAVAIL);
  CHECK(b.bind_v4(y, "10.77.0.1", 0) > 0);  // ephemeral
  rdma_ucm_query_route_resp q{};
  rdma_ucm_query cmd{reinterpret_cast<uintptr_t>(&q), y, 0};
  CHECK(b.run(RDMA_USER_CM_CMD_QUERY_ROUTE, cmd) > 0);
  CHECK(q.node_guid == htobe64(0x5ca7e8fffec225d8));
  CHECK(ntohs(reinterpret_cast<sockaddr_in*>(&q.src_addr)->sin_port) >= 32768);
  rdma_ucm_bind ib{};
  ib.id = a.create();
  ib.addr_size = 16;
  ib.addr.ss_family = 27;  // AF_IB
  CHECK(a.run(RDMA_USER_CM_CMD_BIND, ib) == -EAFNOSUPPORT);
  CHECK(a.destroy(12345) == -ENOENT);
  CHECK(b.destroy(x) == -ENOENT);  // another client's ID
}

TEST_CASE("cm_role__connect_accept_disconnect_end_to_end") {
  Pair p;
  p.establish();
  rdma_ucm_init_qp_attr q{};
  ib_uverbs_qp_attr attr{};
  q.response = reinterpret_cast<uintptr_t>(&attr);
  q.id = p.cid;
  q.qp_state = 2;  // IBV_QPS_RTR
  REQUIRE(p.client.run(RDMA_USER_CM_CMD_INIT_QP_ATTR, q) > 0);
  CHECK(attr.dest_qp_num == 0x222);
  CHECK(attr.ah_attr.is_global == 1);
  CHECK(attr.ah_attr.grh.dgid[15] == 1);  // 10.77.0.1, IPv4-mapped
  rdma_ucm_disconnect dc{p.cid};
  REQUIRE(p.client.run(RDMA_USER_CM_CMD_DISCONNECT, dc) > 0);
  p.dev.pump();
  rdma_ucm_event_resp ev{};
  CHECK(p.server.event(&ev) == kDisconnected);
  CHECK(ev.id == p.child);
  CHECK(p.client.event(&ev) == kDisconnected);
  CHECK(p.server.run(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{p.child}) > 0);  // again: fine
  // Programs (cmtime's server) wait for TIMEWAIT_EXIT, as the kernel sends it.
  p.dev.now += 10'000'000'000;
  p.dev.pump();
  CHECK(p.server.event(&ev) == kTimewaitExit);
  CHECK(p.client.event(&ev) == kTimewaitExit);
}

// The UD port space as udaddy uses it: INIT_QP_ATTR gives the passive QP
// the ID's Q_Key; ACCEPT answers; ESTABLISHED gives the active side the
// peer's QPN, Q_Key and address handle (rdma_ucm_ud_param).
TEST_CASE("cm_role__ud_id_keeps_one_qkey") {
  Device dev;
  File server{dev, 1}, client{dev, 2};
  const uint32_t lid = server.create(11, RDMA_PS_UDP);
  REQUIRE(server.bind_v4(lid, "10.77.0.1", 7174) > 0);
  REQUIRE(server.listen(lid) > 0);
  const uint32_t cid = client.create(22, RDMA_PS_UDP);
  client.connect(cid, 7174);
  dev.pump();
  rdma_ucm_event_resp ev{};
  REQUIRE(server.event(&ev) == kConnectRequest);
  const uint32_t child = ev.id;
  rdma_ucm_init_qp_attr q{};
  ib_uverbs_qp_attr attr{};
  q.response = reinterpret_cast<uintptr_t>(&attr);
  q.id = child;
  q.qp_state = 1;  // IBV_QPS_INIT
  REQUIRE(server.run(RDMA_USER_CM_CMD_INIT_QP_ATTR, q) > 0);
  CHECK((attr.qp_attr_mask & (1u << 6)) != 0);  // IBV_QP_QKEY
  CHECK((attr.qp_attr_mask & (1u << 3)) == 0);  // no IBV_QP_ACCESS_FLAGS on a UD QP
  CHECK(attr.qkey == 0x01234567u);              // RDMA_UDP_QKEY
  rdma_ucm_accept a{};
  a.id = child;
  a.uid = 33;
  a.conn_param.qp_num = 0x222;
  a.conn_param.qkey = 0x42;
  CHECK(server.run(RDMA_USER_CM_CMD_ACCEPT, a) == -EINVAL);
  CHECK(reason() == "Q_Key differs from the one this rdma_cm ID already uses");
  a.conn_param.qkey = 0;
  REQUIRE(server.run(RDMA_USER_CM_CMD_ACCEPT, a) > 0);
  dev.pump();
  REQUIRE(client.event(&ev) == kEstablished);
  CHECK(ev.param.ud.qp_num == 0x222);
  CHECK(ev.param.ud.qkey == 0x01234567u);
  CHECK(ev.param.ud.ah_attr.is_global == 1);
  CHECK(ev.param.ud.ah_attr.grh.dgid[15] == 1);  // 10.77.0.1, IPv4-mapped
  CHECK(server.event(&ev) == -1);                // the passive UD side gets no ESTABLISHED
}

TEST_CASE("cm_role__connect_to_a_port_nobody_listens_on_is_rejected_at_once") {
  Device d;
  File f(d, 1);
  const uint32_t id = f.create();
  f.connect(id, 7999);
  d.pump();
  rdma_ucm_event_resp ev{};
  CHECK(f.event(&ev) == kRejected);
  CHECK(ev.status == 8);  // IB_CM_REJ_INVALID_SERVICE_ID
  CHECK(counter(*d.role, "cm_rej_no_listener") == 1);
}

// The listener's program dies: the daemon sees its connection close and
// destroys its IDs, so the peer is told (DISCONNECTED), never left hanging.
TEST_CASE("cm_role__closing_a_client_disconnects_its_peers") {
  Pair p;
  p.establish();
  const size_t ids = p.dev.role->id_count();
  p.dev.role->close_client(1, p.dev.now);  // the server's file
  CHECK(p.dev.role->id_count() == ids - 2);  // the listener and its connection
  p.dev.pump();
  rdma_ucm_event_resp ev{};
  CHECK(p.client.event(&ev) == kDisconnected);
}

// rdma_destroy_id waits for the events it was given; unread ones go.
TEST_CASE("ucma__destroy_reports_the_events_read_and_drops_the_unread") {
  Device d;
  File f(d, 1);
  const uint32_t id = f.create();
  f.connect(id, 7999);  // ADDR_RESOLVED and ROUTE_RESOLVED read: 2
  d.pump();             // REJECTED waits unread
  uint32_t reported = 99;
  CHECK(f.destroy(id, &reported) > 0);
  CHECK(reported == 2);
  rdma_ucm_event_resp ev{};
  CHECK(f.event(&ev) == -1);  // the REJECTED of the destroyed ID is not handed out
  CHECK(reason() == "no event (non-blocking channel)");
}

TEST_CASE("ucma__get_event_response_must_fit") {
  Device d;
  File f(d, 1);
  rdma_ucm_event_resp resp{};
  rdma_ucm_get_event cmd{reinterpret_cast<uintptr_t>(&resp)};
  CHECK(f.run(RDMA_USER_CM_CMD_GET_EVENT, cmd) == -EAGAIN);
  CHECK(f.run(RDMA_USER_CM_CMD_GET_EVENT, cmd, 8) == -ENOSPC);
}

// Forged or malformed CM frames are counted and change nothing.
TEST_CASE("cm_role__malformed_frames_are_counted_drops") {
  Pair p;
  p.establish();
  std::vector<uint8_t> junk(60, 0);
  junk[14] = 0x45;  // IPv4, IHL 5
  junk[14 + 20 + 8 + 1] = 0x1D;  // DREQ opcode, nothing else valid
  CHECK(p.dev.role->on_frame(junk, p.dev.now));
  CHECK(counter(*p.dev.role, "cm_rx_drop_parse") == 1);
  p.dev.pump();
  rdma_ucm_event_resp ev{};
  CHECK(p.client.event(&ev) == -1);  // still connected: no event
  CHECK(p.server.event(&ev) == -1);
}

// Anyone can send REQs from any address: the REJs answering REQs that made
// no connection are bounded per second, the rest counted.
TEST_CASE("cm_role__rejs_to_stray_reqs_are_rate_limited") {
  Device d;
  File f(d, 1);
  for (int i = 0; i < 300; i++) {
    const uint32_t id = f.create();
    f.connect(id, 7999);  // nobody listens
  }
  size_t rejs = 0;
  while (!d.wire.empty()) {
    std::vector<uint8_t> frame = std::move(d.wire.front());
    d.wire.pop_front();
    auto parsed = proto::parse_frame(frame);
    REQUIRE(parsed);
    if (parsed.value().packet.mbth.opcode == proto::Opcode::kCmRej) rejs++;
    d.role->on_frame(frame, d.now);
  }
  CHECK(rejs == 256);
  CHECK(counter(*d.role, "cm_rej_rate_limited") == 300 - 256);
  CHECK(counter(*d.role, "cm_rej_no_listener") == 300);
  CHECK(f.count(kRejected) == 256);  // the others wait for their REQ timeout
  d.now += 1'100'000'000;  // the next second has a fresh budget
  d.role->poll(d.now);
  f.connect(f.create(), 7999);
  d.pump();
  CHECK(counter(*d.role, "cm_rej_rate_limited") == 300 - 256);
}

// A REQ flood holds at most the listener's backlog; the rest is rejected
// at once (IB_CM_REJ_NO_RESOURCES), through the daemon's command path.
TEST_CASE("cm_role__a_req_flood_is_bounded_by_the_backlog") {
  Device d;
  File server(d, 1), client(d, 2);
  const uint32_t lid = server.create();
  REQUIRE(server.bind_v4(lid, "10.77.0.1", 7000) > 0);
  REQUIRE(server.listen(lid, 2) > 0);
  for (int i = 0; i < 5; i++) client.connect(client.create(), 7000);
  d.pump();
  CHECK(server.count(kConnectRequest) == 2);
  CHECK(client.count(kRejected) == 3);
  CHECK(counter(*d.role, "cm_rej_backlog_full") == 3);
}

// rdma_join_multicast's refusals, with the kernel's errnos and a reason.
TEST_CASE("cm_role__multicast_join_refusals_have_errnos_and_reasons") {
  Device d;
  File f(d, 1);
  const uint32_t ud = f.create(77, RDMA_PS_UDP);
  CHECK(f.join(ud, "239.1.2.3") == -EINVAL);
  CHECK(reason() == "rdma_cm ID is not bound to a MetaRoCE address: bind or resolve it first");
  CHECK(f.join(999, "239.1.2.3") == -ENOENT);
  REQUIRE(f.bind_v4(ud, "10.77.0.1", 0) > 0);
  CHECK(f.join(ud, "10.77.0.2") == -EINVAL);
  CHECK(reason() == "not a multicast address (224.0.0.0/4 or ff00::/8)");
  rdma_ucm_join_ip_mcast bad{};
  bad.id = ud;
  bad.addr.sin6_family = AF_UNIX;
  CHECK(f.run(RDMA_USER_CM_CMD_JOIN_IP_MCAST, bad) == -EINVAL);
  CHECK(reason() == "multicast address must be AF_INET or AF_INET6");
  rdma_ucm_join_mcast ex{};
  ex.id = ud;
  ex.addr_size = sizeof(sockaddr_in6);  // an AF_INET address
  const sockaddr_in6 g = File::v4("239.1.2.3", 0);
  std::memcpy(&ex.addr, &g, sizeof(sockaddr_in));
  CHECK(f.run(RDMA_USER_CM_CMD_JOIN_MCAST, ex) == -EINVAL);
  CHECK(reason() == "JOIN_MCAST addr_size is not its family's");
  ex.addr_size = sizeof(sockaddr_in);
  ex.join_flags = 7;
  CHECK(f.run(RDMA_USER_CM_CMD_JOIN_MCAST, ex) == -EINVAL);
  CHECK(reason() == "unknown multicast join flags");
  const uint32_t rc = f.create(78, RDMA_PS_TCP);
  REQUIRE(f.bind_v4(rc, "10.77.0.1", 0) > 0);
  CHECK(f.join(rc, "239.1.2.3") == -EINVAL);
  CHECK(reason() == "multicast needs a UD rdma_cm ID (RDMA_PS_UDP)");
  CHECK(f.leave(12345) == -ENOENT);
  CHECK(reason() == "no such multicast membership");
  CHECK(counter(*d.role, "cm_mcast_joins") == 0);
}

// A join answers with the group's handle and MULTICAST_JOIN (the group as
// dgid, QPN 0xFFFFFF, RDMA_UDP_QKEY); leaving reports its events read.
TEST_CASE("ucma__multicast_join_event_and_leave") {
  Device d;
  File f(d, 1);
  const uint32_t id = f.create(77, RDMA_PS_UDP);
  REQUIRE(f.bind_v4(id, "10.77.0.1", 0) > 0);
  uint32_t group = 0;
  REQUIRE(f.join(id, "239.1.2.3", 0xC0FFEE, &group) > 0);
  CHECK(group != 0);
  rdma_ucm_event_resp ev{};
  REQUIRE(f.event(&ev) == kMulticastJoin);
  CHECK(ev.uid == 0xC0FFEE);  // the join's cookie (librdmacm: its cma_multicast)
  CHECK(ev.id == group);
  CHECK(ev.status == 0);
  CHECK(ev.param.ud.qp_num == 0xFFFFFF);
  CHECK(ev.param.ud.qkey == 0x01234567);
  const uint8_t dgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 239, 1, 2, 3};
  CHECK(std::memcmp(ev.param.ud.ah_attr.grh.dgid, dgid, 16) == 0);
  CHECK(ev.param.ud.ah_attr.is_global == 1);
  uint32_t reported = 99;
  REQUIRE(f.leave(group, &reported) > 0);
  CHECK(reported == 1);
  CHECK(f.leave(group) == -ENOENT);
  uint32_t second = 0;  // an unread join's event goes with its group
  REQUIRE(f.join(id, "239.1.2.4", 1, &second) > 0);
  CHECK(second != group);
  REQUIRE(f.leave(second, &reported) > 0);
  CHECK(reported == 0);
  CHECK(f.event(&ev) == -1);
  CHECK(counter(*d.role, "cm_mcast_joins") == 2);
  CHECK(counter(*d.role, "cm_mcast_leaves") == 2);
}

// Joins are bounded per ID and per user; destroying an ID leaves its groups.
TEST_CASE("cm_role__multicast_joins_are_bounded_and_released") {
  CmLimits limits;
  limits.max_groups_per_id = 2;
  limits.max_groups_per_user = 3;
  Device d(limits);
  File f(d, 1);
  const uint32_t a = f.create(1, RDMA_PS_UDP), b = f.create(2, RDMA_PS_UDP);
  REQUIRE(f.bind_v4(a, "10.77.0.1", 0) > 0);
  REQUIRE(f.bind_v4(b, "10.77.0.1", 0) > 0);
  REQUIRE(f.join(a, "239.0.0.1") > 0);
  REQUIRE(f.join(a, "239.0.0.2") > 0);
  CHECK(f.join(a, "239.0.0.3") == -ENOMEM);
  CHECK(reason() == "too many multicast joins on this rdma_cm ID (max_groups_per_id)");
  CHECK(counter(*d.role, "cm_mcast_id_limit") == 1);
  REQUIRE(f.join(b, "239.0.0.1") > 0);
  CHECK(f.join(b, "239.0.0.4") == -ENOMEM);
  CHECK(reason() == "too many multicast joins for this user (max_groups_per_user)");
  CHECK(counter(*d.role, "cm_mcast_user_limit") == 1);
  REQUIRE(f.destroy(a) > 0);
  CHECK(counter(*d.role, "cm_mcast_leaves") == 2);
  CHECK(f.join(b, "239.0.0.4") > 0);
}
