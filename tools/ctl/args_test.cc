#include "tools/ctl/args.h"

#include <doctest/doctest.h>

namespace metaroce::ctl {
namespace {

struct Parsed {
  bool ok;
  Command c;
  std::string error;
};

Parsed parse(std::vector<std::string> args, Env env = {}) {
  Parsed p;
  p.ok = parse_command_line(args, env, &p.c, &p.error);
  return p;
}

TEST_CASE("parse_command_line__no_arguments_is_help") {
  Parsed p = parse({});
  CHECK(p.ok);
  CHECK(p.c.verb == Verb::kHelp);
  CHECK(parse({"-h"}).c.verb == Verb::kHelp);
  CHECK(parse({"dev", "--help"}).c.verb == Verb::kHelp);
}

TEST_CASE("parse_command_line__dev_forms") {
  CHECK(parse({"dev"}).c.verb == Verb::kDevShow);
  CHECK(parse({"dev"}).c.dev.empty());
  Parsed p = parse({"dev", "show", "metaroce3"});
  CHECK(p.ok);
  CHECK(p.c.dev == "metaroce3");
  CHECK(parse({"device", "list"}).c.verb == Verb::kDevShow);
}

TEST_CASE("parse_command_line__dev_errors") {
  CHECK(parse({"dev", "frob"}).error == "unknown dev command 'frob' (known: show)");
  CHECK(parse({"dev", "show", "mlx5_0"}).error ==
        "device names are metaroceN (N a number), got 'mlx5_0'");
  CHECK(parse({"dev", "show", "metaroce0", "metaroce1"}).error ==
        "dev show takes at most one device name");
  CHECK(parse({"nic"}).error == "unknown object 'nic' (known: dev, stat, link, monitor, capture)");
  CHECK(parse({"-x", "dev"}).error == "unknown option '-x'");
}

TEST_CASE("parse_command_line__sysfs_root_and_run_dir_precedence") {
  Parsed d = parse({"dev"});
  CHECK(d.c.sysfs_root == "/run/metaroce/sysfs");
  CHECK(d.c.run_dir == "/run/metaroce");
  Parsed e = parse({"dev"}, Env{"/tmp/sys", "/tmp/run", ""});
  CHECK(e.c.sysfs_root == "/tmp/sys");
  CHECK(e.c.run_dir == "/tmp/run");
  Parsed o = parse({"--sysfs-root", "/x", "dev", "--run-dir", "/y"}, Env{"/tmp/sys", "/tmp/run", ""});
  CHECK(o.c.sysfs_root == "/x");
  CHECK(o.c.run_dir == "/y");
  CHECK(parse({"dev", "--sysfs-root"}).error == "--sysfs-root needs a value");
  CHECK(parse({"--sysfs-root", "", "dev"}).error == "--sysfs-root and --run-dir need a directory");
}

TEST_CASE("parse_command_line__stat") {
  Parsed p = parse({"stat", "metaroce0"});
  CHECK(p.ok);
  CHECK(p.c.verb == Verb::kStat);
  CHECK_FALSE(p.c.has_qp);
  CHECK_FALSE(p.c.all);
  Parsed q = parse({"stat", "-a", "--qp", "17", "metaroce0"});
  CHECK(q.c.has_qp);
  CHECK(q.c.qpn == 17);
  CHECK(q.c.all);
  CHECK(parse({"stat", "show", "metaroce1", "--qp", "all"}).c.qpn == kAllQps);
}

TEST_CASE("parse_command_line__stat_errors") {
  CHECK(parse({"stat"}).error == "stat needs exactly one device name: stat [--qp N] DEV");
  CHECK(parse({"stat", "metaroce0", "metaroce1"}).error ==
        "stat needs exactly one device name: stat [--qp N] DEV");
  CHECK(parse({"stat", "--qp", "x1", "metaroce0"}).error ==
        "--qp expects a QP number or 'all', got 'x1'");
  CHECK(parse({"stat", "--qp", "4294967295", "metaroce0"}).error ==
        "--qp expects a QP number or 'all', got '4294967295'");
  CHECK(parse({"dev", "--qp", "3"}).error == "--qp only applies to stat");
}

TEST_CASE("parse_command_line__link_add_passes_the_tail_to_the_daemon") {
  Parsed p = parse({"--timeout", "3", "link", "add", "metaroce2", "netdev", "veth-c", "--io",
                    "packet", "-v", "-a"});
  REQUIRE(p.ok);
  CHECK(p.c.verb == Verb::kLinkAdd);
  CHECK(p.c.dev == "metaroce2");
  CHECK(p.c.netdev == "veth-c");
  CHECK(p.c.timeout_ms == 3000);
  CHECK_FALSE(p.c.all);  // -a after the interface belongs to the daemon
  CHECK(p.c.daemon_args == std::vector<std::string>{"--io", "packet", "-v", "-a"});
}

TEST_CASE("parse_command_line__link_add_errors") {
  CHECK(parse({"link", "add"}).error == "link add needs a name: link add NAME netdev IF");
  CHECK(parse({"link", "add", "metaroce2"}).error ==
        "link add metaroce2 needs the interface: link add metaroce2 netdev IF");
  CHECK(parse({"link", "add", "metaroce2", "dev", "eth0"}).error ==
        "link add metaroce2 needs the interface: link add metaroce2 netdev IF");
  CHECK(parse({"link", "add", "roce0", "netdev", "eth0"}).error ==
        "device names are metaroceN (N a number), got 'roce0'");
  CHECK(parse({"link", "add", "metaroce2", "netdev", "a/b"}).error ==
        "'a/b' is not a network interface name");
  CHECK(parse({"link", "add", "metaroce2", "netdev", "eth0", "--run-dir", "/x"}).error ==
        "--run-dir is set by metaroce-ctl; use metaroce-ctl's own --run-dir/--sysfs-root");
  CHECK(parse({"--timeout", "0", "link"}).error == "--timeout expects seconds from 1 to 3600, got '0'");
}

TEST_CASE("parse_command_line__link_show_and_delete") {
  CHECK(parse({"link"}).c.verb == Verb::kLinkShow);
  CHECK(parse({"link", "show", "metaroce1"}).c.dev == "metaroce1");
  Parsed d = parse({"link", "del", "metaroce1"});
  CHECK(d.c.verb == Verb::kLinkDelete);
  CHECK(d.c.dev == "metaroce1");
  CHECK(parse({"link", "delete"}).error == "link delete needs exactly one device name");
  CHECK(parse({"link", "up", "metaroce1"}).error ==
        "unknown link command 'up' (known: show, add, delete)");
}

TEST_CASE("valid_device_name") {
  CHECK(valid_device_name("metaroce0"));
  CHECK(valid_device_name("metaroce12"));
  CHECK_FALSE(valid_device_name("metaroce"));
  CHECK_FALSE(valid_device_name("metaroce1a"));
  CHECK_FALSE(valid_device_name("rxe0"));
}

}  // namespace
}  // namespace metaroce::ctl
