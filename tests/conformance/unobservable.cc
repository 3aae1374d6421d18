// MUSTs of docs/protocol.md that neither a frame nor a verb can show, and
// sections whose cases are still to come (none today). Each
// is listed in docs/conformance-coverage.md with its reason instead of a
// case; the coverage test fails for any other MUST without a case.
#include "tools/conformance/suite.h"

namespace metaroce::conform {
namespace {

RegisterUnobservable r7_3_1{
    "R7.3-1", "a grant of 0 means \"no limit\" on the wire (ACKH.credit), so no ACK can carry a grant below 1"};

RegisterUnobservable r13_4_3{
    "R13.4-3", "who may hold a controlled Q_Key is a host rule, not a wire one, and the suite runs as root "
               "(raw sockets); firmware-model/daemon/device_test.cc control__controlled_qkey_needs_root "
               "shows the EPERM"};

}  // namespace
}  // namespace metaroce::conform
