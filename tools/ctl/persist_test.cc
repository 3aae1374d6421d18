#include "tools/ctl/persist.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "tools/ctl/args.h"

namespace metaroce::ctl {
namespace {

TEST_CASE("persist__daemon_options_become_config_lines") {
  std::string text, why;
  REQUIRE(config_text("metaroce2", {"--paths", "8", "-v", "--io", "packet"}, &text, &why));
  CHECK(text.substr(text.find("ibdev")) == "ibdev metaroce2\npaths 8\nv\nio packet\n");
  CHECK_FALSE(config_text("metaroce2", {"paths"}, &text, &why));
  CHECK(why == "'paths' is not a metaroced option (options start with -)");
  CHECK_FALSE(config_text("metaroce2", {"--config", "/x"}, &text, &why));
  CHECK(why == "--persist writes the config itself; drop --config");
  CHECK_FALSE(config_text("metaroce2", {"--cc", "a#b"}, &text, &why));
  CHECK(why == "the value 'a#b' of --cc cannot be written to a config file");
}

TEST_CASE("persist__written_atomically_under_the_config_dir") {
  char dir[] = "/tmp/metaroce-persist-XXXXXX";
  REQUIRE(mkdtemp(dir));
  std::string why;
  REQUIRE(write_config(std::string(dir) + "/etc", "eth1", "ibdev metaroce0\n", &why) == 0);
  std::ifstream f(std::string(dir) + "/etc/eth1.conf");
  std::stringstream ss;
  ss << f.rdbuf();
  CHECK(ss.str() == "ibdev metaroce0\n");
  CHECK(access((std::string(dir) + "/etc/eth1.conf.tmp").c_str(), F_OK) != 0);
  unlink((std::string(dir) + "/etc/eth1.conf").c_str());
  rmdir((std::string(dir) + "/etc").c_str());
  rmdir(dir);
}

TEST_CASE("persist__parsed_after_link_add_and_config_dir_from_env") {
  Command c;
  std::string err;
  REQUIRE(parse_command_line({"link", "add", "metaroce1", "netdev", "eth1", "--paths", "2",
                              "--persist"},
                             Env{"", "", "/tmp/conf"}, &c, &err));
  CHECK(c.persist);
  CHECK(c.daemon_args == std::vector<std::string>{"--paths", "2"});
  CHECK(c.config_dir == "/tmp/conf");
  REQUIRE(parse_command_line({"--config-dir", "/x", "link"}, Env{}, &c, &err));
  CHECK(c.config_dir == "/x");
  CHECK_FALSE(c.persist);
}

TEST_CASE("persist__no_unit_installed_means_unavailable") {
  CHECK(systemd_state("/nonexistent/metaroced@.service") == Systemd::kUnavailable);
}

}  // namespace
}  // namespace metaroce::ctl
