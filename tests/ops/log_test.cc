// firmware-model/daemon/log.cc: when stderr is the journal, and what a
// line looks like there and elsewhere.
#include "firmware-model/daemon/log.h"

#include <doctest/doctest.h>

namespace metaroce::daemon {
namespace {

TEST_CASE("journal_stream_matches__only_stderrs_own_dev_and_ino") {
  CHECK(journal_stream_matches("2049:131077", 2049, 131077));
  CHECK_FALSE(journal_stream_matches(nullptr, 2049, 131077));        // not set
  CHECK_FALSE(journal_stream_matches("2049:131078", 2049, 131077));  // inherited, stderr moved
  CHECK_FALSE(journal_stream_matches("2050:131077", 2049, 131077));
  for (const char* bad : {"", ":", "2049", "2049:", ":131077", "2049:131077x", "x2049:131077",
                          "-2049:131077", "2049:-131077", "2049: 131077", "2049:131077:1",
                          "99999999999999999999999:131077"}) {
    INFO(bad);
    CHECK_FALSE(journal_stream_matches(bad, 2049, 131077));
  }
  CHECK(journal_stream_matches("18446744073709551615:0", ~uint64_t{0}, 0));
}

TEST_CASE("sd_priority__err_warning_info_debug") {
  CHECK(sd_priority(LogLevel::kError) == 3);
  CHECK(sd_priority(LogLevel::kWarn) == 4);
  CHECK(sd_priority(LogLevel::kInfo) == 6);
  CHECK(sd_priority(LogLevel::kDebug) == 7);
}

TEST_CASE("format_log__plain_and_journal") {
  CHECK(format_log(LogLevel::kInfo, "metaroce0 up on eth1", false) ==
        "metaroced: metaroce0 up on eth1\n");
  CHECK(format_log(LogLevel::kError, "cannot watch eth1: No such device", true) ==
        "<3>cannot watch eth1: No such device\n");
  CHECK(format_log(LogLevel::kWarn, "port DOWN", true) == "<4>port DOWN\n");
  CHECK(format_log(LogLevel::kDebug, "client pid 7", true) == "<7>client pid 7\n");
  // Every line of a multi-line message carries the prefix (the journal
  // stream splits at newlines), and a trailing newline adds no empty line.
  CHECK(format_log(LogLevel::kWarn, "a\nb", true) == "<4>a\n<4>b\n");
  CHECK(format_log(LogLevel::kWarn, "a\n", true) == "<4>a\n");
  CHECK(format_log(LogLevel::kInfo, "a\nb", false) == "metaroced: a\nmetaroced: b\n");
  CHECK(format_log(LogLevel::kInfo, "", false) == "metaroced: \n");
}

}  // namespace
}  // namespace metaroce::daemon
