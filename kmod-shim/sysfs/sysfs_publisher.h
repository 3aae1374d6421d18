// Device publication without kernel RDMA: writes the sysfs-format tree that
// libibverbs 44 reads to discover a device (docs: /work/shared/abi/README.md,
// summarised in docs/packet-io.md "Device publication"), and the
// /dev/infiniband/uverbsN character node it opens (char 1:7, like /dev/full).
//
// Tree written under options.sysfs_root (tools point SYSFS_PATH at it):
//   class/infiniband_verbs/abi_version                  "6"
//   class/infiniband_verbs/uverbsN/{ibdev,dev,abi_version}
//   class/infiniband/<ibdev>/{node_type,node_guid,sys_image_guid,node_desc,
//                             board_id,fw_ver}
//   class/infiniband/<ibdev>/ports/1/{state,phys_state,link_layer,rate,lid,
//       sm_lid,lid_mask_count,sm_sl,cap_mask,pkeys/0,gids/I,
//       gid_attrs/types/I,gid_attrs/ndevs/I}
//   class/infiniband/<ibdev>/device                 the netdev's device (see below)
// gids/I and gid_attrs/types/I exist for every I < gid_table_len: empty
// slots hold the zero GID and the port's one type, "RoCE v2" (UCX and NCCL
// read types/I for every index before they look at the GID, and take a
// missing file for RoCE v1). ndevs/I exists only for populated slots
// (libibverbs resolves it with if_nametoindex).
//
// device, as in the kernel, is where readers (NCCL's topology, UCX) find the
// netdev: device/net/<netdev>. For a netdev with a parent device (a PCI
// NIC), device is a symlink to that parent, exactly as for a hardware RDMA
// device; for a virtual one (veth, bond) it is a directory holding only
// net/<netdev> -> /sys/class/net/<netdev>.
//
// Several daemons (one per network namespace) share /dev and /run: give each
// its own uverbs_index (metaroce0 <-> uverbs0, metaroce1 <-> uverbs1) and
// either its own sysfs_root or the same root (their entries do not collide;
// the shared abi_version file is written identically by all).
//
// Updates are atomic per file (write temp + rename); the first publication
// builds each directory under a temporary name and renames it into place,
// uverbsN last, so a concurrent scan sees either no device or a whole one.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace metaroce::kmod_shim {

using Gid = std::array<uint8_t, 16>;

enum class GidType { kRoceV2, kRoceV1 };

struct GidEntry {
  Gid gid{};
  GidType type = GidType::kRoceV2;
  std::string ndev;  // netdev name (gid_attrs/ndevs/I); empty: file absent
};

struct DeviceInfo {
  std::string ibdev = "metaroce0";
  uint64_t node_guid = 0;       // host order; written "xxxx:xxxx:xxxx:xxxx"
  uint64_t sys_image_guid = 0;
  std::string node_desc = "MetaRoCE soft NIC";
  std::string board_id = "METAROCE-SOFT-0001";
  std::string fw_ver = "1.0.0";
  bool port_active = true;      // state 4: ACTIVE / 1: DOWN
  std::string rate = "25 Gb/sec (1X EDR)";
  std::vector<GidEntry> gids;   // index i = GID index i; at most gid_table_len
  std::string netdev;           // the port's interface: device/net/<netdev>;
                                // empty: no device entry
};

struct PublisherOptions {
  std::string sysfs_root = "/run/metaroce/sysfs";
  std::string dev_dir = "/dev/infiniband";
  uint32_t uverbs_index = 0;
  uint32_t gid_table_len = 16;
  uint32_t abi_version = 6;     // uverbs ABI (libibverbs accepts 3..6)
  bool make_dev_node = true;    // mknod dev_dir/uverbsN c 1 7 (needs root;
                                // otherwise a symlink to /dev/full)
  std::string host_sysfs = "/sys";  // where the netdev's class/net entry is
};

// GID helpers (RoCE v2 conventions, as rxe fills its table).
Gid gid_from_ipv4(uint32_t host_order);              // ::ffff:a.b.c.d
Gid gid_link_local_from_mac(const std::array<uint8_t, 6>& mac);  // fe80::EUI-64
std::string format_gid(const Gid& g);                // kernel sysfs format
std::string format_guid(uint64_t guid);              // "xxxx:xxxx:xxxx:xxxx"
// A node GUID from a MAC, EUI-64 style (as rxe does).
uint64_t guid_from_mac(const std::array<uint8_t, 6>& mac);

class SysfsPublisher {
 public:
  explicit SysfsPublisher(PublisherOptions options);
  ~SysfsPublisher();  // does not unpublish: call unpublish() on clean shutdown
  SysfsPublisher(const SysfsPublisher&) = delete;
  SysfsPublisher& operator=(const SysfsPublisher&) = delete;

  // Creates the tree (first call) or updates what changed (later calls).
  // False with *why set on failure; nothing already published is removed.
  bool publish(const DeviceInfo& info, std::string* why);
  // Removes this device's directories and the dev node it created.
  void unpublish();

  // How the dev node was made: "mknod c 1:7", "symlink to /dev/full", or
  // "skipped: <reason>" (e.g. not root and make_dev_node false).
  const std::string& dev_node_note() const { return dev_note_; }
  std::string ibdev_dir() const;   // <root>/class/infiniband/<ibdev>
  std::string uverbs_dir() const;  // <root>/class/infiniband_verbs/uverbsN
  std::string dev_node() const;    // <dev_dir>/uverbsN

 private:
  bool write_device_dir(const std::string& dir, const DeviceInfo& info, std::string* why);
  bool write_uverbs_dir(const std::string& dir, const DeviceInfo& info, std::string* why);
  bool write_device_link(const std::string& dir, const std::string& netdev, std::string* why);
  bool make_dev_node(std::string* why);

  PublisherOptions opts_;
  std::string ibdev_;      // name published (to remove it again)
  bool published_ = false;
  bool own_dev_node_ = false;
  std::string dev_note_;
};

}  // namespace metaroce::kmod_shim
