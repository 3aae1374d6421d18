// The device model's admin commands (docs/hardware-offload.md §4): each
// reads its input mailbox through the IOMMU windows, calls the engine (the
// soft NIC), and answers with a status, a syndrome and its output mailbox.
#include <cerrno>
#include <cstring>

#include "firmware-model/hw/device_model.h"
#include "firmware-model/uapi/convert.h"

namespace metaroce::hw {

namespace {

constexpr uint32_t kMaxRingEntries = 1u << 16;

bool pow2_within(uint32_t v, uint32_t max) { return v && (v & (v - 1)) == 0 && v <= max; }

}  // namespace

void DeviceModel::refuse(Admin& a, int err, mroce_hw_syndrome why) {
  a.cpl.status = static_cast<uint16_t>(err);
  a.cpl.syndrome = static_cast<uint8_t>(why);
}

bool DeviceModel::read_input(Admin& a, void* dst, size_t len) {
  if (!(a.cmd.flags & MROCE_ADMIN_F_IN) || a.cmd.in_len < len) {
    counters_.model_admin_bad_mailbox++;
    refuse(a, EINVAL, MROCE_SYN_NO_INPUT);
    return false;
  }
  const uint8_t* in = translate(a.cmd.in_iova, len);
  if (!in) {
    counters_.model_admin_bad_mailbox++;
    refuse(a, EFAULT, MROCE_SYN_MAILBOX_UNMAPPED);
    return false;
  }
  std::memcpy(dst, in, len);  // copied once, then checked
  return true;
}

bool DeviceModel::write_output(Admin& a, const void* src, size_t len) {
  if (!(a.cmd.flags & MROCE_ADMIN_F_OUT) || a.cmd.out_len < len) {
    counters_.model_admin_bad_mailbox++;
    refuse(a, EINVAL, MROCE_SYN_NO_OUTPUT);
    return false;
  }
  uint8_t* out = translate(a.cmd.out_iova, len);
  if (!out) {
    counters_.model_admin_bad_mailbox++;
    refuse(a, EFAULT, MROCE_SYN_MAILBOX_UNMAPPED);
    return false;
  }
  std::memcpy(out, src, len);
  return true;
}

// Objects are created for a PASID only once an address space is bound to
// it: their DMA would reach nothing.
bool DeviceModel::owner_bound(Admin& a) {
  if (pasids_.count(a.cmd.owner)) return true;
  counters_.model_admin_unbound_pasid++;
  refuse(a, EPERM, MROCE_SYN_PASID_UNBOUND);
  return false;
}

void DeviceModel::execute(Admin& a) {
  const mroce_hw_admin_cmd& c = a.cmd;
  int err = 0;
  switch (c.opcode) {
    case MROCE_ADMIN_QUERY_CAPS: return admin_query_caps(a);
    case MROCE_ADMIN_SET_PORT: return admin_set_port(a);
    case MROCE_ADMIN_CREATE_PD:
      if (!owner_bound(a)) return;
      err = nic_->create_pd(c.owner, &a.cpl.result);
      if (!err) owners_.insert(c.owner);
      break;
    case MROCE_ADMIN_DESTROY_PD: err = nic_->destroy_pd(c.owner, c.handle); break;
    case MROCE_ADMIN_REG_MR: return admin_reg_mr(a);
    case MROCE_ADMIN_DEREG_MR: err = nic_->dereg_mr(c.owner, c.handle); break;
    case MROCE_ADMIN_CREATE_CQ: return admin_create_cq(a);
    case MROCE_ADMIN_DESTROY_CQ: return admin_destroy_cq(a);
    case MROCE_ADMIN_CREATE_QP: return admin_create_qp(a);
    case MROCE_ADMIN_MODIFY_QP: return admin_modify_qp(a);
    case MROCE_ADMIN_QUERY_QP: return admin_query_qp(a);
    case MROCE_ADMIN_DESTROY_QP: return admin_destroy_qp(a);
    case MROCE_ADMIN_DESTROY_OWNER: return admin_destroy_owner(a);
    case MROCE_ADMIN_QUERY_COUNTERS: return admin_query_counters(a);
    case MROCE_ADMIN_QUERY_QP_TRANSPORT: return admin_query_qp_transport(a);
    default:
      counters_.model_admin_bad_opcode++;
      return refuse(a, EINVAL, MROCE_SYN_BAD_OPCODE);
  }
  if (err) refuse(a, err, MROCE_SYN_ENGINE);
}

void DeviceModel::admin_query_caps(Admin& a) {
  const fw::DeviceCaps& caps = nic_->caps();
  mroce_device_attr d{};
  d.max_mr_size = caps.max_mr_size;
  d.max_qp = caps.max_qp;
  d.max_qp_wr = caps.max_qp_wr;
  d.max_sge = caps.max_sge;
  d.max_cq = caps.max_cq;
  d.max_cqe = caps.max_cqe;
  d.max_mr = caps.max_mr;
  d.max_pd = caps.max_pd;
  d.max_qp_rd_atom = caps.max_qp_rd_atom;
  d.max_inline = caps.max_inline;
  d.max_msg_size = caps.max_msg_size;
  d.vendor_id = MROCE_HW_PCI_VENDOR;
  d.vendor_part_id = MROCE_HW_PCI_DEVICE;
  d.hw_ver = 1;
  std::strncpy(d.fw_ver, "metaroce-hwmodel 1.1", sizeof(d.fw_ver) - 1);
  write_output(a, &d, sizeof(d));
}

void DeviceModel::admin_set_port(Admin& a) {
  mroce_hw_port in;
  if (!read_input(a, &in, sizeof(in))) return;
  if (in.num_gids > 16) return refuse(a, EINVAL, MROCE_SYN_BAD_PORT);
  fw::PortInfo p;
  p.link_mtu = in.link_mtu;
  p.active = in.active != 0;
  p.gids.resize(in.num_gids);
  for (uint32_t i = 0; i < in.num_gids; i++) std::memcpy(p.gids[i].bytes.data(), in.gids[i], 16);
  nic_->set_port(p);  // the engine raises PORT_ACTIVE / PORT_ERR (element: port 1)
}

void DeviceModel::admin_reg_mr(Admin& a) {
  mroce_reg_mr_req in;
  if (!owner_bound(a) || !read_input(a, &in, sizeof(in))) return;
  fw::MrKeys keys;
  if (int err = nic_->reg_mr(a.cmd.owner, in.pdn, in.addr, in.length, in.access, &keys))
    return refuse(a, err, MROCE_SYN_ENGINE);
  a.cpl.result = keys.lkey;
  a.cpl.result2 = keys.rkey;
}

// A work or completion ring in host memory: the geometry is the command's
// (the header's copy is the driver's and not trusted), every slot inside
// one DMA window.
bool DeviceModel::bind_ring(Admin& a, uint64_t iova, uint32_t entries, uint32_t entry_size,
                            mroce_ring* r) {
  if (!pow2_within(entries, kMaxRingEntries) || (iova & 63) != 0) {
    refuse(a, EINVAL, MROCE_SYN_RING_GEOMETRY);
    return false;
  }
  uint8_t* base = translate(iova, sizeof(mroce_ring_hdr) + uint64_t{entries} * entry_size);
  if (!base) {
    refuse(a, EFAULT, MROCE_SYN_RING_UNMAPPED);
    return false;
  }
  r->hdr = reinterpret_cast<mroce_ring_hdr*>(base);
  r->slots = base + sizeof(mroce_ring_hdr);
  r->entries = entries;
  r->entry_size = entry_size;
  return true;
}

void DeviceModel::admin_create_cq(Admin& a) {
  mroce_hw_create_cq in;
  Cq cq;
  if (!owner_bound(a) || !read_input(a, &in, sizeof(in)) ||
      !bind_ring(a, in.ring_iova, in.entries, sizeof(mroce_cqe), &cq.ring))
    return;
  uint32_t cqn = 0;
  if (int err = nic_->create_cq(a.cmd.owner, std::min(in.entries, nic_->caps().max_cqe), &cqn))
    return refuse(a, err, MROCE_SYN_ENGINE);
  if (cqn >= MROCE_HW_DB_PAGES) {
    nic_->destroy_cq(a.cmd.owner, cqn);
    return refuse(a, ENOSPC, MROCE_SYN_NO_DOORBELL);
  }
  cq.owner = a.cmd.owner;
  owners_.insert(cq.owner);
  cqs_[cqn] = cq;
  a.cpl.result = cqn;
}

void DeviceModel::admin_destroy_cq(Admin& a) {
  if (int err = nic_->destroy_cq(a.cmd.owner, a.cmd.handle)) return refuse(a, err, MROCE_SYN_ENGINE);
  cqs_.erase(a.cmd.handle);  // the engine checked the owner
}

void DeviceModel::admin_create_qp(Admin& a) {
  mroce_hw_create_qp in;
  Qp qp;
  if (!owner_bound(a) || !read_input(a, &in, sizeof(in)) ||
      !bind_ring(a, in.sq_ring_iova, in.sq_entries, sizeof(mroce_send_wqe), &qp.sq) ||
      !bind_ring(a, in.rq_ring_iova, in.rq_entries, sizeof(mroce_recv_wqe), &qp.rq))
    return;
  fw::QpInitAttr init;
  init.pdn = in.pdn;
  init.send_cqn = in.send_cqn;
  init.recv_cqn = in.recv_cqn;
  init.sq_sig_all = in.sq_sig_all != 0;
  init.cap = uapi::to_fw(in.cap);
  fw::QpCap actual;
  if (int err = nic_->create_qp(a.cmd.owner, init, &qp.qpn, &actual))
    return refuse(a, err, MROCE_SYN_ENGINE);
  mroce_qp_cap out = uapi::to_abi(actual);
  if (!write_output(a, &out, sizeof(out))) {
    nic_->destroy_qp(a.cmd.owner, qp.qpn);
    return;
  }
  qp.owner = a.cmd.owner;
  owners_.insert(qp.owner);
  qps_[qp.qpn & MROCE_HW_DB_INDEX_MASK] = qp;  // its slot: unique among live QPs
  a.cpl.result = qp.qpn;
}

void DeviceModel::admin_modify_qp(Admin& a) {
  mroce_qp_attr in;
  if (!read_input(a, &in, sizeof(in))) return;
  if (int err = nic_->modify_qp(a.cmd.owner, a.cmd.handle, uapi::to_fw(in), in.attr_mask))
    refuse(a, err, MROCE_SYN_ENGINE);
}

void DeviceModel::admin_query_qp(Admin& a) {
  fw::QpAttr attr;
  fw::QpInitAttr init;
  if (int err = nic_->query_qp(a.cmd.owner, a.cmd.handle, &attr, &init))
    return refuse(a, err, MROCE_SYN_ENGINE);
  mroce_query_qp_resp out{};
  out.attr = uapi::to_abi(attr);
  out.sq_sig_all = init.sq_sig_all;
  write_output(a, &out, sizeof(out));
}

void DeviceModel::admin_destroy_qp(Admin& a) {
  if (int err = nic_->destroy_qp(a.cmd.owner, a.cmd.handle)) return refuse(a, err, MROCE_SYN_ENGINE);
  auto it = qps_.find(a.cmd.handle & MROCE_HW_DB_INDEX_MASK);
  if (it != qps_.end() && it->second.qpn == a.cmd.handle) qps_.erase(it);
}

void DeviceModel::admin_destroy_owner(Admin& a) {
  fw::OwnerId o = a.cmd.owner;
  nic_->destroy_owner(o);
  std::erase_if(qps_, [&](const auto& kv) { return kv.second.owner == o; });
  std::erase_if(cqs_, [&](const auto& kv) { return kv.second.owner == o; });
  owners_.erase(o);
}

std::vector<NamedCounter> DeviceModel::device_counters() const {
  std::vector<NamedCounter> out;
  nic_->query_counters(kDeviceCounters, &out);
  DeviceModelCounters c = counters_;
  {
    std::lock_guard g(mu_);
    c.model_register_bad_offset = regs_.bad_offset;
    c.model_doorbells = regs_.doorbell_writes;
    c.model_cq_doorbells = regs_.cq_doorbell_writes;
    c.model_dma_unmapped = dma_unmapped_;
  }
#define MROCE_X(name) out.push_back({#name, c.name});
  MROCE_MODEL_COUNTERS(MROCE_X)
#undef MROCE_X
  std::vector<NamedCounter> host;
  nic_->host_counters(&host);  // the soft NIC's DMA and packet I/O
  out.insert(out.end(), host.begin(), host.end());
  out.push_back({"model_tx_drop_no_neighbor", nic_counters_.tx_drop_no_neighbor});
  out.push_back({"model_tx_drop_ring_full", nic_counters_.tx_drop_ring_full});
  out.push_back({"model_tx_drop_too_big", nic_counters_.tx_drop_too_big});
  out.push_back({"model_tx_drop_frame_mismatch", nic_counters_.tx_drop_frame_mismatch});  // txf
  return out;
}

// As many counters as the output mailbox holds; n says how many.
void DeviceModel::admin_query_counters(Admin& a) {
  std::vector<NamedCounter> list;
  if (a.cmd.handle == kDeviceCounters) {
    list = device_counters();
  } else if (int err = nic_->query_counters(a.cmd.handle, &list)) {
    return refuse(a, err, MROCE_SYN_ENGINE);
  }
  size_t room = a.cmd.out_len >= sizeof(mroce_query_counters_resp)
                    ? (a.cmd.out_len - sizeof(mroce_query_counters_resp)) / sizeof(mroce_counter)
                    : 0;
  mroce_query_counters_resp resp{static_cast<uint32_t>(std::min(room, list.size())), 0};
  std::vector<uint8_t> out(sizeof(resp) + resp.n * sizeof(mroce_counter));
  std::memcpy(out.data(), &resp, sizeof(resp));
  for (uint32_t i = 0; i < resp.n; i++) {
    mroce_counter m{};
    std::strncpy(m.name, list[i].name.c_str(), sizeof(m.name) - 1);
    m.value = list[i].value;
    std::memcpy(out.data() + sizeof(resp) + i * sizeof(m), &m, sizeof(m));
  }
  write_output(a, out.data(), out.size());
}

void DeviceModel::admin_query_qp_transport(Admin& a) {
  fw::QpTransportStats t;
  if (int err = nic_->qp_transport(a.cmd.handle, clock_.read(), &t))
    return refuse(a, err, err == ENOENT ? MROCE_SYN_NO_SUCH_OBJECT : MROCE_SYN_ENGINE);
  mroce_qp_transport_resp r{};
  r.srtt_ns = t.srtt;
  r.min_rtt_ns = t.min_rtt;
  r.rttvar_ns = t.rttvar;
  r.rto_ns = t.rto;
  r.cwnd_bytes = t.cwnd_bytes;
  r.pacing_rate_bps = t.pacing_rate_bps;
  r.bytes_in_flight = t.bytes_in_flight;
  r.pkts_in_flight = t.pkts_in_flight;
  r.lost = t.lost;
  r.qp_state = static_cast<uint8_t>(t.state);
  r.error_status = static_cast<uint8_t>(t.error_status);
  r.num_paths = static_cast<uint32_t>(std::min<size_t>(t.path_weights.size(), MROCE_MAX_PATHS));
  std::strncpy(r.cc, t.cc.c_str(), sizeof(r.cc) - 1);
  for (uint32_t i = 0; i < r.num_paths; i++)
    r.path_weight_ppm[i] = static_cast<uint32_t>(t.path_weights[i] * 1e6 + 0.5);
  write_output(a, &r, sizeof(r));
}

}  // namespace metaroce::hw
