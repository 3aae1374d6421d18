// Reading the device tree metaroced publishes in sysfs format
// (<root>/class/infiniband/<dev>/..., the files libibverbs reads; see
// docs/device-abi.md §Discovery).
#pragma once

#include <string>
#include <vector>

namespace metaroce::ctl {

struct Gid {
  int index = 0;
  std::string raw;   // as in the file: "0000:0000:0000:0000:0000:ffff:0a4d:0001"
  std::string ip;    // "10.77.0.1" or an IPv6 text; "" if unparsable
  std::string type;  // gid_attrs/types/I: "RoCE v2"; "" if absent
};

struct DeviceInfo {
  std::string name;
  std::string node_type;   // "1: CA"
  std::string node_guid;   // "0200:5eff:fe00:0001"
  std::string fw_ver;
  std::string state;       // ports/1/state without the number: "ACTIVE"
  std::string phys_state;  // "LinkUp"
  std::string netdev;      // gid_attrs/ndevs/* (first non-empty)
  std::vector<Gid> gids;   // non-zero GIDs only
  std::string socket_path; // metaroce_socket, else <run_dir>/<name>.sock
};

// Device names under <root>/class/infiniband, sorted. Returns 0, or an
// errno with *why saying where it looked.
int list_devices(const std::string& root, std::vector<std::string>* names, std::string* why);

// Reads one device. ENOENT with *why naming the directory when absent.
int read_device(const std::string& root, const std::string& run_dir, const std::string& name,
                DeviceInfo* out, std::string* why);

// The control socket of `name`: the one line of <root>/class/infiniband/
// <name>/metaroce_socket when it holds an absolute path, else
// <run_dir>/<name>.sock (the same rule as the provider's).
std::string socket_path(const std::string& root, const std::string& run_dir,
                        const std::string& name);

// "0000:...:ffff:0a4d:0001" -> "10.77.0.1"; "" when the text is no GID.
std::string gid_to_ip(const std::string& raw);
bool gid_is_zero(const std::string& raw);

}  // namespace metaroce::ctl
