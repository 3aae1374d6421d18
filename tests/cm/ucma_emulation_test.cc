// Tests of the ucma ABI emulation (kmod-shim/launcher/ucma_emulation.cc)
// driven directly, without LD_PRELOAD: every malformed write is refused with
// the kernel's errno and a reason, and the served commands answer in the
// kernel's layouts (system <rdma/rdma_user_cm.h>). A device is a small
// sysfs tree in the test's temporary directory.
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
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using metaroce::launcher::UcmaFile;

namespace {

std::string make_sysfs() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp ? tmp : "/tmp") + "/ucma_sysfs";
  const std::string dev = root + "/class/infiniband/metaroce7";
  std::filesystem::create_directories(dev + "/ports/1/gids");
  std::ofstream(dev + "/node_guid") << "5ca7:e8ff:fec2:25d8\n";
  std::ofstream(dev + "/ports/1/gids/0") << "fe80:0000:0000:0000:5ca7:e8ff:fec2:25d8\n";
  std::ofstream(dev + "/ports/1/gids/1") << "0000:0000:0000:0000:0000:ffff:0a4d:0001\n";  // 10.77.0.1
  std::ofstream(dev + "/ports/1/gids/2") << "0000:0000:0000:0000:0000:0000:0000:0000\n";
  return root;
}

struct Fixture {
  int fds[2];
  UcmaFile* file;
  Fixture() {
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) == 0);
    file = new UcmaFile(fds[0], make_sysfs());
  }
  ~Fixture() {
    delete file;
    close(fds[0]);
    close(fds[1]);
  }

  // Runs one command: header + struct, as librdmacm writes it.
  template <class Cmd>
  ssize_t run(uint32_t op, const Cmd& cmd, uint16_t out = 0xFFFF) {
    std::vector<uint8_t> b(sizeof(rdma_ucm_cmd_hdr) + sizeof cmd);
    rdma_ucm_cmd_hdr hdr{op, static_cast<uint16_t>(sizeof cmd), out};
    std::memcpy(b.data(), &hdr, sizeof hdr);
    std::memcpy(b.data() + sizeof hdr, &cmd, sizeof cmd);
    return file->write(b.data(), b.size());
  }
  uint32_t create(uint16_t ps = RDMA_PS_TCP) {
    rdma_ucm_create_id_resp resp{};
    rdma_ucm_create_id cmd{};
    cmd.uid = 77;
    cmd.response = reinterpret_cast<uintptr_t>(&resp);
    cmd.ps = ps;
    REQUIRE(run(RDMA_USER_CM_CMD_CREATE_ID, cmd) > 0);
    return resp.id;
  }
  ssize_t bind_v4(uint32_t id, const char* ip, uint16_t port) {
    rdma_ucm_bind_ip cmd{};
    cmd.id = id;
    auto* a = reinterpret_cast<sockaddr_in*>(&cmd.addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, ip, &a->sin_addr);
    return run(RDMA_USER_CM_CMD_BIND_IP, cmd);
  }
};

std::string reason() { return UcmaFile::last_error(); }

}  // namespace

TEST_CASE("ucma__malformed_writes_are_refused_with_a_reason") {
  Fixture f;
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
  CHECK(reason() == "CREATE_ID too short");
  CHECK(f.run(99u, s) == -EINVAL);
  CHECK(reason() == "unknown rdma_cm command");
  CHECK(f.run(RDMA_USER_CM_CMD_RESOLVE_IP, s) == -ENOSYS);
  CHECK(reason().find("daemon") != std::string::npos);
}

TEST_CASE("ucma__create_id_answers_and_bounds") {
  Fixture f;
  rdma_ucm_create_id_resp resp{};
  rdma_ucm_create_id cmd{};
  cmd.response = reinterpret_cast<uintptr_t>(&resp);
  cmd.ps = RDMA_PS_TCP;
  CHECK(f.run(RDMA_USER_CM_CMD_CREATE_ID, cmd, 2) == -ENOSPC);  // response does not fit
  cmd.ps = 0x999;
  CHECK(f.run(RDMA_USER_CM_CMD_CREATE_ID, cmd) == -EINVAL);
  CHECK(reason() == "unknown port space");
  cmd.ps = RDMA_PS_UDP;
  CHECK(f.run(RDMA_USER_CM_CMD_CREATE_ID, cmd) == static_cast<ssize_t>(sizeof(rdma_ucm_cmd_hdr) + sizeof cmd));
  CHECK(resp.id == 1);
  while (f.file->id_count() < UcmaFile::kMaxIds) f.create();
  CHECK(f.run(RDMA_USER_CM_CMD_CREATE_ID, cmd) == -ENOMEM);
}

TEST_CASE("ucma__destroy_unknown_id") {
  Fixture f;
  rdma_ucm_destroy_id_resp resp{};
  rdma_ucm_destroy_id cmd{};
  cmd.response = reinterpret_cast<uintptr_t>(&resp);
  cmd.id = 42;
  CHECK(f.run(RDMA_USER_CM_CMD_DESTROY_ID, cmd) == -ENOENT);
  cmd.id = f.create();
  CHECK(f.run(RDMA_USER_CM_CMD_DESTROY_ID, cmd) > 0);
  CHECK(f.file->id_count() == 0);
}

TEST_CASE("ucma__bind_finds_the_device_by_gid_and_query_route_reports_it") {
  Fixture f;
  const uint32_t id = f.create();
  CHECK(f.bind_v4(id, "10.77.0.9", 1) == -EADDRNOTAVAIL);
  CHECK(reason().find("no MetaRoCE device") != std::string::npos);
  CHECK(f.bind_v4(id, "10.77.0.1", 7174) > 0);
  CHECK(f.bind_v4(id, "10.77.0.1", 7175) == -EINVAL);  // already bound
  rdma_ucm_query_route_resp resp{};
  resp.ibdev_index = 0xFFFFFFFF;
  rdma_ucm_query q{reinterpret_cast<uintptr_t>(&resp), id, 0};
  REQUIRE(f.run(RDMA_USER_CM_CMD_QUERY_ROUTE, q) > 0);
  const uint8_t guid[8] = {0x5c, 0xa7, 0xe8, 0xff, 0xfe, 0xc2, 0x25, 0xd8};
  CHECK(std::memcmp(&resp.node_guid, guid, 8) == 0);  // what ibv_get_device_guid gives
  CHECK(resp.port_num == 1);
  CHECK(resp.ibdev_index == 0xFFFFFFFF);  // left for librdmacm to match by GUID
  const auto* src = reinterpret_cast<const sockaddr_in*>(&resp.src_addr);
  CHECK(src->sin_family == AF_INET);
  CHECK(ntohs(src->sin_port) == 7174);
  CHECK(resp.ib_route[0].sgid[10] == 0xFF);  // IPv4-mapped GID
  // Another ID on the same port and address, or the wildcard: in use.
  CHECK(f.bind_v4(f.create(), "0.0.0.0", 7174) == -EADDRINUSE);
  // Another port space may use the port.
  CHECK(f.bind_v4(f.create(RDMA_PS_UDP), "0.0.0.0", 7174) > 0);
}

TEST_CASE("ucma__bind_refuses_af_ib_and_oversized_addresses") {
  Fixture f;
  rdma_ucm_bind cmd{};
  cmd.id = f.create(RDMA_PS_IB);
  cmd.addr_size = 48;
  cmd.addr.ss_family = 27;  // AF_IB: librdmacm's probe; refused so it uses the IP commands
  CHECK(f.run(RDMA_USER_CM_CMD_BIND, cmd) == -EAFNOSUPPORT);
  cmd.addr_size = sizeof cmd.addr + 1;
  CHECK(f.run(RDMA_USER_CM_CMD_BIND, cmd) == -EINVAL);
  cmd.addr.ss_family = AF_INET;
  cmd.addr_size = 4;  // shorter than a sockaddr_in
  CHECK(f.run(RDMA_USER_CM_CMD_BIND, cmd) == -EINVAL);
}

TEST_CASE("ucma__ephemeral_port_and_listen") {
  Fixture f;
  const uint32_t id = f.create();
  rdma_ucm_listen l{id, 8};
  CHECK(f.run(RDMA_USER_CM_CMD_LISTEN, l) == -EINVAL);  // not bound
  CHECK(f.bind_v4(id, "0.0.0.0", 0) > 0);
  rdma_ucm_query_addr_resp resp{};
  rdma_ucm_query q{reinterpret_cast<uintptr_t>(&resp), id, RDMA_USER_CM_QUERY_ADDR};
  REQUIRE(f.run(RDMA_USER_CM_CMD_QUERY, q) > 0);
  CHECK(ntohs(reinterpret_cast<const sockaddr_in*>(&resp.src_addr)->sin_port) >= 32768);
  CHECK(resp.node_guid == 0);  // a wildcard bind names no device
  CHECK(f.run(RDMA_USER_CM_CMD_LISTEN, l) > 0);
  q.option = RDMA_USER_CM_QUERY_PATH;
  CHECK(f.run(RDMA_USER_CM_CMD_QUERY, q) == -ENOSYS);
}

TEST_CASE("ucma__get_event_reads_one_record_or_eagain") {
  Fixture f;
  rdma_ucm_event_resp resp{};
  rdma_ucm_get_event cmd{reinterpret_cast<uintptr_t>(&resp)};
  fcntl(f.fds[0], F_SETFL, O_NONBLOCK);
  CHECK(f.run(RDMA_USER_CM_CMD_GET_EVENT, cmd) == -EAGAIN);
  rdma_ucm_event_resp ev{};
  ev.uid = 1234;
  ev.event = 4;  // RDMA_CM_EVENT_CONNECT_REQUEST
  REQUIRE(send(f.fds[1], &ev, sizeof ev, 0) == static_cast<ssize_t>(sizeof ev));
  CHECK(f.run(RDMA_USER_CM_CMD_GET_EVENT, cmd) > 0);
  CHECK(resp.uid == 1234);
  CHECK(resp.event == 4);
  REQUIRE(send(f.fds[1], &ev, 10, 0) == 10);  // a truncated record
  CHECK(f.run(RDMA_USER_CM_CMD_GET_EVENT, cmd) == -EIO);
  CHECK(f.run(RDMA_USER_CM_CMD_GET_EVENT, cmd, 8) == -ENOSPC);
}
