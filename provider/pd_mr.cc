// Protection domains and memory regions. Registered memory needs no special
// allocation: the daemon reaches it with process_vm_readv/writev.
#include <errno.h>
#include <stdlib.h>

#include "provider/mroce.h"

struct ibv_pd *mroce_alloc_pd(struct ibv_context *context) {
  struct mroce_context *ctx = to_mroce_ctx(context);
  auto *pd = static_cast<struct mroce_pd *>(calloc(1, sizeof(struct mroce_pd)));
  if (!pd) return nullptr;
  struct mroce_alloc_pd_resp resp;
  struct mroce_call call = {MROCE_OP_ALLOC_PD, nullptr, 0, -1, &resp, sizeof(resp), nullptr, 0};
  int err = mroce_ctrl_call(ctx, &call);
  if (err) {
    free(pd);
    errno = err;
    return nullptr;
  }
  pd->pdn = resp.pdn;
  pd->ibv_pd.context = context;
  pd->ibv_pd.handle = resp.pdn;
  return &pd->ibv_pd;
}

// Destroy verbs succeed locally once the device is dead, so that an
// application can still release everything after IBV_EVENT_DEVICE_FATAL.
int mroce_dealloc_pd(struct ibv_pd *ibpd) {
  struct mroce_pd *pd = to_mroce_pd(ibpd);
  struct mroce_context *ctx = to_mroce_ctx(ibpd->context);
  int err = mroce_ctrl_handle(ctx, MROCE_OP_DEALLOC_PD, pd->pdn);
  if (err && !mroce_dead(ctx)) return err;
  free(pd);
  return 0;
}

struct ibv_mr *mroce_reg_mr(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t hca_va,
                            int access) {
  struct mroce_context *ctx = to_mroce_ctx(ibpd->context);
  if (hca_va != reinterpret_cast<uintptr_t>(addr)) {  // the NIC addresses by virtual address
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto *mr = static_cast<struct mroce_mr *>(calloc(1, sizeof(struct mroce_mr)));
  if (!mr) return nullptr;
  struct mroce_reg_mr_req req = {reinterpret_cast<uintptr_t>(addr), length,
                                 to_mroce_pd(ibpd)->pdn, static_cast<uint32_t>(access)};
  struct mroce_reg_mr_resp resp;
  struct mroce_call call = {MROCE_OP_REG_MR, &req, sizeof(req), -1, &resp, sizeof(resp),
                            nullptr, 0};
  int err = mroce_ctrl_call(ctx, &call);
  if (err) {
    free(mr);
    errno = err;
    return nullptr;
  }
  struct ibv_mr *m = &mr->vmr.ibv_mr;
  m->context = ibpd->context;
  m->pd = ibpd;
  m->addr = addr;
  m->length = length;
  m->handle = resp.lkey;
  m->lkey = resp.lkey;
  m->rkey = resp.rkey;
  mr->vmr.mr_type = IBV_MR_TYPE_MR;
  mr->vmr.access = access;
  return m;
}

int mroce_dereg_mr(struct verbs_mr *vmr) {
  struct mroce_context *ctx = to_mroce_ctx(vmr->ibv_mr.context);
  int err = mroce_ctrl_handle(ctx, MROCE_OP_DEREG_MR, vmr->ibv_mr.lkey);
  if (err && !mroce_dead(ctx)) return err;
  free(to_mroce_mr(vmr));
  return 0;
}
