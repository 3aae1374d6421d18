#include "firmware-model/daemon/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace metaroce::daemon {

namespace {

struct LogState {
  bool journal = false;
  bool verbose = false;
};
LogState g_log;

// A decimal number ending at `end` (or at the end): false if empty, not
// decimal, or out of range.
bool parse_u64(const char* s, const char* end, uint64_t* out) {
  if (s == end || *s < '0' || *s > '9') return false;
  errno = 0;
  char* stop = nullptr;
  unsigned long long v = std::strtoull(s, &stop, 10);
  if (errno || stop != end) return false;
  *out = v;
  return true;
}

}  // namespace

bool journal_stream_matches(const char* journal_stream, uint64_t dev, uint64_t ino) {
  if (!journal_stream) return false;
  const char* colon = std::strchr(journal_stream, ':');
  uint64_t d = 0, i = 0;
  if (!colon || !parse_u64(journal_stream, colon, &d) ||
      !parse_u64(colon + 1, colon + 1 + std::strlen(colon + 1), &i))
    return false;
  return d == dev && i == ino;
}

int sd_priority(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return 3;
    case LogLevel::kWarn: return 4;
    case LogLevel::kInfo: return 6;
    case LogLevel::kDebug: return 7;
  }
  return 6;
}

std::string format_log(LogLevel level, std::string_view msg, bool journal) {
  const std::string prefix =
      journal ? "<" + std::to_string(sd_priority(level)) + ">" : std::string("metaroced: ");
  std::string out;
  size_t start = 0;
  do {
    size_t nl = msg.find('\n', start);
    std::string_view line = msg.substr(start, nl == std::string_view::npos ? nl : nl - start);
    out.append(prefix).append(line).append("\n");
    start = nl == std::string_view::npos ? msg.size() + 1 : nl + 1;
  } while (start < msg.size());
  return out;
}

void log_init(bool verbose) {
  struct stat st {};
  g_log.verbose = verbose;
  g_log.journal = fstat(STDERR_FILENO, &st) == 0 &&
                  journal_stream_matches(std::getenv("JOURNAL_STREAM"), st.st_dev, st.st_ino);
}

void log_line(LogLevel level, std::string_view msg) {
  if (level == LogLevel::kDebug && !g_log.verbose) return;
  std::string text = format_log(level, msg, g_log.journal);
  // One write(2) per message: lines of concurrent writers never interleave.
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to log to: nothing else to do
    done += static_cast<size_t>(n);
  }
}

io::LogSink log_sink() {
  return [](LogLevel level, std::string_view msg) { log_line(level, msg); };
}

}  // namespace metaroce::daemon
