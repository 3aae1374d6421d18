// pcap-plant: plants one divergence in a capture (tests/pcap/plant.h).
//   pcap-plant IN OUT FROM_IP OPCODE NTH FIELD DELTA
// picks the NTH frame FROM_IP sent with OPCODE (ACK, NACK, RDMA_READ_RESP,
// ATOMIC_RESP, ...; as proto to_string names them), changes FIELD by DELTA,
// writes OUT and prints the frame number it changed.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/pcap/plant.h"
#include "tools/pcap-compare/compare.h"

int main(int argc, char** argv) {
  using namespace metaroce;
  if (argc != 8) return std::fprintf(stderr, "usage: pcap-plant IN OUT FROM_IP OPCODE NTH FIELD DELTA\n"), 2;
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  proto::IpAddr from;
  if (!pcapcmp::parse_ip(argv[3], &from)) return std::fprintf(stderr, "bad address %s\n", argv[3]), 2;
  int op = -1;
  for (int v = 0; v < 256; ++v)
    if (std::string(proto::to_string(static_cast<proto::Opcode>(v))) == argv[4]) op = v;
  if (op < 0) return std::fprintf(stderr, "unknown opcode %s\n", argv[4]), 2;
  uint64_t at = pcaptest::find_frame(file, from, static_cast<proto::Opcode>(op), std::atoi(argv[5]));
  if (!at) return std::fprintf(stderr, "no such frame\n"), 1;
  std::string why = pcaptest::plant(&file, at, argv[6], std::strtoull(argv[7], nullptr, 0));
  if (!why.empty()) return std::fprintf(stderr, "%s\n", why.c_str()), 1;
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  if (!out) return std::fprintf(stderr, "cannot write %s\n", argv[2]), 1;
  std::printf("%llu\n", static_cast<unsigned long long>(at));
  return 0;
}
