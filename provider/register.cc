// The provider's only entry point: libibverbs dlopen()s
// libmetaroce-rdmav34.so and this constructor registers the device ops.
#include "provider/mroce.h"

__attribute__((constructor)) static void mroce_register_driver() {
  verbs_register_driver_34(&mroce_dev_ops);
}
