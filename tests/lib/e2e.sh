# Shell harness for end-to-end tests (sourced). Each case is a function;
# `e2e_case NAME FUNC` runs it in a subshell, records pass/fail/skip, and
# `e2e_finish` prints the summary line tools/test sums:
#   [e2e] test cases: N | N passed | N failed | N skipped
# A case skips (exit 77) only with a printed reason, when a capability is absent.

E2E_PASSED=0; E2E_FAILED=0; E2E_SKIPPED=0
E2E_RUN_DIR=${E2E_RUN_DIR:-/run/metaroce-test}
mkdir -p "$E2E_RUN_DIR" 2>/dev/null || true

e2e_skip() { echo "SKIP: $*"; exit 77; }
e2e_fail() { echo "FAIL: $*" >&2; exit 1; }

e2e_require_root() {
  [ "$(id -u)" = 0 ] || e2e_skip "needs root (namespaces, veth, AF_XDP)"
  ip netns list >/dev/null 2>&1 || e2e_skip "network namespaces unavailable"
}

# Register a process this test started, so tests/lib/cleanup.sh can end it
# (by pid) if the test dies before its own cleanup.
e2e_track_pid() { echo "$1" >> "$E2E_RUN_DIR/pids"; }

# Waits until CMD... succeeds, polling, for at most TIMEOUT seconds (a
# generous deadline, never a fixed count). Returns CMD's last status.
wait_for() {  # TIMEOUT CMD...
  local timeout=$1 end; shift
  end=$((SECONDS + timeout))
  until "$@"; do
    [ "$SECONDS" -ge "$end" ] && { "$@"; return; }
    sleep 0.05
  done
}

e2e_case() {
  local name=$1 fn=$2 rc
  echo "--- $name"
  ( set -e; "$fn" ); rc=$?
  case $rc in
    0) echo "ok   $name"; E2E_PASSED=$((E2E_PASSED + 1)) ;;
    77) echo "skip $name"; E2E_SKIPPED=$((E2E_SKIPPED + 1)) ;;
    *) echo "FAIL $name (exit $rc)"; E2E_FAILED=$((E2E_FAILED + 1)) ;;
  esac
}

e2e_finish() {
  local total=$((E2E_PASSED + E2E_FAILED + E2E_SKIPPED))
  echo "[e2e] test cases: $total | $E2E_PASSED passed | $E2E_FAILED failed | $E2E_SKIPPED skipped"
  [ "$E2E_FAILED" = 0 ]
}
