// The extended CQ API: ibv_create_cq_ex and the start_poll / next_poll /
// end_poll iterator with its read_* accessors. The CQ is an ordinary
// mroce_cq (ibv_poll_cq and completion channels work on it too); the
// iterator converts each CQE with the conversion poll_cq uses and the
// accessors read that one ibv_wc. No completion timestamps: the NIC does not
// stamp CQEs, so IBV_WC_EX_WITH_COMPLETION_TIMESTAMP(_WALLCLOCK) is refused.
#include <errno.h>
#include <string.h>

#include "provider/mroce.h"

// struct ibv_cq_ex as rdma-core 44 lays it out (the head is struct ibv_cq's,
// so ibv_cq_ex_to_cq is a cast; struct verbs_cq embeds both).
#define MROCE_CQX_AT(member, off) \
  static_assert(offsetof(struct ibv_cq_ex, member) == (off), "ibv_cq_ex." #member)
MROCE_CQX_AT(context, 0);
MROCE_CQX_AT(channel, 8);
MROCE_CQX_AT(cq_context, 16);
MROCE_CQX_AT(handle, 24);
MROCE_CQX_AT(cqe, 28);
MROCE_CQX_AT(mutex, 32);
MROCE_CQX_AT(cond, 72);
MROCE_CQX_AT(comp_events_completed, 120);
MROCE_CQX_AT(async_events_completed, 124);
MROCE_CQX_AT(comp_mask, 128);
MROCE_CQX_AT(status, 132);
MROCE_CQX_AT(wr_id, 136);
MROCE_CQX_AT(start_poll, 144);
MROCE_CQX_AT(next_poll, 152);
MROCE_CQX_AT(end_poll, 160);
MROCE_CQX_AT(read_opcode, 168);
MROCE_CQX_AT(read_vendor_err, 176);
MROCE_CQX_AT(read_byte_len, 184);
MROCE_CQX_AT(read_imm_data, 192);
MROCE_CQX_AT(read_qp_num, 200);
MROCE_CQX_AT(read_src_qp, 208);
MROCE_CQX_AT(read_wc_flags, 216);
MROCE_CQX_AT(read_slid, 224);
MROCE_CQX_AT(read_sl, 232);
MROCE_CQX_AT(read_dlid_path_bits, 240);
MROCE_CQX_AT(read_completion_ts, 248);
MROCE_CQX_AT(read_cvlan, 256);
MROCE_CQX_AT(read_flow_tag, 264);
MROCE_CQX_AT(read_tm_info, 272);
MROCE_CQX_AT(read_completion_wallclock_ns, 280);
static_assert(sizeof(struct ibv_cq_ex) == 288, "sizeof(ibv_cq_ex)");
static_assert(offsetof(struct ibv_cq_ex, comp_mask) == sizeof(struct ibv_cq), "ibv_cq head");
static_assert(offsetof(struct mroce_cq, vcq.cq_ex) == 0, "ibv_cq_ex * is the mroce_cq *");
#undef MROCE_CQX_AT

namespace {

constexpr uint64_t kWcFlags = IBV_WC_STANDARD_FLAGS;  // all but timestamps, VLAN, tags, TM

struct mroce_cq *cq_of(struct ibv_cq_ex *c) { return reinterpret_cast<struct mroce_cq *>(c); }

// Makes completion `cq->cons` current; ENOENT when the ring has no more.
// After the device died: flush completions, then EIO (as poll_cq does).
int load_current(struct mroce_cq *cq) {
  struct mroce_context *ctx = to_mroce_ctx(cq->vcq.cq.context);
  if (mroce_ring_load_producer(&cq->ring) != cq->cons) {
    mroce_cqe_to_wc(static_cast<const struct mroce_cqe *>(mroce_ring_slot(&cq->ring, cq->cons)),
                    &cq->cur);
    cq->cons++;
  } else if (!mroce_dead(ctx)) {
    return ENOENT;
  } else if (mroce_flush_cq(ctx, cq, 1, &cq->cur) != 1) {
    return EIO;
  }
  cq->vcq.cq_ex.status = cq->cur.status;
  cq->vcq.cq_ex.wr_id = cq->cur.wr_id;
  return 0;
}

int start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr) {
  struct mroce_cq *cq = cq_of(c);
  if (attr && attr->comp_mask) return EINVAL;
  pthread_spin_lock(&cq->lock);  // held until end_poll, unless nothing is there
  int err = load_current(cq);
  if (err) pthread_spin_unlock(&cq->lock);
  return err;
}

int next_poll(struct ibv_cq_ex *c) { return load_current(cq_of(c)); }

void end_poll(struct ibv_cq_ex *c) {
  struct mroce_cq *cq = cq_of(c);
  mroce_ring_publish_consumer(&cq->ring, cq->cons);  // the slots read go back to the NIC
  pthread_spin_unlock(&cq->lock);
}

enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *c) { return cq_of(c)->cur.opcode; }
uint32_t read_vendor_err(struct ibv_cq_ex *c) { return cq_of(c)->cur.vendor_err; }
uint32_t read_byte_len(struct ibv_cq_ex *c) { return cq_of(c)->cur.byte_len; }
__be32 read_imm_data(struct ibv_cq_ex *c) { return cq_of(c)->cur.imm_data; }
uint32_t read_qp_num(struct ibv_cq_ex *c) { return cq_of(c)->cur.qp_num; }
uint32_t read_src_qp(struct ibv_cq_ex *c) { return cq_of(c)->cur.src_qp; }
unsigned int read_wc_flags(struct ibv_cq_ex *c) { return cq_of(c)->cur.wc_flags; }
uint32_t read_slid(struct ibv_cq_ex *c) { return cq_of(c)->cur.slid; }
uint8_t read_sl(struct ibv_cq_ex *c) { return cq_of(c)->cur.sl; }
uint8_t read_dlid_path_bits(struct ibv_cq_ex *c) { return cq_of(c)->cur.dlid_path_bits; }

void install_poll_ops(struct ibv_cq_ex *x) {
  x->start_poll = start_poll;
  x->next_poll = next_poll;
  x->end_poll = end_poll;
  x->read_opcode = read_opcode;
  x->read_vendor_err = read_vendor_err;
  x->read_byte_len = read_byte_len;
  x->read_imm_data = read_imm_data;
  x->read_qp_num = read_qp_num;
  x->read_src_qp = read_src_qp;
  x->read_wc_flags = read_wc_flags;
  x->read_slid = read_slid;
  x->read_sl = read_sl;
  x->read_dlid_path_bits = read_dlid_path_bits;
}

int check_cq_attr(struct mroce_context *ctx, const struct ibv_cq_init_attr_ex *a) {
  if (a->wc_flags & ~kWcFlags)
    return mroce_refuse(ctx, EOPNOTSUPP,
                        "wc_flags 0x%llx not supported: no completion timestamps (the NIC does "
                        "not stamp CQEs), VLAN, flow tags or tag matching",
                        static_cast<unsigned long long>(a->wc_flags & ~kWcFlags));
  if (a->comp_mask & ~static_cast<uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS))
    return mroce_refuse(ctx, EOPNOTSUPP, "comp_mask 0x%x: parent domains are not supported",
                        a->comp_mask);
  if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
      (a->flags & ~static_cast<uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)))
    return mroce_refuse(ctx, EOPNOTSUPP, "flags 0x%x: only SINGLE_THREADED is supported",
                        a->flags);
  if (a->cqe == 0 || a->cqe > ctx->dev_attr.max_cqe)
    return mroce_refuse(ctx, EINVAL, "cqe %u: must be 1..%u (max_cqe)", a->cqe,
                        ctx->dev_attr.max_cqe);
  return 0;
}

}  // namespace

struct ibv_cq_ex *mroce_create_cq_ex(struct ibv_context *context,
                                     struct ibv_cq_init_attr_ex *attr) {
  struct mroce_context *ctx = to_mroce_ctx(context);
  if (int err = check_cq_attr(ctx, attr)) {
    errno = err;
    return nullptr;
  }
  struct ibv_cq *c = mroce_create_cq(context, static_cast<int>(attr->cqe), attr->channel,
                                     static_cast<int>(attr->comp_vector));
  if (!c) return nullptr;
  // What ibv_create_cq's libibverbs side does after create_cq; the
  // extended call reaches the provider directly.
  verbs_init_cq(c, context, attr->channel, attr->cq_context);
  struct mroce_cq *cq = to_mroce_cq(c);
  cq->wc_flags = attr->wc_flags;
  install_poll_ops(&cq->vcq.cq_ex);
  return &cq->vcq.cq_ex;
}
