#include "tools/ctl/sysfs.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

namespace metaroce::ctl {
namespace {

namespace fs = std::filesystem;

struct TempTree {
  TempTree() {
    char tmpl[] = "/tmp/ctl-sysfs-XXXXXX";
    root = mkdtemp(tmpl);
  }
  ~TempTree() { fs::remove_all(root); }
  void write(const std::string& rel, const std::string& text) {
    fs::path p = fs::path(root) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root;
};

// What metaroced publishes for one device (the files libibverbs reads).
void publish(TempTree& t, const std::string& dev) {
  std::string d = "class/infiniband/" + dev + "/";
  t.write(d + "node_type", "1: CA\n");
  t.write(d + "node_guid", "0200:5eff:fe00:0001\n");
  t.write(d + "fw_ver", "1.0\n");
  t.write(d + "ports/1/state", "4: ACTIVE\n");
  t.write(d + "ports/1/phys_state", "5: LinkUp\n");
  t.write(d + "ports/1/gids/0", "fe80:0000:0000:0000:0000:5eff:fe00:0001\n");
  t.write(d + "ports/1/gids/1", "0000:0000:0000:0000:0000:ffff:0a4d:0001\n");
  t.write(d + "ports/1/gids/2", "0000:0000:0000:0000:0000:0000:0000:0000\n");
  t.write(d + "ports/1/gid_attrs/types/0", "RoCE v2\n");
  t.write(d + "ports/1/gid_attrs/types/1", "RoCE v2\n");
  t.write(d + "ports/1/gid_attrs/ndevs/0", "mroce-va\n");
  t.write(d + "ports/1/gid_attrs/ndevs/1", "mroce-va\n");
}

TEST_CASE("list_devices__sorted_and_empty_when_nothing_published") {
  TempTree t;
  std::vector<std::string> names;
  std::string why;
  CHECK(list_devices(t.root, &names, &why) == 0);
  CHECK(names.empty());
  publish(t, "metaroce1");
  publish(t, "metaroce0");
  CHECK(list_devices(t.root, &names, &why) == 0);
  CHECK(names == std::vector<std::string>{"metaroce0", "metaroce1"});
}

TEST_CASE("read_device__fields_and_non_zero_gids") {
  TempTree t;
  publish(t, "metaroce0");
  DeviceInfo d;
  std::string why;
  REQUIRE(read_device(t.root, "/run/x", "metaroce0", &d, &why) == 0);
  CHECK(d.node_type == "1: CA");
  CHECK(d.node_guid == "0200:5eff:fe00:0001");
  CHECK(d.state == "ACTIVE");
  CHECK(d.phys_state == "LinkUp");
  CHECK(d.netdev == "mroce-va");
  REQUIRE(d.gids.size() == 2);
  CHECK(d.gids[0].ip == "fe80::5eff:fe00:1");
  CHECK(d.gids[1].index == 1);
  CHECK(d.gids[1].ip == "10.77.0.1");
  CHECK(d.gids[1].type == "RoCE v2");
  CHECK(d.socket_path == "/run/x/metaroce0.sock");
}

TEST_CASE("read_device__absent_device_names_where_it_looked") {
  TempTree t;
  DeviceInfo d;
  std::string why;
  CHECK(read_device(t.root, "/run/x", "metaroce4", &d, &why) == ENOENT);
  CHECK(why == "no device metaroce4 under " + t.root +
                   "/class/infiniband (is its metaroced running? --sysfs-root or SYSFS_PATH "
                   "selects another tree)");
}

TEST_CASE("socket_path__published_file_wins_relative_path_ignored") {
  TempTree t;
  publish(t, "metaroce0");
  CHECK(socket_path(t.root, "/run/x", "metaroce0") == "/run/x/metaroce0.sock");
  t.write("class/infiniband/metaroce0/metaroce_socket", "/run/metaroce/ns-a/metaroce0.sock\n");
  CHECK(socket_path(t.root, "/run/x", "metaroce0") == "/run/metaroce/ns-a/metaroce0.sock");
  t.write("class/infiniband/metaroce0/metaroce_socket", "relative.sock\n");
  CHECK(socket_path(t.root, "/run/x", "metaroce0") == "/run/x/metaroce0.sock");
}

TEST_CASE("gid_to_ip__mapped_v6_and_garbage") {
  CHECK(gid_to_ip("0000:0000:0000:0000:0000:ffff:c0a8:0102") == "192.168.1.2");
  CHECK(gid_to_ip("fd77:0000:0000:0000:0000:0000:0000:0001") == "fd77::1");
  CHECK(gid_to_ip("fd77::1") == "");
  CHECK(gid_to_ip("zz77:0000:0000:0000:0000:0000:0000:0001") == "");
  CHECK(gid_is_zero("0000:0000:0000:0000:0000:0000:0000:0000"));
  CHECK_FALSE(gid_is_zero("0000:0000:0000:0000:0000:0000:0000:0001"));
}

}  // namespace
}  // namespace metaroce::ctl
