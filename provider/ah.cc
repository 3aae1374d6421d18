// Address handles (UD destinations). The daemon keeps the handle, checks
// its PD and GID index and starts resolving the next hop through the
// kernel's neighbour table; a UD send names it by number.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provider/mroce.h"

struct ibv_ah *mroce_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr) {
  struct mroce_context *ctx = to_mroce_ctx(pd->context);
  if (!attr->is_global) {  // as rdma_check_ah_attr on a RoCE port
    snprintf(ctx->last_reason, sizeof(ctx->last_reason),
             "address handle without a GRH: a RoCE AH needs is_global and a destination GID");
    errno = EINVAL;
    return nullptr;
  }
  if (attr->port_num != 1) {
    errno = EINVAL;
    return nullptr;
  }
  auto *ah = static_cast<struct mroce_ah *>(calloc(1, sizeof(struct mroce_ah)));
  if (!ah) return nullptr;
  struct mroce_create_ah_req req = {};
  req.pdn = to_mroce_pd(pd)->pdn;
  memcpy(req.ah.dgid, attr->grh.dgid.raw, sizeof(req.ah.dgid));
  req.ah.flow_label = attr->grh.flow_label;
  req.ah.sgid_index = attr->grh.sgid_index;
  req.ah.hop_limit = attr->grh.hop_limit;
  req.ah.traffic_class = attr->grh.traffic_class;
  req.ah.is_global = 1;
  struct mroce_create_ah_resp resp;
  struct mroce_call call = {MROCE_OP_CREATE_AH, &req, sizeof(req), -1, &resp, sizeof(resp),
                            nullptr, 0};
  int err = mroce_ctrl_call(ctx, &call);
  if (err) {
    free(ah);
    errno = err;
    return nullptr;
  }
  ah->ahn = resp.ahn;
  ah->ibv_ah.context = pd->context;
  ah->ibv_ah.pd = pd;
  ah->ibv_ah.handle = resp.ahn;
  return &ah->ibv_ah;
}

int mroce_destroy_ah(struct ibv_ah *ibah) {
  struct mroce_ah *ah = to_mroce_ah(ibah);
  struct mroce_context *ctx = to_mroce_ctx(ibah->context);
  int err = mroce_ctrl_handle(ctx, MROCE_OP_DESTROY_AH, ah->ahn);
  if (err && !mroce_dead(ctx)) return err;
  free(ah);
  return 0;
}
