// Checks the published tree file by file against the libibverbs 44 discovery
// facts (/work/shared/abi/README.md, "How libibverbs 44 finds a device").
#include "kmod-shim/sysfs/sysfs_publisher.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using namespace metaroce::kmod_shim;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/sysfs_publisher_test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

DeviceInfo sample() {
  DeviceInfo d;
  d.ibdev = "metaroce0";
  std::array<uint8_t, 6> mac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  d.node_guid = guid_from_mac(mac);
  d.gids.push_back({gid_link_local_from_mac(mac), GidType::kRoceV2, "lo"});
  d.gids.push_back({gid_from_ipv4(0x0a4d0001), GidType::kRoceV2, "lo"});  // 10.77.0.1
  return d;
}

PublisherOptions options(const TempDir& t) {
  PublisherOptions o;
  o.sysfs_root = (t.path / "sysfs").string();
  o.dev_dir = (t.path / "dev/infiniband").string();
  return o;
}

}  // namespace

TEST_CASE("gid helpers: formats as the kernel prints them") {
  CHECK(format_gid(gid_from_ipv4(0x0a4d0001)) == "0000:0000:0000:0000:0000:ffff:0a4d:0001");
  std::array<uint8_t, 6> mac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  CHECK(format_gid(gid_link_local_from_mac(mac)) == "fe80:0000:0000:0000:0011:22ff:fe33:4455");
  CHECK(format_guid(guid_from_mac(mac)) == "0011:22ff:fe33:4455");
}

TEST_CASE("publish: writes every file libibverbs reads") {
  TempDir t;
  SysfsPublisher pub(options(t));
  std::string why;
  REQUIRE_MESSAGE(pub.publish(sample(), &why), why);
  fs::path root = t.path / "sysfs/class";
  CHECK(slurp(root / "infiniband_verbs/abi_version") == "6\n");
  CHECK(slurp(root / "infiniband_verbs/uverbs0/ibdev") == "metaroce0\n");
  CHECK(slurp(root / "infiniband_verbs/uverbs0/dev") == "1:7\n");
  CHECK(slurp(root / "infiniband_verbs/uverbs0/abi_version") == "6\n");
  fs::path dev = root / "infiniband/metaroce0";
  CHECK(slurp(dev / "node_type") == "1: CA\n");
  CHECK(slurp(dev / "node_guid") == "0011:22ff:fe33:4455\n");
  CHECK(slurp(dev / "sys_image_guid") == "0011:22ff:fe33:4455\n");
  CHECK(fs::exists(dev / "node_desc"));
  CHECK(fs::exists(dev / "board_id"));
  fs::path port = dev / "ports/1";
  CHECK(slurp(port / "state") == "4: ACTIVE\n");
  CHECK(slurp(port / "phys_state") == "5: LinkUp\n");
  CHECK(slurp(port / "link_layer") == "Ethernet\n");
  CHECK(slurp(port / "lid") == "0x0\n");
  CHECK(slurp(port / "pkeys/0") == "0xffff\n");
  CHECK(slurp(port / "gids/0") == "fe80:0000:0000:0000:0011:22ff:fe33:4455\n");
  CHECK(slurp(port / "gids/1") == "0000:0000:0000:0000:0000:ffff:0a4d:0001\n");
  CHECK(slurp(port / "gid_attrs/types/0") == "RoCE v2\n");
  CHECK(slurp(port / "gid_attrs/types/1") == "RoCE v2\n");
  CHECK(slurp(port / "gid_attrs/ndevs/1") == "lo\n");
}

TEST_CASE("publish: fixed GID table, empty slots zero, typed, with no ndev") {
  TempDir t;
  SysfsPublisher pub(options(t));
  std::string why;
  REQUIRE(pub.publish(sample(), &why));
  fs::path port = t.path / "sysfs/class/infiniband/metaroce0/ports/1";
  int gids = 0;
  for (auto& e : fs::directory_iterator(port / "gids")) gids += e.is_regular_file();
  CHECK(gids == 16);
  CHECK(slurp(port / "gids/15") == "0000:0000:0000:0000:0000:0000:0000:0000\n");
  int types = 0;
  for (auto& e : fs::directory_iterator(port / "gid_attrs/types")) types += e.is_regular_file();
  CHECK(types == 16);
  CHECK(slurp(port / "gid_attrs/types/2") == "RoCE v2\n");
  CHECK(slurp(port / "gid_attrs/types/15") == "RoCE v2\n");
  CHECK_FALSE(fs::exists(port / "gid_attrs/ndevs/2"));
}

TEST_CASE("publish: update rewrites changed files and drops removed GIDs") {
  TempDir t;
  SysfsPublisher pub(options(t));
  std::string why;
  DeviceInfo d = sample();
  REQUIRE(pub.publish(d, &why));
  d.gids.pop_back();  // address removed
  d.port_active = false;
  REQUIRE_MESSAGE(pub.publish(d, &why), why);
  fs::path port = t.path / "sysfs/class/infiniband/metaroce0/ports/1";
  CHECK(slurp(port / "gids/1") == "0000:0000:0000:0000:0000:0000:0000:0000\n");
  CHECK(slurp(port / "gid_attrs/types/1") == "RoCE v2\n");
  CHECK_FALSE(fs::exists(port / "gid_attrs/ndevs/1"));
  CHECK(slurp(port / "state") == "1: DOWN\n");
  CHECK(slurp(port / "phys_state") == "3: Disabled\n");
  // No temp files left behind.
  for (auto& e : fs::recursive_directory_iterator(t.path / "sysfs"))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp") == std::string::npos, e.path().string());
}

// A fake host sysfs: class/net/<if> -> ../../devices/<path>/net/<if>, and,
// for a NIC with a parent, <path> is that parent and <if>/device links it.
void fake_netdev(const fs::path& sys, const std::string& ifn, bool with_parent) {
  fs::path devpath = with_parent ? sys / "devices/pci0000:00/0000:00:03.0" : sys / "devices/virtual";
  fs::create_directories(devpath / "net" / ifn);
  fs::create_directories(sys / "class/net");
  fs::create_directory_symlink(devpath / "net" / ifn, sys / "class/net" / ifn);
  if (with_parent) fs::create_directory_symlink(devpath, devpath / "net" / ifn / "device");
}

TEST_CASE("publish: device/net names a virtual netdev") {
  TempDir t;
  PublisherOptions o = options(t);
  o.host_sysfs = (t.path / "sys").string();
  fake_netdev(t.path / "sys", "veth7", false);
  SysfsPublisher pub(o);
  DeviceInfo d = sample();
  d.netdev = "veth7";
  std::string why;
  REQUIRE_MESSAGE(pub.publish(d, &why), why);
  fs::path dev = t.path / "sysfs/class/infiniband/metaroce0/device";
  CHECK(fs::is_directory(fs::symlink_status(dev)));
  CHECK(fs::read_symlink(dev / "net/veth7") == t.path / "sys/class/net/veth7");
  CHECK(fs::equivalent(dev / "net/veth7", t.path / "sys/devices/virtual/net/veth7"));
  // Renamed interface: the old entry goes, the new one comes.
  fake_netdev(t.path / "sys", "veth8", false);
  d.netdev = "veth8";
  REQUIRE_MESSAGE(pub.publish(d, &why), why);
  CHECK_FALSE(fs::exists(fs::symlink_status(dev / "net/veth7")));
  CHECK(fs::exists(dev / "net/veth8"));
  d.netdev.clear();
  REQUIRE(pub.publish(d, &why));
  CHECK_FALSE(fs::exists(fs::symlink_status(dev)));
}

TEST_CASE("publish: device is the parent of a netdev that has one, as for a PCI RDMA NIC") {
  TempDir t;
  PublisherOptions o = options(t);
  o.host_sysfs = (t.path / "sys").string();
  fake_netdev(t.path / "sys", "enp0s3", true);
  SysfsPublisher pub(o);
  DeviceInfo d = sample();
  d.netdev = "enp0s3";
  std::string why;
  REQUIRE_MESSAGE(pub.publish(d, &why), why);
  fs::path dev = t.path / "sysfs/class/infiniband/metaroce0/device";
  REQUIRE(fs::is_symlink(fs::symlink_status(dev)));
  CHECK(fs::read_symlink(dev) == t.path / "sys/devices/pci0000:00/0000:00:03.0");
  CHECK(fs::exists(dev / "net/enp0s3"));
  REQUIRE(pub.publish(d, &why));  // unchanged: kept
  pub.unpublish();
  CHECK(fs::exists(t.path / "sys/devices/pci0000:00/0000:00:03.0/net/enp0s3"));  // not followed
}

TEST_CASE("publish: a tree left by a daemon that died is replaced whole") {
  TempDir t;
  std::string why;
  DeviceInfo d = sample();
  {
    SysfsPublisher dead(options(t));
    REQUIRE(dead.publish(d, &why));
  }  // no unpublish: the daemon was killed
  fs::path dev = t.path / "sysfs/class/infiniband/metaroce0";
  std::ofstream(dev / "stale") << "x\n";
  SysfsPublisher next(options(t));
  d.gids.pop_back();
  REQUIRE_MESSAGE(next.publish(d, &why), why);
  CHECK_FALSE(fs::exists(dev / "stale"));
  CHECK(slurp(dev / "ports/1/gids/1") == "0000:0000:0000:0000:0000:0000:0000:0000\n");
  CHECK(slurp(dev / "ports/1/gids/0") == "fe80:0000:0000:0000:0011:22ff:fe33:4455\n");
  for (auto& e : fs::directory_iterator(t.path / "sysfs/class/infiniband"))
    CHECK_MESSAGE(e.path().filename() == "metaroce0", e.path().string());  // the old tree is gone
}

TEST_CASE("publish: too many GIDs and renaming are refused, nothing lost") {
  TempDir t;
  SysfsPublisher pub(options(t));
  std::string why;
  DeviceInfo d = sample();
  REQUIRE(pub.publish(d, &why));
  DeviceInfo big = d;
  big.gids.resize(17, d.gids[1]);
  CHECK_FALSE(pub.publish(big, &why));
  CHECK(why.find("do not fit") != std::string::npos);
  DeviceInfo renamed = d;
  renamed.ibdev = "metaroce9";
  CHECK_FALSE(pub.publish(renamed, &why));
  CHECK(fs::exists(t.path / "sysfs/class/infiniband/metaroce0/ports/1/gids/1"));
}

TEST_CASE("two instances share a root with distinct uverbs indexes") {
  TempDir t;
  PublisherOptions o0 = options(t), o1 = options(t);
  o1.uverbs_index = 1;
  SysfsPublisher p0(o0), p1(o1);
  DeviceInfo d0 = sample(), d1 = sample();
  d1.ibdev = "metaroce1";
  std::string why;
  REQUIRE(p0.publish(d0, &why));
  REQUIRE(p1.publish(d1, &why));
  fs::path v = t.path / "sysfs/class/infiniband_verbs";
  CHECK(slurp(v / "uverbs0/ibdev") == "metaroce0\n");
  CHECK(slurp(v / "uverbs1/ibdev") == "metaroce1\n");
  p0.unpublish();
  CHECK_FALSE(fs::exists(v / "uverbs0"));
  CHECK_FALSE(fs::exists(t.path / "sysfs/class/infiniband/metaroce0"));
  CHECK(fs::exists(v / "uverbs1/ibdev"));
  CHECK(fs::exists(t.path / "sysfs/class/infiniband/metaroce1/node_type"));
}

TEST_CASE("dev node: a char device 1:7 that unpublish removes") {
  TempDir t;
  PublisherOptions o = options(t);
  SysfsPublisher pub(o);
  std::string why;
  REQUIRE_MESSAGE(pub.publish(sample(), &why), why);
  MESSAGE("dev node: " << pub.dev_node_note());
  // Without CAP_MKNOD (not root, or root inside Bazel's sandbox) the mknod
  // part cannot run: the publisher falls back to a symlink to /dev/full.
  if (pub.dev_node_note() != "mknod c 1:7")
    MESSAGE("mknod part skipped (no CAP_MKNOD here, euid " << geteuid() << "): checked the /dev/full symlink");
  struct stat st {};
  REQUIRE(stat(pub.dev_node().c_str(), &st) == 0);  // follows a symlink
  CHECK(S_ISCHR(st.st_mode));
  CHECK(major(st.st_rdev) == 1);
  CHECK(minor(st.st_rdev) == 7);
  pub.unpublish();
  struct stat lst {};
  CHECK(lstat(pub.dev_node().c_str(), &lst) != 0);
}
