// Shared setup for the end-to-end verbs programs (tests/verbs, tests/srq,
// tests/extapi, tests/mw, ...): open a device by name, find its RoCE v2
// GID, create and connect QPs, register memory, poll with a wall-clock
// deadline, wait for async events, exchange QP info between the two
// namespaces over TCP, and capture the provider's refusal reasons.
//
// Conventions: a function that can fail prints what failed and why (the
// call, the errno and its text) to stderr and returns an errno or nullptr;
// the program decides with REQUIRE (stop) or EXPECT (count and go on).
// Every wait is a deadline in seconds (tests never depend on speed).
#pragma once

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <functional>
#include <string>

namespace mroce_test {

// Failed EXPECTs so far; a program ends with `return failures() ? 1 : 0`.
inline int g_failures = 0;
inline int failures() { return g_failures; }

#define EXPECT(c)                                                            \
  do {                                                                       \
    if (!(c)) {                                                              \
      fprintf(stderr, "%s:%d: EXPECT(%s) failed\n", __FILE__, __LINE__, #c); \
      ::mroce_test::g_failures++;                                            \
    }                                                                        \
  } while (0)
#define REQUIRE(c)                                                                      \
  do {                                                                                  \
    if (!(c)) {                                                                         \
      fprintf(stderr, "%s:%d: REQUIRE(%s) failed (errno %d: %s)\n", __FILE__, __LINE__, \
              #c, errno, strerror(errno));                                              \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

// A wall-clock deadline (CLOCK_MONOTONIC), `seconds` from now.
class Deadline {
 public:
  explicit Deadline(double seconds);
  bool passed() const;
  int remaining_ms() const;  // 0 once passed

 private:
  timespec end_;
};

// ---- device ----

// The device called `name`, opened; nullptr (and a message naming the
// devices there are) if there is none or it cannot be opened.
ibv_context *open_device(const char *name);
// The same without the message, for a caller that retries (a daemon restart).
ibv_context *try_open_device(const char *name);

// Port 1's RoCE v2 IPv4-mapped GID (what perftest picks by default).
struct LocalPath {
  int gid_index = -1;
  ibv_gid gid{};
  ibv_mtu active_mtu = IBV_MTU_1024;
};
// Index of that GID (-1 if none), with the GID in *gid.
int roce_v2_ipv4_gid(ibv_context *ctx, ibv_gid *gid);
// The GID and port 1's active MTU; an errno (printed) if not found.
int local_path(ibv_context *ctx, LocalPath *path);

// ---- queues and memory ----

// A CQ of `cqe` entries without a channel; nullptr (printed) on failure.
ibv_cq *create_cq(ibv_context *ctx, int cqe);
// A QP of `type` on one CQ for both queues (its receives on `srq` if given);
// the capabilities the device granted in *granted, if given.
ibv_qp *create_qp(ibv_pd *pd, ibv_cq *cq, ibv_qp_type type, ibv_qp_cap cap,
                  ibv_srq *srq = nullptr, ibv_qp_cap *granted = nullptr);
// ibv_reg_mr, printing what was refused.
ibv_mr *reg_mr(ibv_pd *pd, void *addr, size_t len, int access);

// ---- connecting ----

// How an RC (or UC) QP is taken INIT -> RTR -> RTS. PSNs start at 100;
// timeout 14, retry and RNR retry 7. A UC QP is given only the attributes
// IB allows it (no responder resources, RNR timer, timeout or retries), and
// `access` should then leave out IBV_ACCESS_REMOTE_READ and _ATOMIC.
struct RcOptions {
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t rd_atomic = 4;  // max_rd_atomic and max_dest_rd_atomic
  uint8_t min_rnr_timer = 12;
};
// Where the peer QP is: its number and GID, and our GID index to send from.
struct RcPeer {
  uint32_t qpn;
  ibv_gid gid;
  int sgid_index;
};
int modify_to_init(ibv_qp *qp, int access);
int modify_to_rtr(ibv_qp *qp, const RcPeer &peer, const RcOptions &o);
int modify_to_rts(ibv_qp *qp, const RcOptions &o);
// All three; the first failure's errno (printed with the state it was for).
int connect_rc(ibv_qp *qp, const RcPeer &peer, const RcOptions &o);
// Two QPs of one device connected to each other (o.mtu: the port's if
// use_port_mtu).
int connect_loopback(ibv_qp *a, ibv_qp *b, RcOptions o, bool use_port_mtu);

// A UD QP to RTS with `qkey` (send PSN 1).
int ud_to_rts(ibv_qp *qp, uint32_t qkey);
// An address handle for `dgid` sent from GID `sgid_index` of port 1.
ibv_ah *create_ah(ibv_pd *pd, const ibv_gid &dgid, int sgid_index);

// ---- completions and events ----

// One completion within `seconds`; false (printed: timeout or poll error).
bool poll_one(ibv_cq *cq, ibv_wc *wc, double seconds = 30);
// Waits up to `seconds` for an async event of type `want` that `mine`
// accepts (any, if empty); other events are printed and skipped.
bool wait_async_event(ibv_context *ctx, ibv_event_type want, double seconds,
                      const std::function<bool(const ibv_async_event &)> &mine = {});

// ---- data ----

uint32_t checksum(const uint8_t *p, size_t n);  // FNV-1a
void fill_random(uint8_t *p, size_t n, uint32_t seed);  // an LCG's bytes

// ---- the TCP side channel between the two namespaces ----

// One TCP connection, server (listen + accept) or client (connect, retried
// until the deadline): the programs swap QP numbers, GIDs and keys on it.
// A broken channel ends the program with a message (the peer is gone).
class SideChannel {
 public:
  static SideChannel listen_on(int port, double seconds = 60);
  static SideChannel connect_to(const char *ipv4, int port, double seconds = 60);
  void put(const void *p, size_t n);
  void get(void *p, size_t n);
  template <class T>
  void send(const T &v) { put(&v, sizeof v); }
  template <class T>
  T recv() {
    T v;
    get(&v, sizeof v);
    return v;
  }
  // Both sides: send `tag`, wait for the peer's, which must be the same.
  void sync(char tag);

 private:
  explicit SideChannel(int fd) : fd_(fd) {}
  int fd_;
};

// A QP's address for the peer.
struct QpInfo {
  uint32_t qpn;
  ibv_gid gid;
};
// Sends ours, receives the peer's, connects `qp` to it, then syncs ('c').
int exchange_and_connect(SideChannel &ch, ibv_qp *qp, const LocalPath &local,
                         const RcOptions &o);

// ---- refusal reasons ----

// Captures what is written to stderr (the provider's METAROCE_DEBUG lines)
// from construction to text(), so a test checks the reason of a refusal,
// not only its errno. text() also echoes it, as "  reason: ...".
class StderrCapture {
 public:
  StderrCapture();
  ~StderrCapture();
  std::string text();

 private:
  FILE *f_;
  int saved_;
};
inline bool has(const std::string &s, const char *what) {
  return s.find(what) != std::string::npos;
}

}  // namespace mroce_test
