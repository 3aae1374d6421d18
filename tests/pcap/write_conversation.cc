// Writes the in-process conversation of tests/pcap/conversation.h to a
// pcap file (for trying pcap-compare by hand and for the e2e test's
// planted-divergence cases on a file with every response kind).
//   write_conversation FILE
#include <cstdio>

#include "tests/pcap/conversation.h"

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: write_conversation FILE\n"), 2;
  auto c = metaroce::pcaptest::run_conversation(true);
  std::FILE* f = std::fopen(argv[1], "wb");
  if (!f || std::fwrite(c.pcap.data(), 1, c.pcap.size(), f) != c.pcap.size() || std::fclose(f))
    return std::perror(argv[1]), 1;
  return 0;
}
