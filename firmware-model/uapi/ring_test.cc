// The device ABI's one ring implementation (ring.h): what each side does
// with the header, in one process (both sides' calls on one mapping).
#include "firmware-model/uapi/ring.h"

#include <doctest/doctest.h>

#include <vector>

namespace {

struct Mem {
  std::vector<uint8_t> bytes;
  explicit Mem(uint32_t entries, uint32_t entry_size)
      : bytes(sizeof(mroce_ring_hdr) + size_t{entries} * entry_size) {}
  void* base() { return bytes.data(); }
};

TEST_CASE("init__the_nic_writes_the_header_and_the_application_binds_it") {
  Mem m(8, sizeof(mroce_cqe));
  mroce_ring nic{};
  mroce_ring_init(&nic, m.base(), 8, sizeof(mroce_cqe));
  CHECK(nic.hdr->entries == 8);
  CHECK(nic.hdr->entry_size == sizeof(mroce_cqe));
  CHECK(nic.hdr->producer == 0);
  mroce_ring app{};
  REQUIRE(mroce_ring_bind(&app, m.base(), m.bytes.size(), 0, 8, sizeof(mroce_cqe)) == 0);
  CHECK(mroce_ring_slot(&app, 9) == mroce_ring_slot(&nic, 1));  // index & (entries - 1)
  CHECK(static_cast<uint8_t*>(mroce_ring_slot(&app, 0)) ==
        m.bytes.data() + sizeof(mroce_ring_hdr));
}

TEST_CASE("bind__a_header_that_disagrees_or_does_not_fit_is_eproto") {
  Mem m(8, sizeof(mroce_cqe));
  mroce_ring nic{}, app{};
  mroce_ring_init(&nic, m.base(), 8, sizeof(mroce_cqe));
  CHECK(mroce_ring_bind(&app, m.base(), m.bytes.size(), 0, 6, sizeof(mroce_cqe)) == EPROTO);
  CHECK(mroce_ring_bind(&app, m.base(), m.bytes.size(), 0, 16, sizeof(mroce_cqe)) == EPROTO);
  CHECK(mroce_ring_bind(&app, m.base(), m.bytes.size(), 0, 8, sizeof(mroce_cqe) + 1) == EPROTO);
  CHECK(mroce_ring_bind(&app, m.base(), m.bytes.size() - 1, 0, 8, sizeof(mroce_cqe)) == EPROTO);
  CHECK(mroce_ring_bind(&app, m.base(), m.bytes.size(), 64, 8, sizeof(mroce_cqe)) == EPROTO);
}

TEST_CASE("indices__each_side_publishes_its_own_and_loads_the_other") {
  Mem m(4, sizeof(mroce_send_wqe));
  mroce_ring nic{}, app{};
  mroce_ring_init(&nic, m.base(), 4, sizeof(mroce_send_wqe));
  REQUIRE(mroce_ring_bind(&app, m.base(), m.bytes.size(), 0, 4, sizeof(mroce_send_wqe)) == 0);
  static_cast<mroce_send_wqe*>(mroce_ring_slot(&app, 0))->wr_id = 77;
  mroce_ring_publish_producer(&app, 1);
  REQUIRE(mroce_ring_load_producer(&nic) == 1);
  CHECK(static_cast<mroce_send_wqe*>(mroce_ring_slot(&nic, 0))->wr_id == 77);
  mroce_ring_publish_consumer(&nic, 1);
  CHECK(mroce_ring_load_consumer(&app) == 1);
}

TEST_CASE("sleep_and_arm__one_announcement_one_event_per_arm") {
  Mem m(4, sizeof(mroce_cqe));
  mroce_ring nic{}, app{};
  mroce_ring_init(&nic, m.base(), 4, sizeof(mroce_cqe));
  REQUIRE(mroce_ring_bind(&app, m.base(), m.bytes.size(), 0, 4, sizeof(mroce_cqe)) == 0);
  CHECK(!mroce_ring_nic_sleeping(&app));
  mroce_ring_announce_sleep(&nic);
  CHECK(mroce_ring_nic_sleeping(&app));
  mroce_ring_end_sleep(&nic);
  CHECK(!mroce_ring_nic_sleeping(&app));
  CHECK(!mroce_ring_take_arm(&nic));  // not armed: no event
  mroce_ring_arm(&app, MROCE_CQ_ARM_ANY);
  CHECK(mroce_ring_take_arm(&nic));
  CHECK(!mroce_ring_take_arm(&nic));  // taken: at most one event per arm
  CHECK(nic.hdr->overflow == 0);
  mroce_ring_set_overflow(&nic);
  CHECK(app.hdr->overflow == 1);
}

}  // namespace
