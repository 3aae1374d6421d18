#!/usr/bin/env bash
# docs/conformance-coverage.md is complete and current, and the checker
# behind it fails for each problem it exists to catch.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
bin=$top/tools/conformance/mroce-conform
[ -x "$bin" ] || bin=$top/.bazel/bin/tools/conformance/mroce-conform
spec=$top/docs/protocol.md table=$top/docs/conformance-coverage.md
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fails=0 checks=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

echo "--- the checked-in table"
"$bin" coverage --spec "$spec" --check "$table" || fail "coverage check (fix the tags or cases, then tools/conformance/gen-coverage)"

# Each spoiled copy of the spec must be refused with its reason.
expect_refused() {  # name sed-expression expected-message
  checks=$((checks + 1))
  sed "$2" "$spec" > "$tmp/spec.md"
  local out; out=$("$bin" coverage --spec "$tmp/spec.md" --out "$tmp/table.md" 2>&1) && fail "$1: accepted"
  grep -qF -- "$3" <<<"$out" || { echo "$out"; fail "$1: no '$3'"; }
  echo "ok   refused: $1"
}
echo "--- the checker refuses"
expect_refused "an untagged MUST" 's/ \[R2\.1-2\]//' "MUST/SHOULD without a tag"
expect_refused "a duplicated tag" 's/\[R2\.4-3\]/[R2.4-3] and again MUST [R2.4-3]/' "duplicate tag [R2.4-3]"
expect_refused "a malformed tag" 's/\[R9-2\]/[R9_2]/' "malformed tag [R9_2]"
expect_refused "a tag of another section" 's/\[R8-1\]/[R9-7]/' "tag [R9-7] in section 8"
expect_refused "a MUST without a case" 's/\[R6\.1-1\]; in practice/[R6.1-1]; in practice a sender MUST wave [R6.1-2]; and/' "R6.1-2 (MUST, line"
expect_refused "a cited tag that is gone" 's/ \[R12\.4-1\]//' "cites R12.4-1, which docs/protocol.md does not have"
sed '$d' "$table" > "$tmp/stale.md"
"$bin" coverage --spec "$spec" --check "$tmp/stale.md" 2>&1 | grep -q "is stale" && echo "ok   refused: a stale table" || fail "a stale table was accepted"

checks=$((checks + 2))  # the checked-in table, the stale copy
# The summary line tools/test sums (as tests/lib/e2e.sh prints it).
echo "[e2e] test cases: $checks | $((checks - fails)) passed | $fails failed | 0 skipped"
[ "$fails" = 0 ]
