// The daemon's own counters, one per reason, from one table: the struct,
// the QUERY_COUNTERS names and the SIGUSR1 dump cannot disagree. Shared by
// the daemon's roles (control plane, queue pump, soft-NIC host), each of
// which counts its own reasons here.
#pragma once

#include <cstdint>

namespace metaroce::daemon {

#define MROCE_DAEMON_COUNTERS(X)                                                      \
  X(ctrl_requests)                                                                    \
  X(ctrl_errors)                                                                      \
  X(ctrl_malformed)                                                                   \
  X(clients_opened)                                                                   \
  X(clients_closed)                                                                   \
  X(clients_refused_user_limit)  /* connections over --uid-max-connections */         \
  X(limit_refused_client)        /* objects refused by a per-connection limit */      \
  X(limit_refused_user)          /* objects refused by a per-uid limit */             \
  X(channel_fd_refused)          /* CREATE_CQ channel fds of a kind that can block */ \
  X(tx_drop_no_neighbor)                                                              \
  X(tx_drop_ring_full)                                                                \
  X(tx_drop_too_big)                                                                  \
  X(tx_held_ring_full)           /* loop passes the engine was held: TX ring full */    \
  X(reg_mr_refused)              /* range not mapped with that access, or unsafe */   \
  X(ring_bad_producer)           /* SQ/RQ producer index beyond the ring: QP fatal */ \
  X(wqe_bad_sge_count)           /* num_sge above MROCE_MAX_SGE */                    \
  X(wqe_bad_inline_len)          /* inline_len above MROCE_MAX_INLINE */              \
  X(wqe_rejected)                /* ring entries refused (SQ: error CQE; RQ: none) */ \
  X(wqe_recv_in_reset)           /* receive ring entries of a QP in RESET */          \
  X(wqe_recv_refused_other)      /* receive entries refused for any other reason */   \
  X(wqe_srq_refused)             /* SRQ ring entries refused (too many SGEs): no CQE */ \
  X(cq_events)                                                                        \
  X(cq_event_write_failed)       /* channel full or closed: never waited for */       \
  X(async_events)                                                                     \
  X(async_event_write_failed)                                                         \
  X(doorbell_wakeups)                                                                 \
  /* ud: */                                                                           \
  X(qkey_privileged_refused)     /* controlled Q_Key (high bit) asked by a non-root user */ \
  X(ah_refused)                  /* CREATE_AH refused (no GRH, bad PD/GID, limits) */ \
  /* srqud: ring entries beyond the advertised bound (no CQE) */                      \
  X(wqe_send_over_bound)         /* send entry with max_send_wr WRs outstanding */    \
  X(wqe_recv_over_bound)         /* receive entry with max_recv_wr outstanding */ \
  /* txf: */                                                                          \
  X(tx_drop_frame_mismatch)      /* a reserved tx frame not finished as reserved */

struct DaemonCounters {
#define MROCE_X(name) uint64_t name = 0;
  MROCE_DAEMON_COUNTERS(MROCE_X)
#undef MROCE_X
};

}  // namespace metaroce::daemon
