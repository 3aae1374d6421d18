// Reader of the golden vector files in tests/vectors/ (format:
// tests/vectors/README.md), shared by the vector, Wireshark and corpus tests.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "proto/packet.h"

namespace metaroce::test {

struct Vector {
  std::string name;
  std::string path;
  std::vector<std::pair<std::string, std::string>> fields;  // in file order
  proto::FrameHeaders headers;
  std::vector<uint8_t> payload;
  std::vector<uint8_t> frame;  // the `frame:` hex
  uint32_t icrc = 0;
  std::string error;  // why the file could not be read; empty if fine

  // The transport packet the fields describe; payload borrows from this.
  proto::Packet packet() const;
  std::string field(const std::string& key) const;  // "" if absent

 private:
  friend Vector read_vector(const std::string& path);
  proto::Packet packet_;  // without payload
};

// Reads one vector file. On a problem, Vector::error says what and where.
Vector read_vector(const std::string& path);

// The directory of a data dependency inside the test's runfiles
// ($TEST_SRCDIR/$TEST_WORKSPACE/<rel>), or <rel> when not run by Bazel.
std::string runfiles_path(const std::string& rel);

// Every tests/vectors/*.txt, sorted by name.
std::vector<Vector> load_vectors();

}  // namespace metaroce::test
