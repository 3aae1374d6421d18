// Finding offload silicon behind a network interface.
#pragma once

#include <string>

namespace metaroce::hw {

// Is `netdev` a port of MetaRoCE offload hardware? Looks at the PCI
// function behind it (<sysfs>/class/net/<netdev>/device/{vendor,device}).
// Returns ENODEV with *why = "no MetaRoCE offload hardware on <netdev>
// (PCI vendor/device not found; the hw backend needs partner silicon —
// use --backend soft)" on hosts without it. When the IDs match, returns
// EOPNOTSUPP: this build cannot map BAR0 (vfio-pci) yet, and says so.
int probe(const std::string& netdev, std::string* why);
// The same with another sysfs root (tests).
int probe_at(const std::string& sysfs_root, const std::string& netdev, std::string* why);

}  // namespace metaroce::hw
