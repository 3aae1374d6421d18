// The suite's report: per case pass/fail/skip with the packets that
// differed, as JSON and as a readable table, and the conformance level.
#pragma once

#include <string>
#include <vector>

#include "tools/conformance/suite.h"

namespace metaroce::conform {

struct CaseResult {
  const Case* c;
  Outcome out;
  double seconds = 0;
};

struct Tally {
  int pass = 0, fail = 0, skip = 0;
  int total() const { return pass + fail + skip; }
};

struct Summary {
  Tally must, should;
  // "full": every MUST and SHOULD case passed; "must": every MUST case
  // passed; "must-incomplete": no MUST case failed but some were skipped;
  // "none": a MUST case failed.
  std::string level;
};

Summary summarize(const std::vector<CaseResult>& results);
std::string report_json(const std::string& dut, const Setup& s, const std::vector<CaseResult>& results);
std::string report_table(const std::string& dut, const std::vector<CaseResult>& results);

}  // namespace metaroce::conform
