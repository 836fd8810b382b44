# modes.sh — sourced by the tests/test_ext_*.sh scripts: run a program under
# glibc's malloc and under hakmem (preloaded, default and HAKMEM_SECURE=1),
# each run under a time limit in a process group of its own that is killed
# afterwards (so a child stuck in a deadlock cannot outlive its run).
#
#   ext_run MODE LIMIT OUT ERR CMD...   run once; sets EXT_RC and EXT_SECS
#   ext_tap NAME LIMIT CMD...           run a TAP program in each mode of
#                                       EXT_MODES, all at once, then print its
#                                       result lines mode by mode, tagged
#                                       with the mode ("ok - x [hakmem]")
#
# Mode hakmem-static is for a program linked statically with libhakmem.a.
# ext_tap compares with glibc: a case that fails under glibc as well as under
# hakmem is a defect of the test or the machine, not of hakmem; its hakmem
# lines are "ok - ... # SKIP fails under glibc too", its glibc line stays
# "not ok".  A run that crashes, times out, exits non-zero without a "not ok"
# line or prints none, and (under hakmem) a "hakmem:" error report on stderr
# in a run where nothing else failed, each add a "not ok" line.  A "# NAME [mode]: N ok, N not ok, N skipped, Ns"
# note ends each run.

BUILD=${BUILD:-build}
EXT_LIB=$(cd "$BUILD" && pwd)/libhakmem.so
EXT_MODES=(glibc hakmem hakmem-secure)
declare -A EXT_GLIBC_FAILED      # NAME: " case case " that failed under glibc
EXT_TMP=$(mktemp -d)
trap 'rm -rf "$EXT_TMP"' EXIT

ext_env() {  # MODE: the environment assignments of that mode
  case $1 in
    glibc) echo "EXT_ALLOCATOR=glibc" ;;
    hakmem) echo "EXT_ALLOCATOR=hakmem LD_PRELOAD=$EXT_LIB" ;;
    hakmem-secure) echo "EXT_ALLOCATOR=hakmem-secure LD_PRELOAD=$EXT_LIB HAKMEM_SECURE=1" ;;
    hakmem-static) echo "EXT_ALLOCATOR=hakmem-static" ;;
  esac
}

ext_run() {  # MODE LIMIT OUT ERR CMD...
  local mode=$1 limit=$2 out=$3 err=$4; shift 4
  local start=$SECONDS pid
  # shellcheck disable=SC2046  # the mode's assignments are separate words
  env $(ext_env "$mode") timeout -k 5 "$limit" "$@" </dev/null >"$out" 2>"$err" &
  pid=$!
  wait $pid
  EXT_RC=$?
  kill -KILL -- -$pid 2>/dev/null   # timeout made its own process group
  EXT_SECS=$((SECONDS - start))
}

ext_tap() {  # NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  local mode
  # The modes run side by side (most cases wait on children, sleeps and
  # deadlines more than they compute); their results are read in order.
  for mode in "${EXT_MODES[@]}"; do
    local out=$EXT_TMP/$name.$mode.out err=$EXT_TMP/$name.$mode.err
    ( ext_run "$mode" "$limit" "$out" "$err" "$@"; echo "$EXT_RC $EXT_SECS" >"$out.status" ) &
  done
  wait
  for mode in "${EXT_MODES[@]}"; do
    local out=$EXT_TMP/$name.$mode.out err=$EXT_TMP/$name.$mode.err
    read -r EXT_RC EXT_SECS <"$out.status"
    local ok=0 nok=0 skip=0 failed=0 line case tag="[$mode]"
    while IFS= read -r line; do
      case $line in
        "ok - "*)
          if [[ $line == *" # SKIP "* ]]; then skip=$((skip + 1)); echo "${line%% # SKIP *} $tag # SKIP ${line#* # SKIP }"
          else ok=$((ok + 1)); echo "$line $tag"; fi ;;
        "not ok - "*)
          case=${line#not ok - }; case=${case%%: *}
          failed=$((failed + 1))
          if [ "$mode" = glibc ]; then EXT_GLIBC_FAILED[$name]+=" $case "; fi
          if [ "$mode" != glibc ] && [[ ${EXT_GLIBC_FAILED[$name]:-} == *" $case "* ]]; then
            skip=$((skip + 1)); echo "ok - $case $tag # SKIP fails under glibc too"
          else
            nok=$((nok + 1)); echo "not ok - $case $tag:${line#not ok - "$case":}"
          fi ;;
        "# "*) echo "$line" ;;
      esac
    done <"$out"
    local why=""
    if [ $EXT_RC -eq 124 ] || [ $EXT_RC -eq 137 ]; then why="timed out after ${limit}s"
    elif [ $EXT_RC -gt 128 ]; then why="killed by signal $((EXT_RC - 128))"
    elif [ $EXT_RC -ne 0 ] && [ $failed -eq 0 ]; then why="exit status $EXT_RC"
    elif [ $((ok + nok + skip)) -eq 0 ]; then why="printed no result line"
    fi
    if [ -n "$why" ]; then nok=$((nok + 1)); echo "not ok - $name $tag: $why"; fi
    if [ "$mode" != glibc ] && grep -q '^hakmem:' "$err"; then
      if [ -z "$why" ] && [ $failed -eq 0 ]; then
        nok=$((nok + 1)); echo "not ok - $name $tag: hakmem reported an error: $(grep -m1 '^hakmem:' "$err")"
      else
        echo "# $name $tag: $(grep -m1 '^hakmem:' "$err")"
      fi
    fi
    if [ -n "$why" ] || [ $nok -gt 0 ]; then grep -v '^hakmem:' "$err" | tail -n 5 | sed 's/^/    # /'; fi
    echo "# $name $tag: $ok ok, $nok not ok, $skip skipped, ${EXT_SECS}s"
  done
}
