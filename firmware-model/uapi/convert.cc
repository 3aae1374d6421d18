#include "firmware-model/uapi/convert.h"

#include <cstring>

namespace metaroce::uapi {

uint32_t mtu_bytes(uint32_t ibv_mtu) { return ibv_mtu >= 1 && ibv_mtu <= 5 ? 128u << ibv_mtu : 0; }

uint32_t ibv_mtu_for(uint32_t bytes) {
  uint32_t e = 1;
  while (e < 5 && (128u << (e + 1)) <= bytes) e++;
  return e;
}

mroce_qp_cap to_abi(const fw::QpCap& c) {
  return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

fw::QpCap to_fw(const mroce_qp_cap& c) {
  return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

mroce_qp_attr to_abi(const fw::QpAttr& q) {
  mroce_qp_attr a{};
  a.qp_state = static_cast<uint32_t>(q.qp_state);
  a.cur_qp_state = static_cast<uint32_t>(q.cur_qp_state);
  a.path_mtu = q.path_mtu ? ibv_mtu_for(q.path_mtu) : 0;
  a.qp_access_flags = q.qp_access_flags;
  a.rq_psn = q.rq_psn;
  a.sq_psn = q.sq_psn;
  a.dest_qp_num = q.dest_qp_num;
  std::memcpy(a.dgid, q.av.dgid.bytes.data(), 16);
  a.flow_label = q.av.flow_label;
  a.sgid_index = q.av.sgid_index;
  a.hop_limit = q.av.hop_limit;
  a.traffic_class = q.av.traffic_class;
  a.is_global = 1;  // RoCE-style: every address vector carries a GRH
  a.timeout = q.timeout;
  a.retry_cnt = q.retry_cnt;
  a.rnr_retry = q.rnr_retry;
  a.min_rnr_timer = q.min_rnr_timer;
  a.max_rd_atomic = q.max_rd_atomic;
  a.max_dest_rd_atomic = q.max_dest_rd_atomic;
  a.port_num = q.port_num;
  a.pkey_index = q.pkey_index;
  a.cap = to_abi(q.cap);
  a.qkey = q.qkey;
  return a;
}

fw::QpAttr to_fw(const mroce_qp_attr& a) {
  fw::QpAttr q;
  q.qp_state = static_cast<fw::QpState>(a.qp_state);
  q.cur_qp_state = static_cast<fw::QpState>(a.cur_qp_state);
  q.path_mtu = mtu_bytes(a.path_mtu);
  q.qp_access_flags = a.qp_access_flags;
  q.rq_psn = a.rq_psn;
  q.sq_psn = a.sq_psn;
  q.dest_qp_num = a.dest_qp_num;
  std::memcpy(q.av.dgid.bytes.data(), a.dgid, 16);
  q.av.flow_label = a.flow_label;
  q.av.sgid_index = a.sgid_index;
  q.av.hop_limit = a.hop_limit;
  q.av.traffic_class = a.traffic_class;
  q.timeout = a.timeout;
  q.retry_cnt = a.retry_cnt;
  q.rnr_retry = a.rnr_retry;
  q.min_rnr_timer = a.min_rnr_timer;
  q.max_rd_atomic = a.max_rd_atomic;
  q.max_dest_rd_atomic = a.max_dest_rd_atomic;
  q.port_num = a.port_num;
  q.pkey_index = a.pkey_index;
  q.cap = to_fw(a.cap);
  q.qkey = a.qkey;
  return q;
}

WqeDefect to_fw(const mroce_send_wqe& w, fw::SendWr* wr) {
  wr->wr_id = w.wr_id;
  wr->opcode = static_cast<fw::WrOpcode>(w.opcode);  // range-checked by the engine
  wr->send_flags = w.send_flags;
  wr->imm = w.imm;
  wr->remote_addr = w.remote_addr;
  wr->rkey = w.rkey;
  wr->compare_add = w.compare_add;
  wr->swap = w.swap;
  wr->ah = w.ud.ah;
  wr->remote_qpn = w.ud.remote_qpn;
  wr->remote_qkey = w.ud.remote_qkey;
  wr->bind = {};
  if (w.opcode == static_cast<uint8_t>(fw::WrOpcode::kBindMw)) {
    // type is checked against the window's by the engine (MwCheck::kWrongType).
    wr->bind = {w.bind.mw, w.bind.mr_lkey, w.bind.access, w.remote_addr, w.compare_add,
                w.bind.type == 2 ? fw::MwType::kType2 : fw::MwType::kType1};
  }
  wr->inline_data.clear();
  wr->num_sge = 0;
  if (w.send_flags & fw::kSendInline) {
    if (w.inline_len > MROCE_MAX_INLINE) return WqeDefect::kBadInlineLen;
    wr->inline_data.assign(w.u.inline_data, w.u.inline_data + w.inline_len);
    return WqeDefect::kNone;
  }
  if (w.num_sge > MROCE_MAX_SGE) return WqeDefect::kBadSgeCount;
  wr->num_sge = w.num_sge;
  for (uint32_t i = 0; i < w.num_sge; i++) wr->sg[i] = {w.u.sg[i].addr, w.u.sg[i].length, w.u.sg[i].lkey};
  return WqeDefect::kNone;
}

WqeDefect to_fw(const mroce_recv_wqe& w, fw::RecvWr* wr) {
  if (w.num_sge > MROCE_MAX_SGE) return WqeDefect::kBadSgeCount;
  wr->wr_id = w.wr_id;
  wr->num_sge = w.num_sge;
  for (uint32_t i = 0; i < w.num_sge; i++) wr->sg[i] = {w.sg[i].addr, w.sg[i].length, w.sg[i].lkey};
  return WqeDefect::kNone;
}

mroce_send_wqe to_abi(const fw::SendWr& wr) {
  mroce_send_wqe w{};
  w.wr_id = wr.wr_id;
  w.opcode = static_cast<uint8_t>(wr.opcode);
  w.send_flags = wr.send_flags;
  w.imm = wr.imm;
  w.rkey = wr.rkey;
  w.remote_addr = wr.remote_addr;
  w.compare_add = wr.compare_add;
  w.swap = wr.swap;
  w.ud.ah = wr.ah;
  w.ud.remote_qpn = wr.remote_qpn;
  w.ud.remote_qkey = wr.remote_qkey;
  if (wr.opcode == fw::WrOpcode::kBindMw) {
    w.bind = {wr.bind.mw, wr.bind.lkey, wr.bind.access, static_cast<uint32_t>(wr.bind.type)};
    w.remote_addr = wr.bind.addr;
    w.compare_add = wr.bind.length;
  }
  if (wr.send_flags & fw::kSendInline) {
    w.inline_len = static_cast<uint16_t>(wr.inline_data.size());
    std::memcpy(w.u.inline_data, wr.inline_data.data(), wr.inline_data.size());
  } else {
    w.num_sge = static_cast<uint8_t>(wr.num_sge);
    for (uint32_t i = 0; i < wr.num_sge; i++) w.u.sg[i] = {wr.sg[i].addr, wr.sg[i].length, wr.sg[i].lkey};
  }
  return w;
}

mroce_recv_wqe to_abi(const fw::RecvWr& wr) {
  mroce_recv_wqe w{};
  w.wr_id = wr.wr_id;
  w.num_sge = wr.num_sge;
  for (uint32_t i = 0; i < wr.num_sge; i++) w.sg[i] = {wr.sg[i].addr, wr.sg[i].length, wr.sg[i].lkey};
  return w;
}

mroce_cqe to_abi(const fw::Completion& wc) {
  mroce_cqe e{};
  e.wr_id = wc.wr_id;
  e.status = static_cast<uint32_t>(wc.status);
  e.opcode = static_cast<uint32_t>(wc.opcode);
  e.vendor_err = wc.vendor_err;
  e.byte_len = wc.byte_len;
  e.imm = wc.imm;
  e.qp_num = wc.qp_num;
  e.src_qp = wc.src_qp;
  e.wc_flags = wc.wc_flags;
  e.ud.slid = wc.slid;
  e.ud.sl = wc.sl;
  e.ud.dlid_path_bits = wc.dlid_path_bits;
  e.ud.pkey_index = wc.pkey_index;
  return e;
}

fw::Completion to_fw(const mroce_cqe& e) {
  fw::Completion wc;
  wc.wr_id = e.wr_id;
  wc.status = static_cast<fw::WcStatus>(e.status);
  wc.opcode = static_cast<fw::WcOpcode>(e.opcode);
  wc.vendor_err = e.vendor_err;
  wc.byte_len = e.byte_len;
  wc.imm = e.imm;
  wc.qp_num = e.qp_num;
  wc.src_qp = e.src_qp;
  wc.wc_flags = e.wc_flags;
  wc.slid = e.ud.slid;
  wc.sl = e.ud.sl;
  wc.dlid_path_bits = e.ud.dlid_path_bits;
  wc.pkey_index = e.ud.pkey_index;
  return wc;
}

std::vector<NamedCounter> named_counters(const fw::Counters& c) {
  return {
#define MROCE_X(name) {#name, c.name},
      MROCE_ENGINE_COUNTERS(MROCE_X)
#undef MROCE_X
  };
}

}  // namespace metaroce::uapi
