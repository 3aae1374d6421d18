#include "firmware-model/hw/probe.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "firmware-model/hw/hw_abi.h"

namespace metaroce::hw {

namespace {

// "0x4d52\n" -> 0x4d52; -1 when unreadable.
long read_hex(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s)) return -1;
  try {
    return std::stol(s, nullptr, 16);
  } catch (...) {
    return -1;
  }
}

std::string hex4(long v) {
  std::ostringstream o;
  o << "0x" << std::hex << v;
  return o.str();
}

}  // namespace

int probe_at(const std::string& sysfs_root, const std::string& netdev, std::string* why) {
  const std::string no_hw = "no MetaRoCE offload hardware on " + netdev +
                            " (PCI vendor/device not found; the hw backend needs partner "
                            "silicon — use --backend soft)";
  if (netdev.empty() || netdev.find('/') != std::string::npos) {
    *why = no_hw;
    return ENODEV;
  }
  std::string dev = sysfs_root + "/class/net/" + netdev + "/device/";
  long vendor = read_hex(dev + "vendor");
  long device = read_hex(dev + "device");
  if (vendor != MROCE_HW_PCI_VENDOR || device != MROCE_HW_PCI_DEVICE) {
    *why = no_hw;
    if (vendor >= 0) *why += "; " + netdev + " is PCI " + hex4(vendor) + ":" + hex4(device);
    return ENODEV;
  }
  *why = "MetaRoCE offload hardware found on " + netdev +
         ", but this build has no BAR0 mapping (vfio-pci) for it yet; use --backend soft";
  return EOPNOTSUPP;
}

int probe(const std::string& netdev, std::string* why) { return probe_at("/sys", netdev, why); }

}  // namespace metaroce::hw
