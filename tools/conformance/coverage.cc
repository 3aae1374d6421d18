#include "tools/conformance/coverage.h"

#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace metaroce::conform {

namespace {

// A block: one paragraph, list item or table row (a sentence never spans two).
struct Block {
  std::string text;
  int line;
};

bool starts_block(const std::string& l) {
  return std::regex_search(l, std::regex(R"(^\s*([-*]|\d+\.)\s)")) || (!l.empty() && l[0] == '|');
}

// The numbered section a heading opens ("6.4", "3"), "" for other headings.
std::string heading_section(const std::string& l) {
  std::smatch m;
  if (std::regex_search(l, m, std::regex(R"(^#{2,3} (\d+(\.\d+)?)\.? )"))) return m[1];
  return "";
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  s = std::regex_replace(s, std::regex(R"(\s+)"), " ");
  s = std::regex_replace(s, std::regex(R"(^[\s|*-]+)"), "");
  return s;
}

struct Parser {
  SpecTags out;
  std::string file;
  std::string section;
  std::map<std::string, int> next_n;  // per section
  std::set<std::string> seen;

  void error(int line, const std::string& what) {
    out.errors.push_back(file + ":" + std::to_string(line) + ": " + what);
  }

  void block(const Block& b) {
    if (section.empty()) return;
    static const std::regex token(R"(\b(MUST NOT|MUST|SHOULD NOT|SHOULD)\b|\[R[^\]]*\])");
    static const std::regex good(R"(\[R(\d+(?:\.\d+)?)-(\d+)\])");
    size_t from = 0, first_kw = std::string::npos;
    bool must = false, keyword = false;
    for (std::sregex_iterator it(b.text.begin(), b.text.end(), token), end; it != end; ++it) {
      std::string t = it->str();
      if (t[0] != '[') {
        if (!keyword) first_kw = static_cast<size_t>(it->position());
        keyword = true;
        must = must || t.rfind("MUST", 0) == 0;
        continue;
      }
      std::smatch m;
      // The sentence: from the last full stop before its first keyword.
      size_t start = from;
      if (keyword) {
        size_t stop = b.text.rfind(". ", first_kw);
        if (stop != std::string::npos && stop >= from) start = stop + 2;
      }
      std::string sentence = one_line(b.text.substr(start, it->position() - start));
      from = it->position() + it->length();
      // A keyword whose sentence ends before this tag is an untagged one.
      static const std::regex stop(R"(\.\s+[A-Z*`(])");
      std::smatch cut;
      std::string after = keyword ? b.text.substr(first_kw, it->position() - first_kw) : "";
      if (keyword && std::regex_search(after, cut, stop)) {
        error(b.line, "MUST/SHOULD without a tag: \"" + one_line(after.substr(0, cut.position())).substr(0, 90) +
                          "\" (the sentence ends before " + t + ")");
      }
      if (!std::regex_match(t, m, good)) {
        error(b.line, "malformed tag " + t + " (expected [R<section>-<n>])");
      } else if (!keyword) {
        error(b.line, "tag " + t + " on a sentence without MUST or SHOULD");
      } else {
        add(b.line, m[1], std::stoi(m[2]), must ? Level::kMust : Level::kShould, sentence);
      }
      must = keyword = false;
    }
    if (keyword)
      error(b.line, "MUST/SHOULD without a tag: \"" + one_line(b.text.substr(from)).substr(0, 90) + "\"");
  }

  void add(int line, const std::string& sec, int n, Level level, const std::string& text) {
    std::string tag = "R" + sec + "-" + std::to_string(n);
    if (!seen.insert(tag).second) return error(line, "duplicate tag [" + tag + "]");
    if (sec != section)
      error(line, "tag [" + tag + "] in section " + section + " (its number must be the section's)");
    int& want = next_n[sec];
    if (n != ++want) error(line, "tag [" + tag + "]: expected n = " + std::to_string(want));
    want = n;
    out.reqs.push_back({tag, sec, level, text, line});
  }
};

}  // namespace

SpecTags extract_tags(const std::string& md, const std::string& file_name) {
  Parser p;
  p.file = file_name;
  std::istringstream in(md);
  std::string l;
  int n = 0;
  bool code = false;
  Block cur{"", 0};
  auto flush = [&] {
    if (!cur.text.empty()) p.block(cur);
    cur = {"", 0};
  };
  while (std::getline(in, l)) {
    ++n;
    if (l.rfind("```", 0) == 0) {
      flush();
      code = !code;
      continue;
    }
    if (code) continue;
    if (l.rfind("#", 0) == 0) {
      flush();
      if (l.rfind("## ", 0) == 0 || l.rfind("### ", 0) == 0) p.section = heading_section(l);
      continue;
    }
    if (l.find_first_not_of(" \t") == std::string::npos || starts_block(l) ||
        (!cur.text.empty() && cur.text[0] == '|')) {
      flush();
    }
    if (l.find_first_not_of(" \t") == std::string::npos) continue;
    if (cur.text.empty()) cur.line = n;
    cur.text += l + "\n";
  }
  flush();
  return p.out;
}

namespace {

std::string cell(std::string s) {
  s = std::regex_replace(s, std::regex(R"(\|)"), "\\|");
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  return s;
}

}  // namespace

Coverage build_coverage(const SpecTags& spec, const std::vector<Case>& cases,
                        const std::vector<Unobservable>& unobservable) {
  Coverage c;
  c.errors = spec.errors;
  std::map<std::string, std::vector<std::string>> by_tag;
  std::map<std::string, std::string> why_not;
  std::set<std::string> tags;
  for (const Requirement& r : spec.reqs) tags.insert(r.tag);
  for (const Case& k : cases) {
    if (k.cites.empty()) c.errors.push_back("case " + k.id + " cites no requirement");
    for (const std::string& t : k.cites) {
      if (!tags.count(t)) c.errors.push_back("case " + k.id + " cites " + t + ", which docs/protocol.md does not have");
      by_tag[t].push_back(k.id);
    }
  }
  for (const Unobservable& u : unobservable) {
    if (!tags.count(u.tag)) c.errors.push_back("unobservable " + u.tag + " is not a tag of docs/protocol.md");
    why_not[u.tag] = u.reason;
  }
  std::ostringstream md;
  int must = 0, must_cased = 0, must_unobs = 0, should = 0, should_cased = 0;
  std::ostringstream rows;
  for (const Requirement& r : spec.reqs) {
    const auto& ids = by_tag[r.tag];
    std::string cases_cell;
    for (const std::string& id : ids) cases_cell += (cases_cell.empty() ? "" : ", ") + ("`" + id + "`");
    bool is_must = r.level == Level::kMust;
    (is_must ? must : should)++;
    if (!ids.empty()) (is_must ? must_cased : should_cased)++;
    if (ids.empty() && why_not.count(r.tag)) {
      cases_cell = "not observable on the wire or through verbs: " + why_not[r.tag];
      if (is_must) must_unobs++;
    } else if (ids.empty()) {
      cases_cell = "—";
      if (is_must) c.errors.push_back(r.tag + " (MUST, line " + std::to_string(r.line) + ") has no case");
    }
    rows << "| " << r.tag << " | " << to_string(r.level) << " | " << cell(r.text) << " | " << cell(cases_cell)
         << " |\n";
  }
  md << "# Conformance coverage\n\n"
     << "Generated by `tools/conformance/gen-coverage` from the requirement tags of\n"
     << "[protocol.md](protocol.md) and the cases of `tests/conformance/`; do not edit.\n"
     << "`bazel test //tests/conformance:coverage_test` fails when a MUST has no case, a tag is\n"
     << "malformed or duplicated, a case cites a tag that does not exist, or this file is stale.\n"
     << "How to run the suite: [conformance.md](conformance.md).\n\n"
     << "MUST: " << must << " requirements, " << must_cased << " tested by a case, " << must_unobs
     << " not observable black box. SHOULD: " << should << " requirements, " << should_cased
     << " tested by a case. Cases: " << cases.size() << ".\n\n"
     << "| tag | level | requirement | cases |\n|---|---|---|---|\n"
     << rows.str();
  c.markdown = md.str();
  return c;
}

}  // namespace metaroce::conform
