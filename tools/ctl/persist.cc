#include "tools/ctl/persist.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace metaroce::ctl {

bool config_text(const std::string& name, const std::vector<std::string>& args,
                 std::string* out, std::string* why) {
  *out = "# metaroced options, written by metaroce-ctl link add --persist\n"
         "# (one per line: the long option without --, then its value)\n"
         "ibdev " + name + "\n";
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-') {
      *why = "'" + a + "' is not a metaroced option (options start with -)";
      return false;
    }
    if (a == "--config") {
      *why = "--persist writes the config itself; drop --config";
      return false;
    }
    std::string line = a.substr(a.find_first_not_of('-'));
    if (line.find_first_of(" \t\n#") != std::string::npos) {
      *why = "'" + a + "' cannot be written to a config file";
      return false;
    }
    if (i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) {
      const std::string& v = args[++i];
      if (v.empty() || v.find_first_of(" \t\n#") != std::string::npos) {
        *why = "the value '" + v + "' of " + a + " cannot be written to a config file";
        return false;
      }
      line += " " + v;
    }
    *out += line + "\n";
  }
  return true;
}

int write_config(const std::string& dir, const std::string& netdev, const std::string& text,
                 std::string* why) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    int err = errno;
    *why = "cannot create " + dir + ": " + std::strerror(err);
    return err;
  }
  std::string path = dir + "/" + netdev + ".conf", tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) {
      *why = "cannot write " + tmp + ": " + std::strerror(errno);
      return EIO;
    }
  }
  chmod(tmp.c_str(), 0644);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    *why = "cannot write " + path + ": " + std::strerror(err);
    return err;
  }
  return 0;
}

Systemd systemd_state(const std::string& unit_file) {
  struct stat st;
  bool have_unit = stat(unit_file.c_str(), &st) == 0;
  bool have_ctl = access("/bin/systemctl", X_OK) == 0 || access("/usr/bin/systemctl", X_OK) == 0;
  if (!have_unit || !have_ctl) return Systemd::kUnavailable;
  // sd_booted(3): systemd is PID 1 when /run/systemd/system/ exists.
  return stat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode) ? Systemd::kRunning
                                                                       : Systemd::kOffline;
}

int systemctl(const std::vector<std::string>& args, std::string* why) {
  std::vector<std::string> argv = {"systemctl"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return *why = std::string("fork: ") + std::strerror(errno), errno;
  if (pid == 0) {
    // Whatever systemctl says ("Created symlink ...") goes to stderr: our
    // stdout carries only metaroce-ctl's own output (with -j, JSON).
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execvp("systemctl", cargv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::string cmd;
  for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  if (rc) *why = "'" + cmd + "' failed (exit " + std::to_string(rc) + ")";
  return rc;
}

}  // namespace metaroce::ctl
