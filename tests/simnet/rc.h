// Verbs-level helpers for tests over the simnet: an RC endpoint (PD, one MR
// over a fresh buffer, send/recv CQs, a QP) and connecting two of them
// (RESET -> INIT -> RTR -> RTS), as an application would through libibverbs.
#pragma once

#include <cstdint>

#include "tests/simnet/host.h"

namespace metaroce::simnet {

struct Endpoint {
  Host* host = nullptr;
  fw::OwnerId owner = 0;
  uint32_t pdn = 0, scq = 0, rcq = 0, qpn = 0;
  uint64_t buf = 0;  // start of the registered buffer
  uint64_t len = 0;
  fw::MrKeys mr;
};

struct EndpointOptions {
  fw::OwnerId owner = 1;
  uint64_t buf_bytes = 1 << 20;
  uint32_t cqe = 4096;
  fw::QpCap cap{1024, 1024, 4, 4, 64};
  uint32_t access = fw::kAccessLocalWrite | fw::kAccessRemoteWrite | fw::kAccessRemoteRead |
                    fw::kAccessRemoteAtomic;
};

struct ConnectOptions {
  uint32_t path_mtu = 1024;
  uint8_t timeout = 14;  // IB encoding
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;
  uint32_t psn_a = 0, psn_b = 0;  // initial send PSNs of a and b
};

// Returns 0 or the first failing call's errno; *out is filled on success.
int make_endpoint(Host& h, const EndpointOptions& o, Endpoint* out);
// Connects a and b to each other.
int connect(Endpoint& a, Endpoint& b, const ConnectOptions& o = {});
// Moves one side to RTS towards `peer_ip`/`peer_qpn` (also for a peer that
// does not exist or never answers): sends from o.psn_a, expects o.psn_b.
int connect_one(Endpoint& a, const proto::IpAddr& peer_ip, uint32_t peer_qpn,
                const ConnectOptions& o = {});

}  // namespace metaroce::simnet
