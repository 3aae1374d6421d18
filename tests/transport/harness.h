// Shared pieces of the transport tests over the simnet: seeds from the
// environment, log-uniform sizes, WR builders, CQ draining.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "tests/simnet/network.h"
#include "tests/simnet/rc.h"

namespace metaroce::transport_test {

using simnet::Endpoint;
using simnet::Host;

// SIMNET_SEED=n runs just seed n (reproduce a failure); SIMNET_SEEDS=n
// changes how many seeds a property test runs.
inline std::vector<uint64_t> seeds(uint64_t default_count) {
  if (const char* one = std::getenv("SIMNET_SEED")) return {std::strtoull(one, nullptr, 0)};
  uint64_t n = default_count;
  if (const char* c = std::getenv("SIMNET_SEEDS")) n = std::strtoull(c, nullptr, 0);
  std::vector<uint64_t> v;
  for (uint64_t i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

// Log-uniform in [1, max].
inline uint32_t log_uniform(simnet::Rng& r, uint32_t max) {
  const double x = std::exp(r.uniform() * std::log(static_cast<double>(max) + 1));
  return std::clamp<uint32_t>(static_cast<uint32_t>(x), 1, max);
}

inline fw::SendWr wr(uint64_t id, fw::WrOpcode op, const Endpoint& local, uint64_t local_addr,
                     uint32_t len) {
  fw::SendWr w;
  w.wr_id = id;
  w.opcode = op;
  w.send_flags = fw::kSendSignaled;
  w.num_sge = 1;
  w.sg[0] = fw::Sge{local_addr, len, local.mr.lkey};
  return w;
}

inline fw::RecvWr recv_wr(uint64_t id, const Endpoint& local, uint64_t addr, uint32_t len) {
  fw::RecvWr w;
  w.wr_id = id;
  w.num_sge = 1;
  w.sg[0] = fw::Sge{addr, len, local.mr.lkey};
  return w;
}

inline void fill_random(std::span<uint8_t> m, uint64_t seed) {
  simnet::Rng r(seed);
  size_t i = 0;
  for (; i + 8 <= m.size(); i += 8) {
    uint64_t x = r.next();
    std::memcpy(&m[i], &x, 8);
  }
  for (; i < m.size(); ++i) m[i] = static_cast<uint8_t>(r.next());
}

inline std::string describe(const fw::Completion& c) {
  return "wr_id " + std::to_string(c.wr_id) + " status " + std::to_string(int(c.status)) +
         " opcode " + std::to_string(int(c.opcode)) + " len " + std::to_string(c.byte_len);
}

inline double jain(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  return s2 > 0 ? s * s / (static_cast<double>(x.size()) * s2) : 0;
}

}  // namespace metaroce::transport_test
