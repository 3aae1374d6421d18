// Control-message bodies (docs/device-abi.md §2): fixed-size structs of
// metaroce_abi.h copied in and out of a request or reply body. Shared by
// the control plane's op files; internal to the daemon.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace metaroce::daemon::control {

// A body must be exactly one T (a short or long body is malformed).
template <class T>
bool decode(std::span<const uint8_t> body, T* out) {
  if (body.size() != sizeof(T)) return false;
  std::memcpy(out, body.data(), sizeof(T));
  return true;
}

template <class T>
void encode(const T& v, std::vector<uint8_t>* body) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  body->insert(body->end(), p, p + sizeof(T));
}

}  // namespace metaroce::daemon::control

// Inside a ControlPlane op (Request r, Reply* out): decodes r.body into a T
// named var, or counts ctrl_malformed and returns EINVAL with the reason.
#define MROCE_DECODE(T, var)                                                  \
  T var{};                                                                    \
  if (!::metaroce::daemon::control::decode(r.body, &var)) {                   \
    counters_.ctrl_malformed++;                                               \
    out->reason = "malformed " #T ": body of " + std::to_string(r.body.size()) + \
                  " bytes, expected " + std::to_string(sizeof(T));            \
    return EINVAL;                                                            \
  }
