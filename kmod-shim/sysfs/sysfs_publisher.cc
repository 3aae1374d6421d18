#include "kmod-shim/sysfs/sysfs_publisher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace metaroce::kmod_shim {
namespace fs = std::filesystem;
namespace {

constexpr unsigned kDevMajor = 1, kDevMinor = 7;  // /dev/full: see abi README

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes content to path atomically (temp file + rename), unless it already
// holds exactly that.
bool write_file(const std::string& path, const std::string& content, std::string* why) {
  if (fs::exists(path) && read_all(path) == content) return true;
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << content;
    if (!f.flush()) {
      if (why) *why = "cannot write " + tmp + ": " + std::strerror(errno);
      return false;
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    if (why) *why = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool make_dirs(const std::string& dir, std::string* why) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    if (why) *why = "cannot create " + dir + ": " + ec.message();
    return false;
  }
  return true;
}

void remove_file_if(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
}

}  // namespace

Gid gid_from_ipv4(uint32_t a) {
  Gid g{};
  g[10] = g[11] = 0xff;
  g[12] = static_cast<uint8_t>(a >> 24);
  g[13] = static_cast<uint8_t>(a >> 16);
  g[14] = static_cast<uint8_t>(a >> 8);
  g[15] = static_cast<uint8_t>(a);
  return g;
}

Gid gid_link_local_from_mac(const std::array<uint8_t, 6>& m) {
  Gid g{};
  g[0] = 0xfe;
  g[1] = 0x80;
  g[8] = m[0] ^ 0x02;  // flip the universal/local bit (EUI-64)
  g[9] = m[1];
  g[10] = m[2];
  g[11] = 0xff;
  g[12] = 0xfe;
  g[13] = m[3];
  g[14] = m[4];
  g[15] = m[5];
  return g;
}

uint64_t guid_from_mac(const std::array<uint8_t, 6>& m) {
  Gid ll = gid_link_local_from_mac(m);
  uint64_t v = 0;
  for (int i = 8; i < 16; ++i) v = v << 8 | ll[i];
  return v;
}

std::string format_gid(const Gid& g) {
  char buf[48];
  snprintf(buf, sizeof(buf), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1],
           g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
  return buf;
}

std::string format_guid(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "%04x:%04x:%04x:%04x", static_cast<unsigned>(v >> 48 & 0xffff),
           static_cast<unsigned>(v >> 32 & 0xffff), static_cast<unsigned>(v >> 16 & 0xffff),
           static_cast<unsigned>(v & 0xffff));
  return buf;
}

SysfsPublisher::SysfsPublisher(PublisherOptions options) : opts_(std::move(options)) {}
SysfsPublisher::~SysfsPublisher() = default;

std::string SysfsPublisher::ibdev_dir() const { return opts_.sysfs_root + "/class/infiniband/" + ibdev_; }
std::string SysfsPublisher::uverbs_dir() const {
  return opts_.sysfs_root + "/class/infiniband_verbs/uverbs" + std::to_string(opts_.uverbs_index);
}
std::string SysfsPublisher::dev_node() const {
  return opts_.dev_dir + "/uverbs" + std::to_string(opts_.uverbs_index);
}

bool SysfsPublisher::write_device_dir(const std::string& dir, const DeviceInfo& d, std::string* why) {
  const std::string port = dir + "/ports/1";
  if (!make_dirs(port + "/gids", why) || !make_dirs(port + "/pkeys", why) ||
      !make_dirs(port + "/gid_attrs/types", why) || !make_dirs(port + "/gid_attrs/ndevs", why))
    return false;
  struct F {
    std::string path, content;
  };
  std::vector<F> files = {
      {dir + "/node_type", "1: CA\n"},
      {dir + "/node_guid", format_guid(d.node_guid) + "\n"},
      {dir + "/sys_image_guid", format_guid(d.sys_image_guid ? d.sys_image_guid : d.node_guid) + "\n"},
      {dir + "/node_desc", d.node_desc + "\n"},
      {dir + "/board_id", d.board_id + "\n"},
      {dir + "/fw_ver", d.fw_ver + "\n"},
      {port + "/state", d.port_active ? "4: ACTIVE\n" : "1: DOWN\n"},
      {port + "/phys_state", d.port_active ? "5: LinkUp\n" : "3: Disabled\n"},
      {port + "/link_layer", "Ethernet\n"},
      {port + "/rate", d.rate + "\n"},
      {port + "/lid", "0x0\n"},
      {port + "/sm_lid", "0x0\n"},
      {port + "/lid_mask_count", "0\n"},
      {port + "/sm_sl", "0\n"},
      {port + "/cap_mask", "0x00010000\n"},
      {port + "/pkeys/0", "0xffff\n"},
  };
  for (const F& f : files)
    if (!write_file(f.path, f.content, why)) return false;
  for (uint32_t i = 0; i < opts_.gid_table_len; ++i) {
    const std::string idx = std::to_string(i);
    const bool used = i < d.gids.size() && d.gids[i].gid != Gid{};
    const Gid g = used ? d.gids[i].gid : Gid{};
    const bool v1 = used && d.gids[i].type == GidType::kRoceV1;
    if (!write_file(port + "/gids/" + idx, format_gid(g) + "\n", why) ||
        !write_file(port + "/gid_attrs/types/" + idx, v1 ? "IB/RoCE v1\n" : "RoCE v2\n", why))
      return false;
    if (!used || d.gids[i].ndev.empty()) remove_file_if(port + "/gid_attrs/ndevs/" + idx);
    else if (!write_file(port + "/gid_attrs/ndevs/" + idx, d.gids[i].ndev + "\n", why)) return false;
  }
  return write_device_link(dir, d.netdev, why);
}

// device: the netdev's parent (a symlink, as the kernel links an RDMA
// device to its PCI function), or a directory with only net/<netdev> for a
// virtual netdev. Replaced whenever what it should be changes.
bool SysfsPublisher::write_device_link(const std::string& dir, const std::string& netdev, std::string* why) {
  const fs::path dev = fs::path(dir) / "device";
  std::error_code ec;
  if (netdev.empty()) {
    fs::remove_all(dev, ec);
    return true;
  }
  const fs::path net_entry = fs::path(opts_.host_sysfs) / "class/net" / netdev;
  const fs::path parent = fs::canonical(net_entry / "device", ec);
  if (!ec) {
    if (fs::is_symlink(fs::symlink_status(dev)) && fs::read_symlink(dev, ec) == parent) return true;
    fs::remove_all(dev, ec);
    fs::create_directory_symlink(parent, dev, ec);
  } else {
    const fs::path link = dev / "net" / netdev;
    if (fs::is_symlink(fs::symlink_status(link)) && fs::read_symlink(link, ec) == net_entry) return true;
    fs::remove_all(dev, ec);
    if (!make_dirs((dev / "net").string(), why)) return false;
    fs::create_directory_symlink(net_entry, link, ec);
  }
  if (ec) {
    if (why) *why = "cannot link " + dev.string() + " to " + netdev + ": " + ec.message();
    return false;
  }
  return true;
}

bool SysfsPublisher::write_uverbs_dir(const std::string& dir, const DeviceInfo& d, std::string* why) {
  if (!make_dirs(dir, why)) return false;
  char dev[32];
  snprintf(dev, sizeof(dev), "%u:%u\n", kDevMajor, kDevMinor);
  return write_file(dir + "/ibdev", d.ibdev + "\n", why) && write_file(dir + "/dev", dev, why) &&
         write_file(dir + "/abi_version", std::to_string(opts_.abi_version) + "\n", why);
}

bool SysfsPublisher::make_dev_node(std::string* why) {
  const std::string node = dev_node();
  struct stat st {};
  if (stat(node.c_str(), &st) == 0) {
    if (S_ISCHR(st.st_mode) && major(st.st_rdev) == kDevMajor && minor(st.st_rdev) == kDevMinor) {
      dev_note_ = "existing char 1:7 node kept";
      return true;
    }
    if (why) *why = node + " exists and is not char 1:7: remove it or pick another uverbs index";
    return false;
  }
  if (!make_dirs(opts_.dev_dir, why)) return false;
  if (opts_.make_dev_node &&
      mknod(node.c_str(), S_IFCHR | 0666, makedev(kDevMajor, kDevMinor)) == 0) {
    chmod(node.c_str(), 0666);  // umask
    dev_note_ = "mknod c 1:7";
    own_dev_node_ = true;
    return true;
  }
  int err = errno;
  // Without CAP_MKNOD: a symlink to /dev/full stats as the same char 1:7.
  if (symlink("/dev/full", node.c_str()) == 0) {
    dev_note_ = opts_.make_dev_node ? std::string("symlink to /dev/full (mknod: ") + std::strerror(err) + ")"
                                    : "symlink to /dev/full";
    own_dev_node_ = true;
    return true;
  }
  if (why) *why = "cannot create " + node + ": " + std::strerror(errno) + " (run the daemon as root)";
  return false;
}

// Moves the directory built at tmp to final. A tree left by a daemon that
// died is exchanged atomically (RENAME_EXCHANGE), then removed: a reader
// (a program running under metaroce-run across a daemon restart) sees the
// old tree or the new one, never a half-deleted one.
static bool swap_in(const std::string& tmp, const std::string& final_dir, std::string* why) {
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    return true;
  }
  if (errno != ENOENT && errno != EINVAL) {  // EINVAL: no exchange on this file system
    if (why) *why = "cannot exchange " + tmp + " with " + final_dir + ": " + std::strerror(errno);
    return false;
  }
  std::error_code ec;
  fs::remove_all(final_dir, ec);
  if (rename(tmp.c_str(), final_dir.c_str()) != 0) {
    if (why) *why = "cannot rename " + tmp + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool SysfsPublisher::publish(const DeviceInfo& info, std::string* why) {
  if (info.gids.size() > opts_.gid_table_len) {
    if (why) *why = std::to_string(info.gids.size()) + " GIDs do not fit the table of " +
                    std::to_string(opts_.gid_table_len);
    return false;
  }
  if (published_ && info.ibdev != ibdev_) {
    if (why) *why = "the device name cannot change while published (unpublish first)";
    return false;
  }
  const std::string verbs_root = opts_.sysfs_root + "/class/infiniband_verbs";
  if (!make_dirs(verbs_root, why) || !make_dirs(opts_.sysfs_root + "/class/infiniband", why)) return false;
  if (!write_file(verbs_root + "/abi_version", std::to_string(opts_.abi_version) + "\n", why)) return false;
  ibdev_ = info.ibdev;
  if (published_) return write_device_dir(ibdev_dir(), info, why) && write_uverbs_dir(uverbs_dir(), info, why);

  if (!make_dev_node(why)) return false;
  // First publication: build each directory aside, then rename it in.
  for (const std::string& final_dir : {ibdev_dir(), uverbs_dir()}) {
    const std::string tmp = fs::path(final_dir).parent_path() / ("." + fs::path(final_dir).filename().string() + ".tmp");
    std::error_code ec;
    fs::remove_all(tmp, ec);
    bool ok = final_dir == uverbs_dir() ? write_uverbs_dir(tmp, info, why) : write_device_dir(tmp, info, why);
    if (!ok || !swap_in(tmp, final_dir, why)) return false;
  }
  published_ = true;
  return true;
}

void SysfsPublisher::unpublish() {
  std::error_code ec;
  fs::remove_all(uverbs_dir(), ec);  // discovery starts here: remove it first
  if (!ibdev_.empty()) fs::remove_all(ibdev_dir(), ec);
  if (own_dev_node_) fs::remove(dev_node(), ec);
  own_dev_node_ = false;
  published_ = false;
}

}  // namespace metaroce::kmod_shim
