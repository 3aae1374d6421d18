#include "tools/ctl/sysfs.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace metaroce::ctl {

namespace fs = std::filesystem;

namespace {

// First line of a file without its newline; "" if unreadable.
std::string read_line(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  if (f) std::getline(f, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' '))
    line.pop_back();
  return line;
}

// "4: ACTIVE" -> "ACTIVE"
std::string after_colon(const std::string& s) {
  size_t p = s.find(": ");
  return p == std::string::npos ? s : s.substr(p + 2);
}

std::vector<int> numbered_entries(const fs::path& dir) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!n.empty() && n.find_first_not_of("0123456789") == std::string::npos)
      out.push_back(std::stoi(n));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void read_port(const fs::path& port, DeviceInfo* out) {
  out->state = after_colon(read_line(port / "state"));
  out->phys_state = after_colon(read_line(port / "phys_state"));
  for (int i : numbered_entries(port / "gids")) {
    std::string raw = read_line(port / "gids" / std::to_string(i));
    std::string ndev = read_line(port / "gid_attrs" / "ndevs" / std::to_string(i));
    if (out->netdev.empty()) out->netdev = ndev;
    if (gid_is_zero(raw)) continue;
    out->gids.push_back(
        {i, raw, gid_to_ip(raw), read_line(port / "gid_attrs" / "types" / std::to_string(i))});
  }
}

}  // namespace

bool gid_is_zero(const std::string& raw) {
  return raw.find_first_not_of("0:") == std::string::npos;
}

std::string gid_to_ip(const std::string& raw) {
  std::string hex;
  for (char c : raw) {
    if (c != ':') hex.push_back(c);
  }
  if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    return "";
  uint8_t b[16];
  for (int i = 0; i < 16; i++) b[i] = static_cast<uint8_t>(std::stoi(hex.substr(i * 2, 2), nullptr, 16));
  char text[INET6_ADDRSTRLEN] = "";
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(b, kMapped, 12) == 0) {
    inet_ntop(AF_INET, b + 12, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, b, text, sizeof(text));
  }
  return text;
}

int list_devices(const std::string& root, std::vector<std::string>* names, std::string* why) {
  names->clear();
  fs::path dir = fs::path(root) / "class" / "infiniband";
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec.value() == ENOENT) return 0;  // nothing published yet: no devices
    *why = "cannot read " + dir.string() + ": " + ec.message();
    return ec.value();
  }
  for (const auto& e : it) names->push_back(e.path().filename().string());
  std::sort(names->begin(), names->end());
  return 0;
}

std::string socket_path(const std::string& root, const std::string& run_dir,
                        const std::string& name) {
  std::string line =
      read_line(fs::path(root) / "class" / "infiniband" / name / "metaroce_socket");
  if (!line.empty() && line[0] == '/') return line;
  return run_dir + "/" + name + ".sock";
}

int read_device(const std::string& root, const std::string& run_dir, const std::string& name,
                DeviceInfo* out, std::string* why) {
  *out = DeviceInfo{};
  fs::path dir = fs::path(root) / "class" / "infiniband" / name;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    *why = "no device " + name + " under " + (fs::path(root) / "class" / "infiniband").string() +
           " (is its metaroced running? --sysfs-root or SYSFS_PATH selects another tree)";
    return ENOENT;
  }
  out->name = name;
  out->node_type = read_line(dir / "node_type");
  out->node_guid = read_line(dir / "node_guid");
  out->fw_ver = read_line(dir / "fw_ver");
  read_port(dir / "ports" / "1", out);
  out->socket_path = socket_path(root, run_dir, name);
  return 0;
}

}  // namespace metaroce::ctl
