// Requirement tags of docs/protocol.md and the coverage table.
//
// Every sentence of a numbered section that holds MUST, MUST NOT, SHOULD or
// SHOULD NOT ends with a tag [R<section>-<n>]: <section> the number of the
// nearest numbered heading ("6.4", or "3" for text under "## 3."), n
// counting from 1 within it. A tag's level is the strongest keyword of its
// sentence. Sections added later (13, 14, ...) are read the same way.
#pragma once

#include <string>
#include <vector>

#include "tools/conformance/suite.h"

namespace metaroce::conform {

struct Requirement {
  std::string tag;      // "R6.4-2"
  std::string section;  // "6.4"
  Level level;
  std::string text;     // the sentence, one line
  int line = 0;
};

struct SpecTags {
  std::vector<Requirement> reqs;
  std::vector<std::string> errors;  // "protocol.md:71: MUST without a tag: ..."
};

SpecTags extract_tags(const std::string& markdown, const std::string& file_name);

// The table (docs/conformance-coverage.md) and the problems that make the
// coverage test fail: tag errors, MUSTs with no case (and no recorded
// reason), citations of tags that do not exist.
struct Coverage {
  std::string markdown;
  std::vector<std::string> errors;
};
Coverage build_coverage(const SpecTags& spec, const std::vector<Case>& cases,
                        const std::vector<Unobservable>& unobservable);

}  // namespace metaroce::conform
