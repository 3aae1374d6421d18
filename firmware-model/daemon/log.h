// metaroced's log: one line per message on stderr, each at a level
// (io::LogLevel, the level the packet I/O library already logs with).
//
// When stderr is the journal, each line starts with its sd-daemon(3)
// priority, "<3>" error, "<4>" warning, "<6>" info, "<7>" debug, so that
// `journalctl -p warning` filters (the journal records the program's name,
// so the "metaroced: " prefix is left out there). systemd says stderr is
// the journal by setting JOURNAL_STREAM to "DEV:INO" of that stream
// (systemd.exec(5)); a JOURNAL_STREAM inherited by a daemon whose stderr
// was redirected since does not match, and the lines stay plain text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "firmware-model/daemon/io/packet_io.h"

namespace metaroce::daemon {

using LogLevel = io::LogLevel;

// Does `journal_stream` (JOURNAL_STREAM's value, or null) name the file
// whose st_dev and st_ino are `dev` and `ino`? Decimal "DEV:INO" only.
bool journal_stream_matches(const char* journal_stream, uint64_t dev, uint64_t ino);

// sd-daemon(3) priority: 3 error, 4 warning, 6 info, 7 debug.
int sd_priority(LogLevel level);

// What one message becomes on stderr: "metaroced: MSG\n", or for the
// journal "<N>MSG\n", every line of a multi-line message prefixed.
std::string format_log(LogLevel level, std::string_view msg, bool journal);

// Decides once (JOURNAL_STREAM against fstat(2) of stderr) how lines are
// written, and which pass: info and above, debug too when `verbose`.
void log_init(bool verbose);
// One message, written and flushed at once (unbuffered, whole lines).
void log_line(LogLevel level, std::string_view msg);
// A sink for libraries and the daemon's parts (io::LogSink).
io::LogSink log_sink();

}  // namespace metaroce::daemon
