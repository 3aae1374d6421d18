#include "tools/pcap-compare/pcap_reader.h"

#include <cerrno>
#include <cstdio>
#include <fstream>

namespace metaroce::pcap {
namespace {

constexpr uint32_t kPcapMagicUs = 0xA1B2C3D4;
constexpr uint32_t kPcapMagicNs = 0xA1B23C4D;
constexpr uint32_t kShbType = 0x0A0D0D0A;
constexpr uint32_t kIdbType = 1;
constexpr uint32_t kSpbType = 3;
constexpr uint32_t kEpbType = 6;
constexpr uint32_t kByteOrderMagic = 0x1A2B3C4D;
constexpr size_t kMaxInterfaces = 1024;

uint32_t bswap32(uint32_t v) { return __builtin_bswap32(v); }

// Fixed-width reads at a position, in the file's byte order. Callers check
// the room first (fits()); the reads themselves never go past the end.
struct Bytes {
  std::span<const uint8_t> b;
  bool swapped = false;  // file order differs from little-endian
  bool fits(size_t pos, size_t n) const { return pos <= b.size() && b.size() - pos >= n; }
  uint32_t u32(size_t pos) const {
    uint32_t v = uint32_t{b[pos]} | uint32_t{b[pos + 1]} << 8 | uint32_t{b[pos + 2]} << 16 |
                 uint32_t{b[pos + 3]} << 24;
    return swapped ? bswap32(v) : v;
  }
  uint16_t u16(size_t pos) const {
    uint16_t v = static_cast<uint16_t>(b[pos] | b[pos + 1] << 8);
    return swapped ? static_cast<uint16_t>(v >> 8 | v << 8) : v;
  }
};

std::string at(const std::string& what, size_t pos) {
  return what + " at byte " + std::to_string(pos);
}

const char* link_name(uint32_t link) {
  switch (link) {
    case 113: return " (Linux cooked, from -i any: capture on the interface itself)";
    case 276: return " (Linux cooked v2, from -i any: capture on the interface itself)";
    case 101: return " (raw IP: capture with Ethernet headers)";
    default: return "";
  }
}

bool link_ok(uint32_t link, std::string* why, const std::string& where) {
  if (link == kLinkEthernet) return true;
  *why = where + ": link type " + std::to_string(link) + link_name(link) +
         " is not Ethernet (1); only Ethernet captures can be compared";
  return false;
}

// ---- classic pcap ----

int parse_pcap(const Bytes& f, bool ns, Capture* out, std::string* why) {
  if (!f.fits(0, 24)) return *why = "pcap file header truncated (24 bytes needed)", EINVAL;
  if (!link_ok(f.u32(20) & 0xFFFF, why, "pcap file header")) return EINVAL;
  size_t pos = 24;
  while (pos < f.b.size()) {
    if (!f.fits(pos, 16)) return *why = at("pcap record header truncated", pos), EINVAL;
    uint32_t sec = f.u32(pos), frac = f.u32(pos + 4), incl = f.u32(pos + 8), orig = f.u32(pos + 12);
    if (frac >= (ns ? 1'000'000'000u : 1'000'000u))
      return *why = at("pcap record: sub-second timestamp out of range", pos), EINVAL;
    if (incl > kMaxSnaplen || incl > orig)
      return *why = at("pcap record: captured length " + std::to_string(incl) +
                           " exceeds the snaplen limit or the original length", pos), EINVAL;
    if (!f.fits(pos + 16, incl)) return *why = at("pcap record data truncated", pos), EINVAL;
    Record r;
    r.number = out->records.size() + 1;
    r.time_ns = uint64_t{sec} * 1'000'000'000 + (ns ? frac : uint64_t{frac} * 1000);
    r.file_offset = pos + 16;
    r.orig_len = orig;
    r.frame = f.b.subspan(pos + 16, incl);
    out->records.push_back(r);
    pos += 16 + incl;
  }
  return 0;
}

// ---- pcapng ----

struct Interface {
  uint32_t snaplen = 0;
  uint64_t ticks_per_s = 1'000'000;  // if_tsresol default: microseconds
};

// if_tsresol (option 9): 10^-v, or 2^-v with the top bit set.
bool tsresol(uint8_t v, uint64_t* ticks) {
  uint8_t e = v & 0x7F;
  if ((v & 0x80) ? e > 63 : e > 19) return false;
  uint64_t t = 1;
  for (uint8_t i = 0; i < e; ++i) t *= (v & 0x80) ? 2 : 10;
  *ticks = t;
  return true;
}

// Options from pos to end (a block's body past its fixed fields).
bool idb_options(const Bytes& f, size_t pos, size_t end, Interface* itf, std::string* why) {
  while (pos + 4 <= end) {
    uint16_t code = f.u16(pos), len = f.u16(pos + 2);
    if (code == 0) return true;  // opt_endofopt
    size_t padded = (size_t{len} + 3) & ~size_t{3};
    if (padded > end - pos - 4) return *why = at("pcapng IDB option overruns its block", pos), false;
    if (code == 9 && len == 1 && !tsresol(f.b[pos + 4], &itf->ticks_per_s))
      return *why = at("pcapng IDB if_tsresol out of range", pos), false;
    pos += 4 + padded;
  }
  return true;
}

uint64_t to_ns(uint64_t ticks, uint64_t ticks_per_s) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(ticks) * 1'000'000'000 / ticks_per_s);
}

struct Section {
  Bytes f;
  std::vector<Interface> itfs;
};

int add_idb(Section& s, size_t pos, size_t len, std::string* why) {
  if (len < 20) return *why = at("pcapng IDB too short", pos), EINVAL;
  if (s.itfs.size() >= kMaxInterfaces) return *why = at("pcapng: too many interfaces", pos), EINVAL;
  if (!link_ok(s.f.u16(pos + 8), why, at("pcapng interface " + std::to_string(s.itfs.size()), pos)))
    return EINVAL;
  Interface itf;
  itf.snaplen = s.f.u32(pos + 12);
  if (!idb_options(s.f, pos + 16, pos + len - 4, &itf, why)) return EINVAL;
  s.itfs.push_back(itf);
  return 0;
}

int add_packet(Section& s, uint32_t type, size_t pos, size_t len, Capture* out, std::string* why) {
  const Bytes& f = s.f;
  Record r;
  size_t data, room;
  uint32_t itf = 0, cap;
  uint64_t ticks = 0;
  if (type == kEpbType) {
    if (len < 32) return *why = at("pcapng EPB too short", pos), EINVAL;
    itf = f.u32(pos + 8);
    ticks = uint64_t{f.u32(pos + 12)} << 32 | f.u32(pos + 16);
    cap = f.u32(pos + 20);
    r.orig_len = f.u32(pos + 24);
    data = pos + 28;
  } else {  // SPB: interface 0, no timestamp; captured = min(original, snaplen, room)
    if (len < 16) return *why = at("pcapng SPB too short", pos), EINVAL;
    r.orig_len = f.u32(pos + 8);
    data = pos + 12;
    cap = r.orig_len;
  }
  if (itf >= s.itfs.size()) return *why = at("pcapng packet names an undeclared interface", pos), EINVAL;
  room = pos + len - 4 - data;
  if (type == kSpbType) {
    if (s.itfs[0].snaplen && cap > s.itfs[0].snaplen) cap = s.itfs[0].snaplen;
    if (cap > room) cap = static_cast<uint32_t>(room);
  }
  if (cap > room || cap > kMaxSnaplen || cap > r.orig_len)
    return *why = at("pcapng packet: captured length " + std::to_string(cap) +
                         " exceeds its block, the snaplen limit or the original length", pos), EINVAL;
  r.number = out->records.size() + 1;
  r.time_ns = to_ns(ticks, s.itfs[itf].ticks_per_s);
  r.file_offset = data;
  r.frame = f.b.subspan(data, cap);
  out->records.push_back(r);
  return 0;
}

// A section header: sets the byte order and forgets the interfaces.
int start_section(Section& s, size_t pos, std::string* why) {
  if (!s.f.fits(pos, 28)) return *why = at("pcapng section header truncated", pos), EINVAL;
  s.f.swapped = false;
  if (s.f.u32(pos + 8) != kByteOrderMagic) {
    s.f.swapped = true;
    if (s.f.u32(pos + 8) != kByteOrderMagic)
      return *why = at("pcapng section header: bad byte-order magic", pos), EINVAL;
  }
  if (s.f.u16(pos + 12) != 1) return *why = at("pcapng section header: major version is not 1", pos), EINVAL;
  s.itfs.clear();
  return 0;
}

int parse_block(Section& s, size_t pos, size_t* len, Capture* out, std::string* why) {
  const Bytes& f = s.f;
  if (!f.fits(pos, 12)) return *why = at("pcapng block header truncated", pos), EINVAL;
  uint32_t type = f.u32(pos);  // the SHB's type reads the same in both orders
  if (type == kShbType)
    if (int e = start_section(s, pos, why)) return e;
  *len = f.u32(pos + 4);
  if (*len < 12 || *len % 4)
    return *why = at("pcapng block: length " + std::to_string(*len) + " is not a multiple of 4 of at least 12", pos), EINVAL;
  if (!f.fits(pos, *len)) return *why = at("pcapng block truncated", pos), EINVAL;
  if (f.u32(pos + *len - 4) != *len) return *why = at("pcapng block: trailing length differs", pos), EINVAL;
  switch (type) {
    case kIdbType: return add_idb(s, pos, *len, why);
    case kEpbType:
    case kSpbType: return add_packet(s, type, pos, *len, out, why);
    case 2: return *why = at("pcapng obsolete Packet Block (type 2) not supported", pos), EINVAL;
    default: return 0;  // name resolution, statistics, custom: not needed
  }
}

int parse_pcapng(const Bytes& whole, Capture* out, std::string* why) {
  Section s{whole, {}};
  size_t pos = 0;
  while (pos < whole.b.size()) {
    size_t len = 0;
    if (int e = parse_block(s, pos, &len, out, why)) return e;
    pos += len;
  }
  return 0;
}

}  // namespace

int parse_capture(std::vector<uint8_t> bytes, Capture* out, std::string* why) {
  *out = Capture{};
  out->bytes = std::move(bytes);
  Bytes f{out->bytes, false};
  if (!f.fits(0, 4)) return *why = "not a capture file: shorter than a file header", EINVAL;
  uint32_t magic = f.u32(0);
  int e;
  if (magic == kShbType) {
    out->pcapng = true;
    e = parse_pcapng(f, out, why);
  } else {
    f.swapped = (magic == bswap32(kPcapMagicUs) || magic == bswap32(kPcapMagicNs));
    uint32_t m = f.u32(0);
    if (m != kPcapMagicUs && m != kPcapMagicNs)
      return *why = "not a pcap or pcapng file (magic " + std::to_string(magic) + ")", EINVAL;
    e = parse_pcap(f, m == kPcapMagicNs, out, why);
  }
  if (e) out->records.clear();
  return e;
}

int read_capture(const std::string& path, Capture* out, std::string* why) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return *why = "cannot open " + path, ENOENT;
  std::streamoff size = in.tellg();
  if (size < 0) return *why = "cannot read " + path, EIO;
  if (static_cast<uint64_t>(size) > kMaxFileBytes)
    return *why = path + ": larger than 1 GiB; cut the capture (editcap -r)", EFBIG;
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) return *why = "cannot read " + path, EIO;
  int e = parse_capture(std::move(bytes), out, why);
  if (e) *why = path + ": " + *why;
  return e;
}

}  // namespace metaroce::pcap
