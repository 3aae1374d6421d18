// Backend selection: --io=xdp|packet|auto.
#include <string>

#include "firmware-model/daemon/io/packet_io.h"

namespace metaroce::daemon::io {

bool parse_backend(std::string_view s, Backend* out) {
  if (s == "auto") *out = Backend::kAuto;
  else if (s == "xdp") *out = Backend::kXdp;
  else if (s == "packet") *out = Backend::kPacket;
  else return false;
  return true;
}

const char* to_string(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kXdp: return "xdp";
    case Backend::kPacket: return "packet";
  }
  return "?";
}

std::unique_ptr<PacketIo> open_packet_io(const IoOptions& options, std::string* why) {
  switch (options.backend) {
    case Backend::kXdp: return open_af_xdp(options, why);
    case Backend::kPacket: return open_af_packet(options, why);
    case Backend::kAuto: break;
  }
  std::string xdp_why;
  if (auto io = open_af_xdp(options, &xdp_why)) return io;
  if (options.log) {
    options.log(LogLevel::kWarn, "AF_XDP unavailable on " + options.ifname + " (" + xdp_why +
                                     "); falling back to AF_PACKET");
  }
  std::string packet_why;
  if (auto io = open_af_packet(options, &packet_why)) return io;
  if (why) *why = "AF_XDP: " + xdp_why + "; AF_PACKET: " + packet_why;
  return nullptr;
}

}  // namespace metaroce::daemon::io
