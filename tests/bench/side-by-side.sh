#!/usr/bin/env bash
# Side by side: Debian's ibnetdiscover and `opensm -o` on one generated fat tree, run under
# ibsim + umad2sim and over this project's libibumad drop-in (`hca run`), each timed a few
# times (wall clock of the whole command, median), with the two times and their ratio; and
# `hca discover` (the native engine, no libibumad) on the same fabric.
#
#   tests/bench/side-by-side.sh [--reps N] [--spec SPEC] [--node NAME] [--cpus LIST]
#                               [--limit SECS] [--keep]
#
# Defaults: 5 repetitions of each; the 2,144-node tree fat-tree:leaves=64,hosts=32,spines=32
# (64 leaves of 32 hosts, 32 spines); every tool runs from host-1. Goals (the issue): ours at
# least 5x faster for ibnetdiscover and 2x for the OpenSM sweep. A small run:
# --spec fat-tree:leaves=4,hosts=3,spines=2 --reps 1.
#
# Every timed command runs under `timeout -k 10 SECS` (--limit, default 600): SIGTERM at the
# limit, SIGKILL 10 s later (OpenSM handles SIGTERM). A failed or timed-out run stops the
# script (exit 1) and keeps the work directory with its stderr. When the two stacks'
# ibnetdiscover outputs (or hca discover's) differ, that ratio is printed as "n/c" (not
# comparable: they did not do the same work) and the script exits 1.
#
# Every run starts from an unconfigured fabric: ibsim is restarted before each OpenSM run, and
# each `hca run` opens a fresh simulator (no state=). ibsim is started (and ready) before the
# clock starts; our simulator is brought up inside the timed command, so our times include
# bringing up the simulated HCA and the fabric.
#
# --cpus LIST runs every process of both stacks (ibsim, the tools, `hca run`) on those CPUs
# (taskset -c LIST): `--cpus 0` compares them on one core. That matters for OpenSM, whose
# threads hand each SMP to one another: on a 2-core VM a wake-up across CPUs costs several
# microseconds, and its sweep takes about 1.2-1.8 s on 2 CPUs but about 0.7 s on one, with
# either backend.
#
# Needs: ibsim-utils (ibsim, libumad2sim0), infiniband-diags, opensm (`.ci/run` installs
# them) and a release build (`cargo build --release -p hca-tools`, done here if missing).
# Without `hca run` (the libibumad drop-in not built in), that half is reported as missing.
set -uo pipefail
cd "$(dirname "$0")/../.."

reps=5
spec="fat-tree:leaves=64,hosts=32,spines=32"
node="host-1"
keep=0
cpus=
limit=600
while [ $# -gt 0 ]; do
    case "$1" in
    --reps) reps=$2; shift 2 ;;
    --spec) spec=$2; shift 2 ;;
    --node) node=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

umad2sim=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
missing=()
for t in ibsim ibnetdiscover opensm; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || missing+=("$t")
done
[ -f "$umad2sim" ] || missing+=("$umad2sim")
if [ ${#missing[@]} -gt 0 ]; then
    echo "missing: ${missing[*]} (apt-get install ibsim-utils libumad2sim0 infiniband-diags opensm)" >&2
    exit 3
fi
export PATH="$PATH:/usr/sbin"
pin=()
if [ -n "$cpus" ]; then
    command -v taskset >/dev/null || { echo "--cpus needs taskset (util-linux)" >&2; exit 3; }
    taskset -c "$cpus" true || { echo "--cpus $cpus: not a CPU list taskset takes" >&2; exit 2; }
    pin=(taskset -c "$cpus")
fi

echo "== building (release)" >&2
cargo build --release --quiet -p hca-tools || exit 1
if cargo metadata --no-deps --format-version 1 2>/dev/null | grep -q '"name":"umad"'; then
    cargo build --release --quiet -p umad || exit 1
fi
hca=${CARGO_TARGET_DIR:-$PWD/target}/release/hca

work=$(mktemp -d "${TMPDIR:-/tmp}/side-by-side.XXXXXX")
ibsim_pid=
# A failure inside a $(...) subshell (time_run) cannot set $keep: it leaves $work/keep.
cleanup() {
    [ -n "$ibsim_pid" ] && kill "$ibsim_pid" 2>/dev/null && wait "$ibsim_pid" 2>/dev/null
    if [ $keep -eq 1 ] || [ -e "$work/keep" ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

topo=$work/fabric.topo
"$hca" sim gen "$spec" -o "$topo" 2>"$work/gen.log" || { cat "$work/gen.log" >&2; exit 1; }
nodes=$(grep -cE '^(Switch|Ca)\s' "$topo")
links=$(($(grep -cE '^\[' "$topo") / 2))
device="sim:topology=$topo,node=$node"

# ibsim's tables must hold the fabric (its defaults stop at 2048 nodes).
ibsim_sizes=(-N $((nodes * 2 > 2048 ? nodes * 2 : 2048)) -S 4096 -P $((nodes * 40 > 32768 ? nodes * 40 : 32768)))
sock_n=0
start_ibsim() {
    sock_n=$((sock_n + 1))
    sock="hca-sbs-$$-$sock_n"
    local log=$work/ibsim-$sock_n.log
    IBSIM_SOCKNAME=$sock "${pin[@]}" ibsim -s -n "${ibsim_sizes[@]}" "$topo" >"$log" 2>&1 </dev/null &
    ibsim_pid=$!
    for _ in $(seq 1 600); do
        grep -q "Network simulator ready" "$log" && return 0
        kill -0 "$ibsim_pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "ibsim did not start; its log: $log" >&2
    keep=1
    exit 1
}
stop_ibsim() {
    kill "$ibsim_pid" 2>/dev/null
    wait "$ibsim_pid" 2>/dev/null
    ibsim_pid=
}

# time_run OUT -- COMMAND...: run COMMAND (under timeout -k) in a fresh directory with stdout
# to OUT; print the wall-clock seconds it took; fail if it fails. It runs in a $(...)
# subshell, so it marks the work directory to be kept with a file, not with $keep.
time_run() {
    local out=$1
    shift 2
    local dir
    dir=$(mktemp -d "$work/run.XXXXXX")
    local t0 t1
    t0=$(date +%s.%N)
    (cd "$dir" && OSM_CACHE_DIR=$dir OSM_TMP_DIR=$dir timeout -k 10 "$limit" "${pin[@]}" "$@") \
        >"$out" 2>"$out.err" </dev/null
    local rc=$?
    t1=$(date +%s.%N)
    if [ $rc -ne 0 ]; then
        local why="failed ($rc)"
        [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after $limit s ($rc)"
        echo "$why: $* -- stderr in $out.err (run directory $dir)" >&2
        touch "$work/keep"
        return 1
    fi
    echo "$t0 $t1" | awk '{printf "%.4f\n", $2 - $1}'
}

median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

undated() { grep -v '^# Topology file: generated on ' "$1"; }

subnet_up() { grep -q "SUBNET UP" "$1" || { echo "no SUBNET UP in $1" >&2; keep=1; return 1; }; }

declare -A result
note=()
status=0
ibnd_same=1
native_same=1

echo "== $spec: $nodes nodes, $links links; $reps runs of each" >&2

# ibsim + umad2sim
start_ibsim
times=()
for i in $(seq 1 "$reps"); do
    t=$(IBSIM_SOCKNAME=$sock SIM_HOST=$node LD_PRELOAD=$umad2sim time_run "$work/ibsim-ibnetdiscover.txt" -- ibnetdiscover) || exit 1
    times+=("$t")
done
stop_ibsim
result[ibsim_ibnd]=$(printf '%s\n' "${times[@]}" | median)
echo "   ibnetdiscover on ibsim: ${times[*]}" >&2

times=()
for i in $(seq 1 "$reps"); do
    start_ibsim
    t=$(IBSIM_SOCKNAME=$sock SIM_HOST=$node LD_PRELOAD=$umad2sim time_run "$work/ibsim-opensm.out" -- opensm -o -f osm.log) || exit 1
    log=$(ls -t "$work"/run.*/osm.log | head -n1)
    subnet_up "$log" || exit 1
    stop_ibsim
    times+=("$t")
done
result[ibsim_osm]=$(printf '%s\n' "${times[@]}" | median)
echo "   opensm -o on ibsim: ${times[*]}" >&2

# Our libibumad drop-in, through `hca run`.
if "$hca" run --help >/dev/null 2>&1; then
    times=()
    for i in $(seq 1 "$reps"); do
        t=$(time_run "$work/ours-ibnetdiscover.txt" -- "$hca" run --device "$device" -- ibnetdiscover) || exit 1
        times+=("$t")
    done
    result[ours_ibnd]=$(printf '%s\n' "${times[@]}" | median)
    echo "   ibnetdiscover on ours: ${times[*]}" >&2
    if diff <(undated "$work/ibsim-ibnetdiscover.txt") <(undated "$work/ours-ibnetdiscover.txt") >/dev/null; then
        note+=("ibnetdiscover printed the same fabric on both (every line but the date)")
    else
        note+=("ibnetdiscover's outputs DIFFER between ibsim and ours: its ratio is not comparable (n/c); outputs kept in $work")
        ibnd_same=0
        keep=1
        status=1
    fi
    times=()
    for i in $(seq 1 "$reps"); do
        t=$(time_run "$work/ours-opensm.out" -- "$hca" run --device "$device" -- opensm -o -f osm.log) || exit 1
        log=$(ls -t "$work"/run.*/osm.log | head -n1)
        subnet_up "$log" || exit 1
        times+=("$t")
    done
    result[ours_osm]=$(printf '%s\n' "${times[@]}" | median)
    echo "   opensm -o on ours: ${times[*]}" >&2
else
    note+=("this hca has no \`hca run\`: the libibumad drop-in is not built in, so the middle column is missing")
fi

# The native engine; --stats also gives the walk's own time (without process start, parsing
# the topology and bringing up the simulated HCA).
for w in 32 2; do
    times=()
    walks=()
    for i in $(seq 1 "$reps"); do
        t=$(time_run "$work/hca-discover-$w.txt" -- "$hca" discover --device "$device" --window "$w" --stats) || exit 1
        times+=("$t")
        walks+=("$(sed -n 's/.* in \([0-9.]*\) ms:.*/\1/p' "$work/hca-discover-$w.txt.err")")
    done
    result[native_$w]=$(printf '%s\n' "${times[@]}" | median)
    result[walk_$w]=$(printf '%s\n' "${walks[@]}" | median)
    echo "   hca discover --window $w: ${times[*]} (walks: ${walks[*]} ms)" >&2
done
if diff <(undated "$work/ibsim-ibnetdiscover.txt") <(undated "$work/hca-discover-32.txt") >/dev/null; then
    note+=("hca discover printed what ibnetdiscover printed on ibsim (every line but the date)")
else
    note+=("hca discover's output DIFFERS from ibnetdiscover's on ibsim: the native rows' ratios are not comparable (n/c); outputs kept in $work")
    native_same=0
    keep=1
    status=1
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0 && a == a + 0) printf "%.1fx", a / b; else print "-"}'; }
# ratio_if SAME A B: the ratio, or n/c when the two runs' outputs differed.
ratio_if() { if [ "$1" -eq 1 ]; then ratio "$2" "$3"; else printf 'n/c'; fi; }
secs() { [ -n "$1" ] && printf '%.3f s' "$1" || printf -- '-'; }

echo
echo "Side by side on $spec ($nodes nodes, $links links), from $node;"
echo "median wall clock of $reps runs each (ibsim started beforehand; our simulator inside the run)."
[ -n "$cpus" ] && echo "Every process of both stacks ran on CPUs $cpus (taskset -c $cpus)."
echo
printf '%-34s %16s %16s %8s %8s\n' "" "ibsim+umad2sim" "our libibumad" "ratio" "goal"
printf '%-34s %16s %16s %8s %8s\n' "ibnetdiscover" "$(secs "${result[ibsim_ibnd]}")" \
    "$(secs "${result[ours_ibnd]:-}")" "$(ratio_if $ibnd_same "${result[ibsim_ibnd]}" "${result[ours_ibnd]:-0}")" ">= 5x"
printf '%-34s %16s %16s %8s %8s\n' "opensm -o (one heavy sweep)" "$(secs "${result[ibsim_osm]}")" \
    "$(secs "${result[ours_osm]:-}")" "$(ratio "${result[ibsim_osm]}" "${result[ours_osm]:-0}")" ">= 2x"
printf '%-34s %16s %16s %8s\n' "hca discover (native, window 32)" "-" "$(secs "${result[native_32]}")" \
    "$(ratio_if $native_same "${result[ibsim_ibnd]}" "${result[native_32]}")"
printf '%-34s %16s %16s %8s\n' "hca discover (native, window 2)" "-" "$(secs "${result[native_2]}")" \
    "$(ratio_if $native_same "${result[ibsim_ibnd]}" "${result[native_2]}")"
echo "(the native rows' ratio is against ibnetdiscover on ibsim; the walk alone, without"
echo " starting the process and the simulator: ${result[walk_32]} ms at window 32, ${result[walk_2]} ms at window 2)"
for n in "${note[@]}"; do echo "note: $n"; done
exit $status
