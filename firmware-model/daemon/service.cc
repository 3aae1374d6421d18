#include "firmware-model/daemon/service.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "firmware-model/daemon/options.h"

namespace metaroce::daemon {

namespace {

constexpr size_t kMaxConfigLines = 256;
constexpr size_t kMaxConfigLine = 512;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// One config line as command-line words, checked by parse_options().
bool config_line_words(const std::string& line, std::vector<std::string>* words,
                       std::string* error) {
  std::istringstream in(line);
  std::string name, value, extra;
  in >> name >> value >> extra;
  if (!extra.empty()) return *error = "'" + name + "' takes one value, got more", false;
  if (name.rfind("-", 0) == 0)
    return *error = "write '" + line.substr(line.find_first_not_of('-')) +
                    "' without the leading dashes", false;
  if (name == "violate")
    return *error = "'violate' cannot be set in a config file: a deliberately broken device "
                    "is a test's choice, given on the command line", false;
  if (name == "netdev" || name == "config")
    return *error = "'" + name + "' cannot be set in a config file: the interface is the "
                                 "file's name (IF.conf, metaroced@IF)", false;
  std::vector<std::string> w = {name == "v" ? "-v" : "--" + name};
  if (!value.empty()) w.push_back(value);
  std::vector<std::string> check = w;
  check.insert(check.end(), {"--netdev", "check"});
  Options scratch;
  bool help = false;
  if (!parse_options(check, &scratch, error, &help)) return false;
  if (help) return *error = "'help' is not a daemon option", false;
  words->insert(words->end(), w.begin(), w.end());
  return true;
}

}  // namespace

bool read_config_file(const std::string& path, std::vector<std::string>* args,
                      std::string* error) {
  std::ifstream f(path);
  if (!f) return *error = "cannot read config file " + path + ": " + std::strerror(errno), false;
  std::string line;
  size_t n = 0;
  while (std::getline(f, line)) {
    if (++n > kMaxConfigLines)
      return *error = path + ": more than " + std::to_string(kMaxConfigLines) + " lines", false;
    if (line.size() > kMaxConfigLine)
      return *error = path + ":" + std::to_string(n) + ": line longer than " +
                      std::to_string(kMaxConfigLine) + " bytes", false;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::string why;
    if (!config_line_words(line, args, &why))
      return *error = path + ":" + std::to_string(n) + ": " + why, false;
  }
  return true;
}

bool expand_config_option(const std::vector<std::string>& args, std::vector<std::string>* out,
                          std::string* error) {
  std::vector<std::string> rest;
  bool seen = false;
  out->clear();
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i] != "--config") {
      rest.push_back(args[i]);
      continue;
    }
    if (i + 1 >= args.size()) return *error = "--config needs a value", false;
    if (seen) return *error = "--config given twice", false;
    seen = true;
    if (!read_config_file(args[++i], out, error)) return false;
  }
  out->insert(out->end(), rest.begin(), rest.end());
  return true;
}

int notify_service_manager(const std::string& state, std::string* why) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (!env || !*env) return 0;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t len = std::strlen(env);
  if ((env[0] != '/' && env[0] != '@') || len >= sizeof(addr.sun_path)) {
    *why = std::string("NOTIFY_SOCKET is not a socket path or @name: '") + env + "'";
    return EINVAL;
  }
  std::memcpy(addr.sun_path, env, len);
  if (env[0] == '@') addr.sun_path[0] = '\0';
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return *why = std::string("socket: ") + std::strerror(errno), errno;
  socklen_t alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  ssize_t n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                     reinterpret_cast<sockaddr*>(&addr), alen);
  int err = n < 0 ? errno : 0;
  close(fd);
  if (err) *why = std::string("cannot notify ") + env + ": " + std::strerror(err);
  return err;
}

int claim_interface(const std::string& netdev, std::string* why) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = "metaroced/" + netdev;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // abstract: leading NUL
  socklen_t alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return *why = std::string("socket: ") + std::strerror(errno), -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), alen) == 0 && listen(fd, 1) == 0) return fd;
  int err = errno;
  close(fd);
  if (err != EADDRINUSE) return *why = "cannot claim " + netdev + ": " + std::strerror(err), -1;
  // Who holds it: the listener's credentials.
  std::string owner = "another metaroced";
  int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ucred cred{};
  socklen_t clen = sizeof(cred);
  if (c >= 0 && connect(c, reinterpret_cast<sockaddr*>(&addr), alen) == 0 &&
      getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 && cred.pid > 0)
    owner = "metaroced pid " + std::to_string(cred.pid);
  if (c >= 0) close(c);
  *why = owner + " already serves " + netdev +
         " in this network namespace (one daemon per interface)";
  return -1;
}

}  // namespace metaroce::daemon
