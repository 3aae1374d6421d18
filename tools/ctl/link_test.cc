#include "tools/ctl/link.h"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

namespace metaroce::ctl {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/ctl-link-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string script(const std::string& name, const std::string& body) {
    std::string p = path + "/" + name;
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    chmod(p.c_str(), 0755);
    return p;
  }
  std::string path;
};

TEST_CASE("daemon_command__ctl_owned_options_then_the_users") {
  CHECK(daemon_command("/bin/metaroced", "metaroce2", "veth-c", "/run/m", "/run/m/sysfs",
                       {"--io", "packet"}) ==
        std::vector<std::string>{"/bin/metaroced", "--netdev", "veth-c", "--ibdev", "metaroce2",
                                 "--run-dir", "/run/m", "--sysfs-root", "/run/m/sysfs",
                                 "--pidfile", "/run/m/metaroce2.pid", "--io", "packet"});
}

TEST_CASE("find_metaroced__env_then_self_dir_then_path") {
  TempDir a, b;
  std::string why;
  std::string in_b = b.script("metaroced", "exit 0");
  CHECK(find_metaroced("", "/nonexistent", "/x:" + b.path, &why) == in_b);
  std::string in_a = a.script("metaroced", "exit 0");
  CHECK(find_metaroced("", a.path, b.path, &why) == in_a);
  CHECK(find_metaroced(in_b, a.path, b.path, &why) == in_b);
  CHECK(find_metaroced(a.path + "/nope", a.path, b.path, &why) == "");
  CHECK(why == "METAROCED=" + a.path + "/nope is not an executable file");
  CHECK(find_metaroced("", "/nonexistent", "/x", &why) == "");
  CHECK(why ==
        "cannot find metaroced: not in $METAROCED, not next to metaroce-ctl (/nonexistent) nor in "
        "its ../sbin, not on PATH");
}

TEST_CASE("find_metaroced__installed_layout_bin_and_sbin") {
  TempDir d;
  std::string bin = d.path + "/bin", sbin = d.path + "/sbin";
  REQUIRE(mkdir(bin.c_str(), 0755) == 0);
  REQUIRE(mkdir(sbin.c_str(), 0755) == 0);
  { std::ofstream(sbin + "/metaroced") << "#!/bin/sh\n"; }
  REQUIRE(chmod((sbin + "/metaroced").c_str(), 0755) == 0);
  std::string why;
  CHECK(find_metaroced("", bin, "/nonexistent", &why) == bin + "/../sbin/metaroced");
}

TEST_CASE("tail_lines__last_n_indented") {
  TempDir d;
  std::ofstream(d.path + "/log") << "one\ntwo\nthree\n";
  CHECK(tail_lines(d.path + "/log", 2) == "  | two\n  | three\n");
  CHECK(tail_lines(d.path + "/missing", 2) == "");
}

TEST_CASE("read_pidfile__garbage_is_zero") {
  TempDir d;
  std::ofstream(d.path + "/p") << "1234\n";
  CHECK(read_pidfile(d.path + "/p") == 1234);
  std::ofstream(d.path + "/q") << "abc\n";
  CHECK(read_pidfile(d.path + "/q") == 0);
  CHECK(read_pidfile(d.path + "/none") == 0);
}

TEST_CASE("is_live_daemon__our_own_pid_is_not_a_metaroced") {
  CHECK_FALSE(is_live_daemon(getpid(), "metaroce0"));
  CHECK_FALSE(is_live_daemon(0, "metaroce0"));
}

TEST_CASE("link_add__daemon_dying_at_start_reports_status_and_log_tail") {
  TempDir d;
  LinkAddRequest r;
  r.name = "metaroce7";
  r.netdev = "lo";
  r.run_dir = d.path + "/run";
  r.sysfs_root = d.path + "/sysfs";
  r.metaroced = d.script("metaroced", "echo \"metaroced: cannot open $2: boom\" >&2\nexit 3");
  r.timeout_ms = 5000;
  pid_t pid = 0;
  std::string why;
  CHECK(link_add(r, &pid, &why) == ECHILD);
  CHECK(why == "metaroced for metaroce7 exited with status 3 during start-up; last lines of " +
                   r.run_dir + "/metaroce7.log:\n  | metaroced: cannot open lo: boom\n");
  CHECK_FALSE(fs::exists(r.run_dir + "/metaroce7.pid"));
}

TEST_CASE("link_add__timeout_stops_the_daemon") {
  TempDir d;
  LinkAddRequest r;
  r.name = "metaroce7";
  r.netdev = "lo";
  r.run_dir = d.path + "/run";
  r.sysfs_root = d.path + "/sysfs";
  r.metaroced = d.script("metaroced", "echo started\nexec sleep 30");
  r.timeout_ms = 300;
  pid_t pid = 0;
  std::string why;
  CHECK(link_add(r, &pid, &why) == ETIMEDOUT);
  CHECK(why.find("metaroced for metaroce7 did not come up within 0 s") == 0);
  CHECK(why.find("stopped it; last lines of") != std::string::npos);
  CHECK(why.find("  | started\n") != std::string::npos);
  CHECK(kill(pid, 0) != 0);
}

TEST_CASE("link_add__unknown_interface_and_non_executable") {
  TempDir d;
  LinkAddRequest r;
  r.name = "metaroce7";
  r.netdev = "no-such-if0";
  r.run_dir = d.path;
  r.sysfs_root = d.path;
  r.metaroced = d.path + "/missing";
  pid_t pid = 0;
  std::string why;
  CHECK(link_add(r, &pid, &why) == ENODEV);
  CHECK(why == "no network interface no-such-if0 in this network namespace");
  r.netdev = "lo";
  CHECK(link_add(r, &pid, &why) == ENOENT);
  CHECK(why == "cannot execute " + d.path + "/missing: No such file or directory");
}

TEST_CASE("link_delete__nothing_to_delete_and_stale_pidfile") {
  TempDir d;
  std::string why;
  CHECK(link_delete("metaroce7", d.path, 1000, &why) == ENOENT);
  CHECK(why == "no link metaroce7: no metaroced started by link add and no one listens on " +
                   d.path + "/metaroce7.sock");
  std::ofstream(d.path + "/metaroce7.pid") << getpid() << "\n";  // not a metaroced
  CHECK(link_delete("metaroce7", d.path, 1000, &why) == ENOENT);
  CHECK(why.find("is gone") != std::string::npos);
  CHECK_FALSE(fs::exists(d.path + "/metaroce7.pid"));
}

}  // namespace
}  // namespace metaroce::ctl
