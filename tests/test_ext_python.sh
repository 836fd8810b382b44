#!/usr/bin/env bash
# Python's own regression tests (Debian's libpython3.X-testsuite for
# /usr/bin/python3): modules that allocate heavily, use threads and
# subprocesses, the garbage collector and weak references, run by regrtest
# (in worker processes, two at a time, each under a time limit) under glibc's malloc and under
# hakmem, default and HAKMEM_SECURE=1.  Per module and mode one line:
#   - passed, or skipped by regrtest ("# SKIP" with its reason);
#   - failed under glibc: "# SKIP fails under glibc" in every mode, unless
#     hakmem fails more tests of it (or crashes, or times out);
#   - else failed under hakmem: "not ok" with the failed tests.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/ext/modes.sh
PY=/usr/bin/python3
modules="test_threading test_thread test_threading_local test_gc test_weakref test_weakset test_dict test_list
  test_set test_unicode test_bytes test_pickle test_re test_collections test_json test_struct test_array
  test_deque test_heapq test_itertools test_functools test_xml_etree test_zlib test_decimal test_tracemalloc
  test_ordered_dict test_memoryview test_mmap"
# test_multiprocessing_fork takes a minute and more; these classes of it run
# in seconds and cover processes, pools, queues, pipes and shared memory.
mp_classes="WithProcessesTestPool WithProcessesTestQueue WithProcessesTestConnection WithProcessesTestHeap
  WithProcessesTestArray WithProcessesTestValue WithProcessesTestSharedMemory WithManagerTestQueue TestSyncManagerTypes"

if [ ! -x "$PY" ] || ! "$PY" -c "import test.support, test.test_threading, test.test_multiprocessing_fork" 2>/dev/null; then
  echo "ok - python # SKIP Python's test suite is not installed for $PY (Debian: libpython3.$("$PY" -c 'import sys; print(sys.version_info[1])' 2>/dev/null || echo X)-testsuite)"
  exit 0
fi

regrtest() {  # MODE TAG ARGS...: run regrtest, print "MODULE VERDICT DETAIL" lines
  local mode=$1 tag=$2; shift 2
  local out=$EXT_TMP/py-$tag-$mode
  ext_run "$mode" 400 "$out.log" "$out.err" env PYTHONHASHSEED=0 "$PY" -m test --timeout 40 --junit-xml "$out.xml" "$@"
  cat "$out.err" >>"$out.log"
  "$PY" tests/ext/regrtest_results.py "$out.log" "$out.xml"
  if [ "$mode" != glibc ] && grep -q '^hakmem:' "$out.log"; then
    echo "_hakmem_ fail hakmem reported an error: $(grep -m1 '^hakmem:' "$out.log")"
  fi
  echo "_time_ $EXT_SECS"
}

declare -A glibc_verdict glibc_detail
for mode in "${EXT_MODES[@]}"; do
  # the multiprocessing classes beside the modules' two workers
  # shellcheck disable=SC2086  # lists of names
  regrtest "$mode" modules -j2 $modules >"$EXT_TMP/py.$mode" &
  # shellcheck disable=SC2046,SC2086
  regrtest "$mode" mp -j1 test_multiprocessing_fork $(printf -- '-m %s ' $mp_classes) >"$EXT_TMP/py-mp.$mode"
  wait
  cat "$EXT_TMP/py-mp.$mode" >>"$EXT_TMP/py.$mode"
  ok=0 nok=0 skip=0 secs=0
  for m in $modules test_multiprocessing_fork _hakmem_; do
    read -r verdict detail < <(awk -v m="$m" '$1 == m {$1 = ""; print; exit}' "$EXT_TMP/py.$mode")
    if [ -z "${verdict:-}" ]; then
      [ "$m" = _hakmem_ ] && continue
      verdict=fail detail="no result (regrtest did not run it)"
    fi
    name="python:$m [$mode]"
    [ "$m" = _hakmem_ ] && name="python [$mode]"
    if [ "$mode" = glibc ]; then glibc_verdict[$m]=$verdict; glibc_detail[$m]=$detail; fi
    g=${glibc_verdict[$m]:-pass}
    if [ "$verdict" = pass ]; then ok=$((ok + 1)); echo "ok - $name"
    elif [ "$verdict" = skip ]; then skip=$((skip + 1)); echo "ok - $name # SKIP $detail"
    elif [ "$g" = fail ] && { [ "$mode" = glibc ] || [ "$detail" = "${glibc_detail[$m]}" ]; }; then
      skip=$((skip + 1)); echo "ok - $name # SKIP fails under glibc: ${glibc_detail[$m]}"
    elif [ "$g" = fail ]; then
      nok=$((nok + 1)); echo "not ok - $name: fails under glibc (${glibc_detail[$m]}), under hakmem: $detail"
    else
      nok=$((nok + 1)); echo "not ok - $name: $detail"
    fi
  done
  secs=$(awk '$1 == "_time_" && $2 > s {s = $2} END {print s}' "$EXT_TMP/py.$mode")
  echo "# python [$mode]: $ok ok, $nok not ok, $skip skipped, ${secs}s"
done
