// Which rule of docs/protocol.md a compared field answers to: each field
// name pcap-compare reports maps to its section and a one-line statement.
#pragma once

#include <string_view>

namespace metaroce::pcapcmp {

struct Rule {
  const char* field;    // "ack.sack", as pcap-compare names it
  const char* section;  // "§3.7, §6.6"
  const char* text;     // what the rule says
};

// The rule for a field; an entry naming the whole packet for unknown names.
const Rule& rule_for(std::string_view field);

}  // namespace metaroce::pcapcmp
