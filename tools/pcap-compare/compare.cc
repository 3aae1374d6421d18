#include "tools/pcap-compare/compare.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "firmware-model/engine/types.h"
#include "tools/pcap-compare/reference.h"
#include "tools/pcap-compare/rules.h"

namespace metaroce::pcapcmp {
namespace {

using proto::Opcode;
using proto::Packet;

enum class Side : uint8_t { kPeer, kDut, kOther };

struct Item {
  const pcap::Record* rec = nullptr;
  Side side = Side::kOther;
  std::optional<proto::Frame> frame;        // parsed by the codec
  std::optional<proto::ParseError> error;   // a MetaRoCE frame the codec refused
  const Packet& p() const { return frame->packet; }
};

bool is_request(Opcode op) {
  switch (op) {
    case Opcode::kSend: case Opcode::kSendImm: case Opcode::kSendInv: case Opcode::kWrite: case Opcode::kWriteImm:
    case Opcode::kReadReq: case Opcode::kAtomicCmpSwap: case Opcode::kAtomicFetchAdd: return true;
    default: return false;
  }
}
bool is_response(Opcode op) {
  switch (op) {
    case Opcode::kAck: case Opcode::kNack: case Opcode::kReadResp: case Opcode::kAtomicResp:
    case Opcode::kProbeReply: return true;
    default: return false;
  }
}
bool is_cm(Opcode op) { return op >= Opcode::kCmReq && op <= Opcode::kCmDrep; }
// Datagrams (protocol.md §13) are not RC conversations: not paired or compared.
bool is_ud(Opcode op) { return op == Opcode::kUdSend || op == Opcode::kUdSendImm; }
bool not_rc(Opcode op) { return is_cm(op) || is_ud(op); }
bool receive_consuming(Opcode op) {
  return op == Opcode::kSend || op == Opcode::kSendImm || op == Opcode::kSendInv ||
         op == Opcode::kWriteImm;
}
bool is_atomic(Opcode op) { return op == Opcode::kAtomicCmpSwap || op == Opcode::kAtomicFetchAdd; }

std::string hex(uint64_t v, int width = 0) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%0*" PRIx64, width, v);
  return b;
}
std::string qpn(uint32_t q) { return hex(q, 6); }

std::string ip_text(const proto::IpAddr& a) {
  char b[INET6_ADDRSTRLEN] = "?";
  if (a.is_v4()) {
    uint32_t v = htonl(a.v4_host_order());
    inet_ntop(AF_INET, &v, b, sizeof b);
  } else {
    inet_ntop(AF_INET6, a.bytes.data(), b, sizeof b);
  }
  return b;
}

// ---- sides and parsing ----

// Errors in the Ethernet/IP/UDP headers before the port is known: not ours.
bool not_metaroce(const proto::ParseError& e) {
  using proto::ParseErrorCode;
  if (e.code == ParseErrorCode::kNotIp || e.code == ParseErrorCode::kNotUdp ||
      e.code == ParseErrorCode::kWrongPort || e.code == ParseErrorCode::kBadIpHeader)
    return true;
  if (e.code != ParseErrorCode::kTruncated) return false;
  std::string w = e.where;
  return w == "Ethernet" || w == "VLAN" || w == "IPv4" || w == "IPv6" || w == "UDP";
}

proto::MacAddr mac_at(std::span<const uint8_t> f, size_t off) {
  proto::MacAddr m{};
  if (f.size() >= off + 6) std::copy_n(f.begin() + static_cast<long>(off), 6, m.begin());
  return m;
}

Side side_of(const Item& it, const Options& o, const std::optional<proto::MacAddr>& dut_mac) {
  std::span<const uint8_t> f = it.rec->frame;
  if (it.frame && o.dut_ip) {
    if (it.frame->headers.src_ip == *o.dut_ip) return Side::kDut;
    if (it.frame->headers.dst_ip == *o.dut_ip) return Side::kPeer;
    return Side::kOther;
  }
  if (!dut_mac) return Side::kOther;
  if (mac_at(f, 6) == *dut_mac) return Side::kDut;
  if (mac_at(f, 0) == *dut_mac) return Side::kPeer;
  return Side::kOther;
}

int classify(const pcap::Capture& cap, const Options& o, std::vector<Item>* items, Report* r,
             std::string* why) {
  std::optional<proto::MacAddr> dut_mac = o.dut_mac;
  for (const pcap::Record& rec : cap.records) {
    Item it;
    it.rec = &rec;
    auto parsed = proto::parse_frame(rec.frame);
    if (parsed) it.frame = parsed.value();
    else if (!not_metaroce(parsed.error())) it.error = parsed.error();
    if (it.frame || it.error) {
      if (rec.cut())
        return *why = "frame " + std::to_string(rec.number) + " is cut at " +
                      std::to_string(rec.frame.size()) + " of " + std::to_string(rec.orig_len) +
                      " bytes by the capture's snaplen: capture again with -s 0", EINVAL;
      ++r->metaroce;
    } else {
      ++r->other;
    }
    if (it.frame && o.dut_ip && !dut_mac && it.frame->headers.src_ip == *o.dut_ip)
      dut_mac = it.frame->headers.src_mac;  // to place frames the codec refuses
    items->push_back(std::move(it));
  }
  for (Item& it : *items)
    if (it.frame || it.error) it.side = side_of(it, o, dut_mac);
  r->frames = cap.records.size();
  return 0;
}

// ---- one QP pair: what the capture says about it ----

struct AckState {
  proto::Ackh ack;
  uint32_t ce_added = 0;  // CE count the reference's ACK after this packet carried
};

struct Pending {
  const Item* item;
  uint64_t fed;  // peer packets of this pair the capture showed before it
};

struct Conv {
  uint32_t dut_qpn = 0, peer_qpn = 0, ref_qpn = 0;
  QpMirror mirror;
  std::unique_ptr<Reference> ref;
  std::map<uint32_t, int> rnr_left;         // PSN -> RNR NACKs the DUT sent for it
  std::map<uint32_t, uint32_t> recv_len;    // receive MSN -> message length
  uint32_t recv_posted = 0;                 // receive WQEs posted (MSN of the next)
  std::multimap<uint32_t, const Item*> read_resps;  // PSN -> the DUT's READ_RESPs
  std::map<uint32_t, uint64_t> atomic_orig;  // PSN -> the DUT's ATOMIC_RESP value
  std::vector<AckState> states;              // [k]: after k peer packets
  std::vector<uint64_t> ce_sum;              // prefix sums of ce_added
  std::vector<uint64_t> fed_number;          // [k-1]: frame number of the k-th fed
  std::vector<Pending> dut;                  // DUT responses, capture order
  std::vector<const Item*> requests;         // the peer's requests (learning)
  bool have_rq = false, have_sq = false, have_rnr = false;
  // The lowest receive and read MSN of the peer's requests: 0 unless the
  // capture started after the QP's first messages.
  std::optional<uint32_t> first_recv_msn, first_read_msn;
  uint64_t unseen = 0;       // acknowledged request PSNs the capture lacks
  uint32_t first_unseen = 0;
};

uint32_t round_mtu(uint32_t n) {
  uint32_t m = 256;
  while (m < n && m < 4096) m <<= 1;
  return m;
}

void learn_psns(Conv& c, const Item& it) {
  const proto::Mbth& m = it.p().mbth;
  if (it.side == Side::kPeer && is_request(m.opcode)) {
    if (!c.have_rq || proto::seq_lt(m.psn, c.mirror.rq_psn)) c.mirror.rq_psn = m.psn;
    c.have_rq = true;
  } else if (it.side == Side::kDut && is_request(m.opcode)) {
    if (!c.have_sq || proto::seq_lt(m.psn, c.mirror.sq_psn)) c.mirror.sq_psn = m.psn;
    c.have_sq = true;
  }
}

// Path MTU: the payload of any packet that is not its message's last.
void learn_mtu(std::vector<Conv>& convs, const std::vector<Item>& items) {
  for (Conv& c : convs) {
    uint32_t full = 0, any = 0;
    for (const Item& it : items) {
      if (!it.frame || it.side == Side::kOther) continue;
      const Packet& p = it.p();
      bool ours = it.side == Side::kPeer ? p.mbth.dest_qpn == c.dut_qpn : p.mbth.dest_qpn == c.peer_qpn;
      bool data = (it.side == Side::kPeer && is_request(p.mbth.opcode)) ||
                  (it.side == Side::kDut && p.mbth.opcode == Opcode::kReadResp);
      if (!ours || !data) continue;
      uint32_t n = static_cast<uint32_t>(p.payload.size());
      any = std::max(any, n);
      if (!(p.mbth.flags & proto::kFlagLast)) full = std::max(full, n);
    }
    c.mirror.path_mtu = round_mtu(full ? full : any);
  }
}

// Which of the peer's requests the DUT accepted: acknowledged (below the
// highest cum_psn or SACKed) or answered with data.
struct Accepted {
  bool have_cum = false;
  uint32_t cum = 0;
  std::set<uint32_t> psns;  // SACKed or answered; only PSNs the peer sent (bounded)
  bool has(uint32_t psn, uint32_t rq_psn) const {
    return (have_cum && proto::seq_le(rq_psn, psn) && proto::seq_lt(psn, cum)) || psns.count(psn);
  }
};

void learn_accepted(const Packet& p, const std::set<uint32_t>& sent, Accepted* a) {
  if (p.mbth.opcode == Opcode::kReadResp || p.mbth.opcode == Opcode::kAtomicResp) {
    if (sent.count(p.mbth.psn)) a->psns.insert(p.mbth.psn);
    return;
  }
  if (p.mbth.opcode != Opcode::kAck) return;
  if (!a->have_cum || proto::seq_lt(a->cum, p.ack.cum_psn)) a->cum = p.ack.cum_psn;
  a->have_cum = true;
  for (uint32_t i = 0; i < 64; ++i)
    if ((p.ack.sack >> i & 1) && sent.count(p.ack.cum_psn + 1 + i)) a->psns.insert(p.ack.cum_psn + 1 + i);
}

// The MRs the peer's requests name, from the requests the DUT accepted
// (the DUT's MR table is not in the capture: a key it refused is unknown).
void learn_keys(Conv& c, const Accepted& accepted) {
  std::map<uint32_t, QpMirror::Key> keys;
  for (const Item* it : c.requests) {
    const Packet& p = it->p();
    if (!accepted.has(p.mbth.psn, c.mirror.rq_psn)) continue;
    uint32_t rkey, access;
    uint64_t lo, len;
    Opcode op = p.mbth.opcode;
    if (op == Opcode::kWrite || op == Opcode::kWriteImm || op == Opcode::kReadReq) {
      rkey = p.reth.rkey, lo = p.reth.va, len = p.reth.length;
      access = op == Opcode::kReadReq ? fw::kAccessRemoteRead : fw::kAccessRemoteWrite;
    } else if (is_atomic(op)) {
      rkey = p.atomic.rkey, lo = p.atomic.va, len = 8, access = fw::kAccessRemoteAtomic;
    } else {
      continue;
    }
    if (rkey == 0 || len == 0) continue;
    uint64_t hi = lo + std::min(len, ~lo);
    auto [k, fresh] = keys.try_emplace(rkey, QpMirror::Key{rkey, lo, hi, access});
    if (!fresh) {
      k->second.addr = std::min(k->second.addr, lo);
      k->second.length = std::max(k->second.length, hi);  // high end until the loop ends
      k->second.access |= access;
    }
  }
  constexpr uint64_t kMaxMr = uint64_t{1} << 40;  // DeviceCaps::max_mr_size
  for (auto& [key, k] : keys) {
    k.length = std::min(k.length - k.addr, kMaxMr);
    c.mirror.keys.push_back(k);
  }
}

void learn_responses(Conv& c, const Item& it) {
  const Packet& p = it.p();
  switch (p.mbth.opcode) {
    case Opcode::kNack:
      if (p.nack.reason == proto::NackReason::kRnr) {
        ++c.rnr_left[p.nack.psn];
        if (!c.have_rnr) c.mirror.min_rnr_timer = p.nack.rnr_timer;
        c.have_rnr = true;
      }
      break;
    case Opcode::kReadResp: c.read_resps.emplace(p.mbth.psn, &it); break;
    case Opcode::kAtomicResp: c.atomic_orig.emplace(p.mbth.psn, p.atomic_ack.original); break;
    default: break;
  }
}

// Which DUT QP talks to which peer QP: given, or the only pair there is.
int pair_qps(const std::vector<Item>& items, const Options& o, std::vector<Conv>* convs,
             std::string* why) {
  std::map<uint32_t, const Item*> dut_qps;  // QPN -> a packet addressed to it
  std::map<uint32_t, uint64_t> peer_qps;     // QPN -> DUT packets addressed to it
  for (const Item& it : items) {
    if (!it.frame || it.side == Side::kOther || not_rc(it.p().mbth.opcode)) continue;
    if (it.side == Side::kPeer) dut_qps.emplace(it.p().mbth.dest_qpn, &it);
    else ++peer_qps[it.p().mbth.dest_qpn];
  }
  std::vector<std::pair<uint32_t, uint32_t>> pairs = o.pairs;
  if (pairs.empty()) {
    // One DUT QP: its peer is the QPN the DUT addresses most (a packet to
    // another is then compared, and its dest_qpn named).
    auto most = std::max_element(peer_qps.begin(), peer_qps.end(),
                                 [](auto& a, auto& b) { return a.second < b.second; });
    if (dut_qps.size() != 1 || most == peer_qps.end()) {
      std::string d, p;
      for (auto& [q, it] : dut_qps) d += " " + qpn(q);
      for (auto& [q, it] : peer_qps) p += " " + qpn(q);
      return *why = "cannot pair the QPs alone: DUT QPNs {" + d + " } peer QPNs {" + p +
                    " }; name each pair with --pair DUT_QPN:PEER_QPN", EINVAL;
    }
    pairs.emplace_back(dut_qps.begin()->first, most->first);
  }
  for (auto [dq, pq] : pairs) {
    auto it = dut_qps.find(dq);
    if (it == dut_qps.end()) return *why = "no peer packet is addressed to DUT QPN " + qpn(dq), EINVAL;
    Conv c;
    c.dut_qpn = dq;
    c.peer_qpn = pq;
    c.mirror.peer_qpn = pq;
    c.mirror.peer_ip = it->second->frame->headers.src_ip;
    c.mirror.dut_ip = it->second->frame->headers.dst_ip;
    convs->push_back(std::move(c));
  }
  return 0;
}

Conv* conv_of(std::vector<Conv>& convs, const Item& it) {
  if (!it.frame) return nullptr;
  uint32_t q = it.p().mbth.dest_qpn;
  for (Conv& c : convs)
    if (it.side == Side::kPeer ? c.dut_qpn == q : c.peer_qpn == q) return &c;
  if (it.side != Side::kDut) return nullptr;
  // A DUT packet to a QPN of no pair: the pair of its peer address, if one.
  Conv* by_ip = nullptr;
  for (Conv& c : convs) {
    if (!(c.mirror.peer_ip == it.frame->headers.dst_ip)) continue;
    if (by_ip) return nullptr;
    by_ip = &c;
  }
  return by_ip;
}

// Request PSNs below the DUT's highest cum_psn that the capture does not
// hold: frames the capture lost (or PSNs the DUT acknowledged unsent).
uint64_t unseen_acked(const Conv& c, const std::set<uint32_t>& sent, const Accepted& a, uint32_t* first) {
  if (!a.have_cum) return 0;
  uint32_t span = a.cum - c.mirror.rq_psn;
  if (span > 0x7FFFFFFFu) return 0;  // cum_psn below rq_psn: compared (and named) later
  std::set<uint32_t> rel;  // PSNs as offsets from rq_psn, in serial order
  for (uint32_t p : sent)
    if (p - c.mirror.rq_psn < span) rel.insert(p - c.mirror.rq_psn);
  uint32_t expect = 0;
  for (uint32_t r : rel) {
    if (r != expect) break;
    ++expect;
  }
  *first = c.mirror.rq_psn + expect;
  return span - rel.size();
}

void learn(std::vector<Conv>& convs, const std::vector<Item>& items) {
  std::map<Conv*, std::set<uint32_t>> sent;  // the peer's request PSNs
  for (const Item& it : items) {
    Conv* c = conv_of(convs, it);
    if (!c || not_rc(it.p().mbth.opcode)) continue;
    learn_psns(*c, it);
    const Packet& p = it.p();
    if (it.side == Side::kPeer && is_request(p.mbth.opcode)) {
      c->requests.push_back(&it);
      sent[c].insert(p.mbth.psn);
      bool read = p.mbth.opcode == Opcode::kReadReq || is_atomic(p.mbth.opcode);
      auto& first = read ? c->first_read_msn : c->first_recv_msn;  // WRITE: the receive MSN
      first = std::min(first.value_or(p.mbth.msn), p.mbth.msn);
      if (receive_consuming(p.mbth.opcode)) {
        uint32_t len = p.mbth.opcode == Opcode::kWriteImm ? 0 : p.seth.length;
        uint32_t& l = c->recv_len[p.mbth.msn];
        l = std::max(l, len);
      }
    } else if (it.side == Side::kDut) {
      learn_responses(*c, it);
    }
  }
  std::map<Conv*, Accepted> accepted;
  for (const Item& it : items) {
    Conv* c = conv_of(convs, it);
    if (c && it.side == Side::kDut) learn_accepted(it.p(), sent[c], &accepted[c]);
  }
  learn_mtu(convs, items);
  for (Conv& c : convs) {
    learn_keys(c, accepted[&c]);
    c.unseen = unseen_acked(c, sent[&c], accepted[&c], &c.first_unseen);
  }
}

// ---- replay ----

constexpr uint64_t kStart = 1'000'000;  // virtual ns of the first frame

// Receive WQEs: one per receive-consuming message, posted when the DUT
// accepted a packet of it (its RNR NACKs say when it had none).
void post_receives(Conv& c, const Packet& p) {
  if (!receive_consuming(p.mbth.opcode)) return;
  auto rnr = c.rnr_left.find(p.mbth.psn);
  if (rnr != c.rnr_left.end() && rnr->second > 0) {
    --rnr->second;
    return;
  }
  constexpr uint32_t kMaxAhead = 4096;  // the QP's receive queue
  while (proto::seq_le(c.recv_posted, p.mbth.msn) && p.mbth.msn - c.recv_posted < kMaxAhead) {
    auto len = c.recv_len.find(c.recv_posted);
    c.ref->post_recv(len == c.recv_len.end() ? 0 : len->second);
    ++c.recv_posted;
  }
}

// Memory the capture does not determine takes the DUT's answer.
void seed_memory(Conv& c, const Packet& p) {
  if (p.mbth.opcode == Opcode::kReadReq) {
    auto [lo, hi] = c.read_resps.equal_range(p.mbth.psn);
    for (auto it = lo; it != hi; ++it) {
      const Packet& r = it->second->p();
      if (r.mbth.offset < p.mbth.offset) continue;
      c.ref->memory().seed(p.reth.va + (r.mbth.offset - p.mbth.offset), r.payload);
    }
  } else if (is_atomic(p.mbth.opcode)) {
    auto it = c.atomic_orig.find(p.mbth.psn);
    if (it == c.atomic_orig.end()) return;
    uint8_t v[8];
    std::memcpy(v, &it->second, 8);  // host order, as the engine keeps it
    c.ref->memory().seed(p.atomic.va, v);
  }
}

void record_state(Conv& c, size_t sent_before) {
  const auto& sent = c.ref->sent();
  AckState s = c.states.back();
  s.ce_added = 0;
  for (size_t i = sent_before; i < sent.size(); ++i) {
    if (sent[i].packet.mbth.opcode != Opcode::kAck) continue;
    s.ack = sent[i].packet.ack;
    s.ce_added = sent[i].packet.ack.ce_count;
  }
  c.states.push_back(s);
  c.ce_sum.push_back(c.ce_sum.back() + s.ce_added);
}

// The peer's packet with the reference's QPN and the A flag, so that the
// reference states its ACK after every packet (compared at matching points).
void feed(Conv& c, const Item& it, uint64_t t) {
  proto::Frame f = *it.frame;
  f.packet.mbth.dest_qpn = c.ref_qpn;
  if (is_request(f.packet.mbth.opcode)) f.packet.mbth.flags |= proto::kFlagAckReq;
  std::vector<uint8_t> buf(proto::encap_length(f.headers) + proto::transport_length(f.packet));
  buf.resize(proto::build_frame(f.headers, f.packet, buf));
  post_receives(c, it.p());
  seed_memory(c, it.p());
  size_t before = c.ref->sent().size();
  c.ref->feed(t, buf);
  c.fed_number.push_back(it.rec->number);
  record_state(c, before);
}

int start(Conv& c, const Options& o, uint64_t capture_bytes, std::string* why) {
  // What the reference may send: a few times what the capture holds.
  uint64_t bound = std::max<uint64_t>(uint64_t{64} << 20, 4 * capture_bytes);
  c.ref = std::make_unique<Reference>(o.max_pages, bound);
  if (int e = c.ref->setup(c.mirror, &c.ref_qpn, why)) return *why = "reference QP: " + *why, e;
  AckState s0;
  s0.ack.cum_psn = c.mirror.rq_psn;
  c.states = {s0};
  c.ce_sum = {0};
  return 0;
}

void replay(std::vector<Conv>& convs, const std::vector<Item>& items, Report* r) {
  uint64_t t0 = items.empty() ? 0 : items.front().rec->time_ns, last = kStart;
  for (const Item& it : items) {
    if (it.side == Side::kOther) continue;
    uint64_t t = kStart + (it.rec->time_ns >= t0 ? it.rec->time_ns - t0 : 0);
    last = std::max(last, t);
    Conv* c = conv_of(convs, it);
    Opcode op = it.frame ? it.p().mbth.opcode : Opcode::kAck;
    if (it.side == Side::kPeer) {
      if (c && (is_request(op) || op == Opcode::kProbe)) {
        feed(*c, it, t);
        ++r->peer_replayed;
      } else {
        ++r->peer_not_replayed;
      }
    } else if (it.frame && is_cm(op)) {
      ++r->dut_cm;
    } else if (it.frame && is_ud(op)) {
      ++r->dut_ud;
    } else if (it.frame && (is_request(op) || op == Opcode::kProbe)) {
      ++r->dut_requests;
    } else if (c && is_response(op)) {
      c->dut.push_back({&it, c->ref->fed()});
    } else if (it.frame) {
      ++r->dut_unpaired;  // a response to a QP of no pair (with --pair)
    }
  }
  for (Conv& c : convs) c.ref->drain(last + 10'000'000'000ull, 10'000'000);
}

// ---- comparison ----

struct Diff {
  std::string field, expected, actual;
};

void check(std::vector<Diff>& d, const char* field, uint64_t want, uint64_t got, bool as_hex = false) {
  if (want == got) return;
  d.push_back({field, as_hex ? hex(want) : std::to_string(want), as_hex ? hex(got) : std::to_string(got)});
}

std::vector<Diff> diff_ack(const Conv& c, size_t k, uint64_t ce, const Packet& dut) {
  const proto::Ackh& w = c.states[k].ack;
  const proto::Ackh& g = dut.ack;
  std::vector<Diff> d;
  check(d, "mbth.dest_qpn", c.peer_qpn, dut.mbth.dest_qpn, true);
  check(d, "ack.cum_psn", w.cum_psn, g.cum_psn);
  check(d, "ack.sack", w.sack, g.sack, true);
  check(d, "ack.rcv_msn", w.rcv_msn, g.rcv_msn);
  check(d, "ack.ack_flags.D", (w.ack_flags >> 1) & 1, (g.ack_flags >> 1) & 1);
  check(d, "ack.ack_flags.C", w.ack_flags & 1, g.ack_flags & 1);
  check(d, "ack.echo_ts", w.echo_ts, g.echo_ts);
  check(d, "ack.echo_path", w.echo_path, g.echo_path);
  check(d, "ack.ce_count", std::min<uint64_t>(ce, 65535), g.ce_count);
  return d;
}

struct Verdict {
  std::vector<Diff> diffs;
  uint64_t peer_packet = 0;
  std::string context;
};

std::string state_text(const Conv& c, size_t k) {
  if (k == 0) return "the reference's state before any peer packet";
  return "the reference's ACK after peer packet " + std::to_string(c.fed_number[k - 1]);
}

// How far a candidate prefix is from the DUT's ACK: the triggering
// packet's echoes (which say when the ACK was made) weigh more than the
// state fields, so a wrong cum_psn is named as such and not as the echo of
// a neighbouring prefix whose cum_psn it happens to equal.
size_t distance(const std::vector<Diff>& d) {
  size_t n = 0;
  for (const Diff& x : d)
    n += (x.field == "ack.echo_ts" || x.field == "ack.echo_path" || x.field == "ack.ack_flags.D") ? 64 : 1;
  return n;
}

// The latest prefix in [k_last, fed] whose state the ACK shows; else the
// prefix it is nearest to.
// An ACK's lag behind the newest packet the capture showed is bounded by
// the DUT's receive queue; kAckWindow bounds the search (and its cost on a
// hostile capture whose ACKs match nothing).
constexpr size_t kAckWindow = 65536;

Verdict compare_ack(const Conv& c, size_t* k_last, const Pending& pd) {
  size_t hi = std::min<size_t>(pd.fed, c.states.size() - 1), best = hi, best_n = 0;
  size_t lo = std::max(*k_last, hi >= kAckWindow ? hi - kAckWindow : 0);
  std::vector<Diff> best_d;
  bool have = false;
  for (size_t k = hi + 1; k-- > lo;) {
    auto d = diff_ack(c, k, c.ce_sum[k] - c.ce_sum[*k_last], pd.item->p());
    size_t n = distance(d);
    if (!have || n < best_n) best = k, best_d = std::move(d), best_n = n, have = true;
    if (best_d.empty()) break;
  }
  *k_last = best;
  return {best_d, best ? c.fed_number[best - 1] : 0, state_text(c, best)};
}

struct RefIndex {
  std::vector<const RefPacket*> nacks;
  std::vector<bool> nack_used;
  std::map<uint64_t, const RefPacket*> reads;  // psn << 32 | offset
  std::set<uint64_t> reads_seen;
  std::map<uint32_t, const RefPacket*> atomics, probes;  // psn; nonce
  std::set<uint32_t> atomics_seen, probes_seen;
};

RefIndex index(const Conv& c) {
  RefIndex x;
  for (const RefPacket& r : c.ref->sent()) {
    const proto::Mbth& m = r.packet.mbth;
    switch (m.opcode) {
      case Opcode::kNack: x.nacks.push_back(&r); break;
      case Opcode::kReadResp: x.reads.emplace(uint64_t{m.psn} << 32 | m.offset, &r); break;
      case Opcode::kAtomicResp: x.atomics.emplace(m.psn, &r); break;
      case Opcode::kProbeReply: x.probes.emplace(r.packet.probe.nonce, &r); break;
      default: break;
    }
  }
  x.nack_used.assign(x.nacks.size(), false);
  return x;
}

uint64_t fed_frame(const Conv& c, uint64_t after_fed) {
  return after_fed ? c.fed_number[after_fed - 1] : 0;
}

std::string nack_text(const Packet& p) {
  return std::string("NACK ") + proto::to_string(p.nack.reason) + " psn " + std::to_string(p.nack.psn);
}

Verdict compare_nack(const Conv& c, RefIndex& x, const Pending& pd) {
  const Packet& g = pd.item->p();
  size_t pick = x.nacks.size();
  for (size_t i = 0; i < x.nacks.size() && pick == x.nacks.size(); ++i)
    if (!x.nack_used[i] && x.nacks[i]->after_fed <= pd.fed && x.nacks[i]->packet.nack.psn == g.nack.psn)
      pick = i;
  for (size_t i = 0; i < x.nacks.size() && pick == x.nacks.size(); ++i)
    if (!x.nack_used[i] && x.nacks[i]->after_fed <= pd.fed) pick = i;
  if (pick == x.nacks.size())
    return {{{"nack", "no NACK (the reference accepted or dropped every packet so far)", nack_text(g)}},
            0, "the reference's answers up to this point"};
  x.nack_used[pick] = true;
  const Packet& w = x.nacks[pick]->packet;
  std::vector<Diff> d;
  check(d, "mbth.dest_qpn", c.peer_qpn, g.mbth.dest_qpn, true);
  check(d, "nack.psn", w.nack.psn, g.nack.psn);
  if (w.nack.reason != g.nack.reason)
    d.push_back({"nack.reason", proto::to_string(w.nack.reason), proto::to_string(g.nack.reason)});
  else if (w.nack.reason == proto::NackReason::kRnr)
    check(d, "nack.rnr_timer", w.nack.rnr_timer, g.nack.rnr_timer);
  return {d, fed_frame(c, x.nacks[pick]->after_fed), "the reference's " + nack_text(w)};
}

void diff_payload(std::vector<Diff>& d, const RefPacket& w, const Packet& g) {
  if (w.payload.size() != g.payload.size()) {
    check(d, "read_resp.payload.length", w.payload.size(), g.payload.size());
    return;
  }
  auto m = std::mismatch(w.payload.begin(), w.payload.end(), g.payload.begin());
  if (m.first == w.payload.end()) return;
  size_t at = static_cast<size_t>(m.first - w.payload.begin());
  d.push_back({"read_resp.payload", "byte " + std::to_string(at) + " = " + hex(*m.first, 2),
               "byte " + std::to_string(at) + " = " + hex(*m.second, 2)});
}

Verdict compare_read(const Conv& c, RefIndex& x, const Pending& pd) {
  const Packet& g = pd.item->p();
  uint64_t key = uint64_t{g.mbth.psn} << 32 | g.mbth.offset;
  auto it = x.reads.find(key);
  if (it == x.reads.end()) {
    auto same_psn = x.reads.lower_bound(uint64_t{g.mbth.psn} << 32);
    bool psn_known = same_psn != x.reads.end() && same_psn->first >> 32 == g.mbth.psn;
    if (psn_known)
      return {{{"read_resp.mbth.offset", "an offset the reference sent for this PSN (first: " +
                    std::to_string(same_psn->second->packet.mbth.offset) + ")",
                std::to_string(g.mbth.offset)}}, fed_frame(c, same_psn->second->after_fed),
              "the reference's READ_RESPs for psn " + std::to_string(g.mbth.psn)};
    return {{{"read_resp.mbth.psn", "the PSN of a READ_REQ the reference answered",
              std::to_string(g.mbth.psn)}}, 0, "the reference's READ_RESPs"};
  }
  x.reads_seen.insert(key);
  const RefPacket& w = *it->second;
  std::vector<Diff> d;
  check(d, "mbth.dest_qpn", c.peer_qpn, g.mbth.dest_qpn, true);
  check(d, "read_resp.mbth.msn", w.packet.mbth.msn, g.mbth.msn);
  check(d, "read_resp.mbth.flags.L", (w.packet.mbth.flags & proto::kFlagLast) != 0,
        (g.mbth.flags & proto::kFlagLast) != 0);
  diff_payload(d, w, g);
  return {d, fed_frame(c, w.after_fed), "the reference's READ_RESP psn " + std::to_string(g.mbth.psn) +
                                            " offset " + std::to_string(g.mbth.offset)};
}

Verdict compare_keyed(const Conv& c, const std::map<uint32_t, const RefPacket*>& refs,
                      std::set<uint32_t>& seen, uint32_t key, const Pending& pd) {
  const Packet& g = pd.item->p();
  bool atomic = g.mbth.opcode == Opcode::kAtomicResp;
  auto it = refs.find(key);
  if (it == refs.end())
    return {{{atomic ? "atomic_resp" : "probe_reply", "no such response from the reference",
              std::string(proto::to_string(g.mbth.opcode)) + (atomic ? " psn " : " nonce ") +
                  std::to_string(key)}}, 0, "the reference's responses"};
  seen.insert(key);
  const Packet& w = it->second->packet;
  std::vector<Diff> d;
  check(d, "mbth.dest_qpn", c.peer_qpn, g.mbth.dest_qpn, true);
  if (atomic) {
    check(d, "atomic_resp.mbth.msn", w.mbth.msn, g.mbth.msn);
    check(d, "atomic_resp.original", w.atomic_ack.original, g.atomic_ack.original, true);
  } else {
    check(d, "probe_reply.echo_ts", w.probe.echo_ts, g.probe.echo_ts);
  }
  return {d, fed_frame(c, it->second->after_fed), "the reference's answer"};
}

std::string what_of(const Packet& p) {
  return std::string(proto::to_string(p.mbth.opcode)) + " to QPN " + qpn(p.mbth.dest_qpn);
}

void note(Report* r, Divergence d, uint64_t position, uint64_t* first_pos) {
  ++r->divergences;
  if (r->first && position >= *first_pos) return;
  *first_pos = position;
  r->first = std::move(d);
}

void report_verdict(Report* r, const Pending& pd, Verdict v, uint64_t* first_pos) {
  ++r->dut_compared;
  if (v.diffs.empty()) {
    ++r->dut_matched;
    return;
  }
  Diff& d = v.diffs.front();
  note(r, {pd.item->rec->number, v.peer_packet, what_of(pd.item->p()), d.field, d.expected, d.actual,
           v.context}, pd.item->rec->number, first_pos);
}

// Responses the reference sent that the DUT never did.
void report_missing(const Conv& c, const RefIndex& x, Report* r, uint64_t* first_pos) {
  auto missing = [&](const RefPacket& w, const char* field, std::string expected) {
    uint64_t peer = fed_frame(c, w.after_fed);
    note(r, {0, peer, std::string(proto::to_string(w.packet.mbth.opcode)) + " to QPN " + qpn(c.peer_qpn),
             field, std::move(expected), "not in the capture (not sent, or lost by the capture)", "the reference's answer to peer packet " +
             std::to_string(peer)}, peer, first_pos);
  };
  for (auto& [key, w] : x.reads)
    if (!x.reads_seen.count(key))
      missing(*w, "read_resp", "READ_RESP psn " + std::to_string(key >> 32) + " offset " +
                                   std::to_string(key & 0xFFFFFFFF));
  for (auto& [psn, w] : x.atomics)
    if (!x.atomics_seen.count(psn)) missing(*w, "atomic_resp", "ATOMIC_RESP psn " + std::to_string(psn));
  for (auto& [nonce, w] : x.probes)
    if (!x.probes_seen.count(nonce)) missing(*w, "probe_reply", "PROBE_REPLY nonce " + std::to_string(nonce));
  for (size_t i = 0; i < x.nacks.size(); ++i)
    if (!x.nack_used[i] && x.nacks[i]->packet.nack.reason != proto::NackReason::kSequenceError)
      missing(*x.nacks[i], "nack", nack_text(x.nacks[i]->packet));  // SEQUENCE_ERROR is a SHOULD
}

void compare_conv(const Conv& c, Report* r, uint64_t* first_pos) {
  RefIndex x = index(c);
  size_t k_last = 0;
  for (const Pending& pd : c.dut) {
    const Packet& g = pd.item->p();
    Verdict v;
    switch (g.mbth.opcode) {
      case Opcode::kAck: v = compare_ack(c, &k_last, pd); break;
      case Opcode::kNack: v = compare_nack(c, x, pd); break;
      case Opcode::kReadResp: v = compare_read(c, x, pd); break;
      case Opcode::kAtomicResp: v = compare_keyed(c, x.atomics, x.atomics_seen, g.mbth.psn, pd); break;
      default: v = compare_keyed(c, x.probes, x.probes_seen, g.probe.nonce, pd); break;
    }
    report_verdict(r, pd, std::move(v), first_pos);
  }
  report_missing(c, x, r, first_pos);
}

// A DUT frame the codec refuses is a divergence of its own.
const char* field_of(const proto::ParseError& e) {
  using proto::ParseErrorCode;
  switch (e.code) {
    case ParseErrorCode::kBadIcrc: return "icrc";
    case ParseErrorCode::kBadUdpChecksum: return "udp.checksum";
    case ParseErrorCode::kBadVersion: return "mbth.version";
    case ParseErrorCode::kUnknownOpcode: return "mbth.opcode";
    default: return "length";
  }
}

void compare_malformed(const std::vector<Item>& items, Report* r, uint64_t* first_pos) {
  for (const Item& it : items) {
    if (it.side != Side::kDut || !it.error) continue;
    ++r->dut_compared;
    note(r, {it.rec->number, 0, "a frame from the DUT", field_of(*it.error),
             "a packet the codec accepts", it.error->message(), "proto/packet.h parse_frame"},
         it.rec->number, first_pos);
  }
}

}  // namespace

int compare_capture(const pcap::Capture& cap, const Options& o, Report* r, std::string* why) {
  *r = Report{};
  if (!o.dut_ip && !o.dut_mac) return *why = "say which side is the DUT: --dut-ip ADDR or --dut-mac MAC", EINVAL;
  std::vector<Item> items;
  if (int e = classify(cap, o, &items, r, why)) return e;
  std::vector<Conv> convs;
  if (int e = pair_qps(items, o, &convs, why)) return e;
  learn(convs, items);
  for (Conv& c : convs) {
    if (c.first_recv_msn.value_or(0) || c.first_read_msn.value_or(0))
      return *why = "the capture starts after QPN " + qpn(c.dut_qpn) + " exchanged its first "
                    "messages (the first request MSNs it shows are " +
                    std::to_string(c.first_recv_msn.value_or(0)) + " (receive) and " +
                    std::to_string(c.first_read_msn.value_or(0)) + " (read), not 0): start "
                    "the capture before the QP connects", EINVAL;
    if (c.unseen)
      return *why = "the capture is incomplete: the DUT acknowledged " + std::to_string(c.unseen) +
                    " request PSNs to QPN " + qpn(c.dut_qpn) + " that it does not hold (first: " +
                    std::to_string(c.first_unseen) + "). The capture lost frames (capture with a "
                    "larger buffer, e.g. dumpcap -B 64, or at a lower rate), or the DUT "
                    "acknowledged PSNs the peer never sent", EINVAL;
    if (int e = start(c, o, cap.bytes.size(), why)) return e;
  }
  replay(convs, items, r);
  uint64_t first_pos = 0;
  for (Conv& c : convs) {
    if (c.ref->memory().exhausted())
      return *why = "the capture writes more memory than --max-memory allows", EINVAL;
    if (c.ref->overflowed())
      return *why = "the reference's answers to QPN " + qpn(c.dut_qpn) + " outgrew 4 times the "
                    "capture: its requests ask for far more than the capture shows (a huge READ?)",
             EINVAL;
    compare_conv(c, r, &first_pos);
    r->qps.push_back("DUT QPN " + qpn(c.dut_qpn) + " (" + ip_text(c.mirror.dut_ip) + ") <-> peer QPN " +
                     qpn(c.peer_qpn) + " (" + ip_text(c.mirror.peer_ip) + "): rq_psn " +
                     std::to_string(c.mirror.rq_psn) + ", MTU " + std::to_string(c.mirror.path_mtu) +
                     ", " + std::to_string(c.mirror.keys.size()) + " R_Keys, " +
                     std::to_string(c.recv_posted) + " receives");
  }
  compare_malformed(items, r, &first_pos);
  return 0;
}

std::string format_report(const Report& r) {
  std::string s;
  char b[512];
  std::snprintf(b, sizeof b,
                "frames %" PRIu64 ": MetaRoCE %" PRIu64 ", other %" PRIu64 "\n"
                "peer packets replayed through the reference: %" PRIu64 " (not replayed: %" PRIu64 ")\n"
                "DUT responses compared: %" PRIu64 ", matched: %" PRIu64 ", diverged: %" PRIu64 "\n"
                "DUT requests (not compared): %" PRIu64 ", CM: %" PRIu64 ", UD: %" PRIu64
                ", responses to QPs of no pair: %" PRIu64 "\n",
                r.frames, r.metaroce, r.other, r.peer_replayed, r.peer_not_replayed, r.dut_compared,
                r.dut_matched, r.divergences, r.dut_requests, r.dut_cm, r.dut_ud, r.dut_unpaired);
  s += b;
  s += "not compared: timing, ACK count and coalescing, ack.credit, the MBTH psn/timestamp/path of "
       "ACKs, UDP source ports; learned from the capture: PSNs, MTU, R_Keys, receive posting, "
       "memory it does not write (docs/vendor-guide.md §7)\n";
  for (const std::string& q : r.qps) s += "qp: " + q + "\n";
  if (!r.first) return s + "result: no divergence\n";
  const Divergence& d = *r.first;
  const Rule& rule = rule_for(d.field);
  s += "result: DIVERGENCE\n";
  s += "first divergence: " + (d.dut_packet ? "DUT packet " + std::to_string(d.dut_packet)
                                              : std::string("a response the DUT never sent")) +
       " (" + d.what + ")";
  if (d.peer_packet) s += ", answering peer packet " + std::to_string(d.peer_packet);
  s += "\n  field:    " + d.field + "\n  expected: " + d.expected + "\n  actual:   " + d.actual +
       "\n  compared with: " + d.context + "\n  rule:     docs/protocol.md " + rule.section +
       (*rule.tags ? std::string(" [") + rule.tags + "]" : std::string()) + ": " + rule.text + "\n";
  return s;
}

bool parse_ip(const std::string& s, proto::IpAddr* out) {
  in_addr v4;
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    *out = proto::IpAddr::v4(ntohl(v4.s_addr));
    return true;
  }
  return inet_pton(AF_INET6, s.c_str(), out->bytes.data()) == 1;
}

bool parse_mac(const std::string& s, proto::MacAddr* out) {
  unsigned v[6];
  char tail;
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
    return false;
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 255) return false;
    (*out)[i] = static_cast<uint8_t>(v[i]);
  }
  return true;
}

}  // namespace metaroce::pcapcmp
