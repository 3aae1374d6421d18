// mroce-impair configuration: what each direction of the hop does to the
// frames it impairs (docs/impair.md), and the command-line parser.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace metaroce::impair {

// One direction (leg A -> leg B, or B -> A). Zero everywhere: forward only.
struct DirConfig {
  double loss = 0;               // --loss P: Bernoulli drop probability
  double burst_start = 0;        // --burst P:L: Gilbert-Elliott, P(good -> bad) per frame
  double burst_len = 0;          //   mean frames per burst (P(bad -> good) = 1/L); all dropped
  uint64_t delay_ns = 0;         // --delay D
  uint64_t jitter_ns = 0;        // --jitter J: delay uniform in [D-J, D+J], order kept
  double reorder = 0;            // --reorder P[:GAP]: held GAP longer, later frames overtake
  uint64_t reorder_gap_ns = 100'000;
  double duplicate = 0;          // --dup P: sent twice
  double corrupt = 0;            // --corrupt P: one UDP payload byte flipped
  uint64_t rate_bps = 0;         // --rate R: bottleneck bit rate (0: none)
  uint64_t ecn_threshold = 0;    // --ecn-threshold B: mark CE above B queued bytes (0: never)
  uint64_t queue_bytes = 0;      // --queue B: tail-drop capacity (with --rate; 0: 1 MiB)
  uint64_t hold_limit = 64ull << 20;  // --hold-limit B: bytes held (delayed) at most

  bool impairs() const;  // false: matching frames are forwarded untouched
};

struct Config {
  std::string leg_a, leg_b;      // --leg-a IF --leg-b IF (required)
  DirConfig dir[2];              // [0]: A -> B, [1]: B -> A
  uint64_t seed = 1;             // --seed N
  bool all_traffic = false;      // --all: impair every frame, not only UDP to --port
  uint16_t udp_port = 4796;      // --port N
  std::string stats_path;        // --stats FILE: JSON on SIGUSR1, every --stats-interval, at exit
  uint64_t stats_interval_ns = 0;
  std::string ready_path;        // --ready-file FILE: written once both legs are open
  uint64_t spin_ns = 0;          // --spin D: poll this long after activity before sleeping
  int rt_priority = 0;           // --rt-priority N: SCHED_FIFO N (0: normal scheduling)
};

// Value parsers (exposed for tests). False with *why on bad input.
bool parse_probability(const std::string& s, double* out, std::string* why);  // "1%", "0.01"
bool parse_duration(const std::string& s, uint64_t* ns, std::string* why);   // "1ms", "200us", "5s", "0"
bool parse_rate(const std::string& s, uint64_t* bps, std::string* why);      // "5gbit", "100mbit", "800kbit"
bool parse_bytes(const std::string& s, uint64_t* out, std::string* why);     // "64KB", "1MiB", "1500"

// Parses argv (without argv[0]). Options before any --a-to-b / --b-to-a
// apply to both directions; after one of them, to that direction only
// (--both returns to both). Returns false with *why on any error.
bool parse_args(const std::vector<std::string>& args, Config* out, std::string* why);

extern const char kUsage[];

}  // namespace metaroce::impair
