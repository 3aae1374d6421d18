// One main() for every doctest binary. doctest prints
// "[doctest] test cases: N | N passed | N failed | N skipped", which
// tools/test sums into the CI's closing line.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
