#include "tools/ctl/link.h"

#include <fcntl.h>
#include <net/if.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace metaroce::ctl {

namespace fs = std::filesystem;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool executable(const std::string& p) {
  struct stat st;
  return !p.empty() && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(p.c_str(), X_OK) == 0;
}

std::string log_excerpt(const std::string& log) {
  std::string t = tail_lines(log, 15);
  if (t.empty()) return " (its log " + log + " is empty)";
  return "; last lines of " + log + ":\n" + t;
}

// Waits up to timeout_ms for `done()`; false on timeout.
template <class F>
bool wait_for(int timeout_ms, F done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

// fork + setsid + exec with stdout/stderr to the log. An exec failure is
// reported through a close-on-exec pipe, so "not executable" is an error
// here, not a line in a log nobody reads.
int spawn(const std::vector<std::string>& argv, int log_fd, pid_t* pid, std::string* why) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return errno;
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t child = ::fork();
  if (child < 0) {
    int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    *why = std::string("fork: ") + std::strerror(err);
    return err;
  }
  if (child == 0) {
    ::setsid();
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execv(cargv[0], cargv.data());
    int err = errno;
    if (::write(pipefd[1], &err, sizeof(err)) < 0) {
    }
    ::_exit(127);
  }
  ::close(pipefd[1]);
  int exec_err = 0;
  ssize_t n = ::read(pipefd[0], &exec_err, sizeof(exec_err));
  ::close(pipefd[0]);
  if (n == sizeof(exec_err)) {
    ::waitpid(child, nullptr, 0);
    *why = "cannot execute " + argv[0] + ": " + std::strerror(exec_err);
    return exec_err;
  }
  *pid = child;
  return 0;
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

}  // namespace

LinkPaths link_paths(const std::string& run_dir, const std::string& name) {
  return {run_dir + "/" + name + ".sock", run_dir + "/" + name + ".pid",
          run_dir + "/" + name + ".log"};
}

std::vector<std::string> daemon_command(const std::string& metaroced, const std::string& name,
                                        const std::string& netdev, const std::string& run_dir,
                                        const std::string& sysfs_root,
                                        const std::vector<std::string>& extra) {
  std::vector<std::string> v = {metaroced,    "--netdev",     netdev,
                                "--ibdev",    name,           "--run-dir",
                                run_dir,      "--sysfs-root", sysfs_root,
                                "--pidfile",  link_paths(run_dir, name).pidfile};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

std::string find_metaroced(const std::string& env, const std::string& self_dir,
                           const std::string& path, std::string* why) {
  if (!env.empty()) {
    if (executable(env)) return env;
    *why = "METAROCED=" + env + " is not an executable file";
    return "";
  }
  if (!self_dir.empty() && executable(self_dir + "/metaroced")) return self_dir + "/metaroced";
  // Installed: /usr/bin/metaroce-ctl, /usr/sbin/metaroced (not on every PATH).
  std::string sbin = self_dir + "/../sbin/metaroced";
  if (!self_dir.empty() && executable(sbin)) return sbin;
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (!dir.empty() && executable(dir + "/metaroced")) return dir + "/metaroced";
  }
  *why = "cannot find metaroced: not in $METAROCED, not next to metaroce-ctl (" + self_dir +
         ") nor in its ../sbin, not on PATH";
  return "";
}

std::string tail_lines(const std::string& file, size_t lines) {
  std::ifstream f(file);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(f, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const std::string& l : last) out += "  | " + l + "\n";
  return out;
}

pid_t read_pidfile(const std::string& pidfile) {
  std::ifstream f(pidfile);
  long pid = 0;
  if (!(f >> pid) || pid <= 0 || pid > (1L << 22)) return 0;
  return static_cast<pid_t>(pid);
}

bool is_live_daemon(pid_t pid, const std::string& name) {
  if (pid <= 0) return false;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t p = stat.rfind(')');
  if (p == std::string::npos || p + 2 >= stat.size()) return false;
  char state = stat[p + 2];
  if (state == 'Z' || state == 'X') return false;
  std::string cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  return cmdline.find(std::string("--ibdev\0", 8) + name + std::string("\0", 1)) !=
         std::string::npos;
}

bool socket_listening(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return false;
  std::strcpy(addr.sun_path, path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

int link_add(const LinkAddRequest& r, pid_t* pid, std::string* why) {
  LinkPaths paths = link_paths(r.run_dir, r.name);
  pid_t old = read_pidfile(paths.pidfile);
  if (is_live_daemon(old, r.name) || socket_listening(paths.socket)) {
    *why = r.name + " already exists: a metaroced serves it" +
           (old > 0 ? " (pid " + std::to_string(old) + ")" : "") + " on " + paths.socket;
    return EEXIST;
  }
  if (::if_nametoindex(r.netdev.c_str()) == 0) {
    *why = "no network interface " + r.netdev + " in this network namespace";
    return ENODEV;
  }
  std::error_code ec;
  fs::create_directories(r.run_dir, ec);
  int log_fd = ::open(paths.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    int err = errno;
    *why = "cannot create " + paths.log + ": " + std::strerror(err);
    return err;
  }
  std::vector<std::string> argv =
      daemon_command(r.metaroced, r.name, r.netdev, r.run_dir, r.sysfs_root, r.daemon_args);
  int err = spawn(argv, log_fd, pid, why);
  ::close(log_fd);
  if (err) return err;
  { std::ofstream(paths.pidfile) << *pid << "\n"; }
  const std::string sysfs_dir = r.sysfs_root + "/class/infiniband/" + r.name;
  int status = 0;
  bool died = false;
  bool up = wait_for(r.timeout_ms, [&] {
    if (::waitpid(*pid, &status, WNOHANG) == *pid) return died = true;
    return socket_listening(paths.socket) && fs::exists(sysfs_dir);
  });
  if (up && !died) return 0;
  if (!died) {
    ::kill(*pid, SIGTERM);
    wait_for(2000, [&] { return ::waitpid(*pid, &status, WNOHANG) == *pid; });
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, &status, 0);
    *why = "metaroced for " + r.name + " did not come up within " +
           std::to_string(r.timeout_ms / 1000) + " s (no socket " + paths.socket +
           " or no " + sysfs_dir + "); stopped it" + log_excerpt(paths.log);
    ::unlink(paths.pidfile.c_str());
    return ETIMEDOUT;
  }
  ::unlink(paths.pidfile.c_str());
  *why = "metaroced for " + r.name + " " + exit_text(status) + " during start-up" +
         log_excerpt(paths.log);
  return ECHILD;
}

int link_delete(const std::string& name, const std::string& run_dir, int timeout_ms,
                std::string* why) {
  LinkPaths paths = link_paths(run_dir, name);
  pid_t pid = read_pidfile(paths.pidfile);
  if (!is_live_daemon(pid, name)) {
    if (pid > 0) ::unlink(paths.pidfile.c_str());  // stale: its daemon is gone
    if (socket_listening(paths.socket)) {
      *why = "a metaroced serves " + name + " on " + paths.socket + " but " + paths.pidfile +
             " does not name it (not started by metaroce-ctl link add?): stop it yourself";
      return ESRCH;
    }
    *why = "no link " + name + ": no metaroced " +
           (pid > 0 ? "(pid " + std::to_string(pid) + " in " + paths.pidfile + " is gone) "
                    : "started by link add ") +
           "and no one listens on " + paths.socket;
    return ENOENT;
  }
  if (::kill(pid, SIGTERM) != 0) {
    int err = errno;
    *why = "cannot signal metaroced pid " + std::to_string(pid) + ": " + std::strerror(err);
    return err;
  }
  if (!wait_for(timeout_ms, [&] { return !is_live_daemon(pid, name); })) {
    *why = "metaroced pid " + std::to_string(pid) + " did not exit within " +
           std::to_string(timeout_ms / 1000) + " s of SIGTERM (kill -9 " + std::to_string(pid) +
           " if it is stuck)" + log_excerpt(paths.log);
    return ETIMEDOUT;
  }
  ::unlink(paths.pidfile.c_str());
  if (socket_listening(paths.socket)) {
    *why = "metaroced pid " + std::to_string(pid) + " exited but someone still listens on " +
           paths.socket;
    return EBUSY;
  }
  return 0;
}

}  // namespace metaroce::ctl
