#!/usr/bin/env bash
# Run the calibration cases through htsim_uec and keep every flow's completion time:
# results/<case>_<policy>_s<seed>.csv.gz (gzip CSV: src,dst,size_bytes,fct_us), the files
# compare.py reads. Raw logs stay outside the repository.
#
#   bash bench/fidelity/run_htsim.sh [CASE ...]        # default: every case, in the order below
#
# Environment (defaults in brackets):
#   HTSIM_BUILD  build_htsim.sh's WORKDIR     [htsim_build/ beside this repository]
#   HTSIM  the binary build_htsim.sh prints   [$HTSIM_BUILD/build/datacenter/htsim_uec]
#   TOPOS  topologies of the same checkout    [$HTSIM_BUILD/src/htsim/sim/datacenter/topologies]
#   LOGS   raw stdout, scratch, wall times    [$HTSIM_BUILD/logs]
#   POLICIES  subset of: ecmp spray mrc_reps mrc_bitmap   [all four]
#   SEEDS     subset of seeds                              [every matrix the case has]
#
# Policies (htsim's source-side load balancing; every switch hashes the packet's entropy):
#   ecmp       -load_balancing_algo oblivious -paths 1    one entropy per connection
#   spray      -load_balancing_algo oblivious -paths 128  cycles through 128 entropies
#   mrc_reps   -load_balancing_algo reps      -paths 128
#   mrc_bitmap -load_balancing_algo bitmap    -paths 128
# Every run: -mtu 4160 (4,096 payload bytes + htsim's 64 header bytes per packet, fabricjax's
# default transport), -seed <the case's seed>, -end 100000 us (far past the last flow). htsim
# writes logout.dat and idmap.txt into its working directory, so each run gets a scratch one.
# A run that leaves flows unfinished (or crashes) writes no CSV; it is listed in
# $LOGS/walltimes.tsv with its status, and the script goes on and exits 1 at the end.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BUILD="${HTSIM_BUILD:-$(dirname "$REPO")/htsim_build}"
HTSIM="${HTSIM:-$BUILD/build/datacenter/htsim_uec}"
TOPOS="${TOPOS:-$BUILD/src/htsim/sim/datacenter/topologies}"
LOGS="${LOGS:-$BUILD/logs}"
POLICIES="${POLICIES:-ecmp spray mrc_reps mrc_bitmap}"
MTU=4160
END_US=100000
mkdir -p "$HERE/results" "$LOGS"
[ -x "$HTSIM" ] || { echo "no htsim_uec at $HTSIM" >&2; exit 2; }

topology() {    # case -> topology file [extra flags]
    case "$1" in
        ft128_1os_*|single_*) echo "fat_tree_128_1os.topo" ;;
        ft128_4os_*) echo "fat_tree_128_4os.topo" ;;
        ft128_8os_*) echo "fat_tree_128_8os.topo" ;;
        ls1024os_failed4_*) echo "leaf_spine_1024_oversub.topo -failed 4" ;;
        ls1024os_*) echo "leaf_spine_1024_oversub.topo" ;;
        *) echo "unknown case $1" >&2; return 1 ;;
    esac
}

lb_flags() {    # policy -> load-balancing flags
    case "$1" in
        ecmp) echo "-load_balancing_algo oblivious -paths 1" ;;
        spray) echo "-load_balancing_algo oblivious -paths 128" ;;
        mrc_reps) echo "-load_balancing_algo reps -paths 128" ;;
        mrc_bitmap) echo "-load_balancing_algo bitmap -paths 128" ;;
        *) echo "unknown policy $1" >&2; return 1 ;;
    esac
}

# Turn one run's stdout into the CSV. htsim prints, at the sender, one line per flow when the
# cumulative ACK covers the whole flow: "Flow Uec_<src>_<dst> flowId <id> ... finished at <us>".
# The flowId is the matrix's `id`, so src, dst, size and start come from the matrix line.
extract() {     # matrix log csv -> prints "finished/connections"
    python3 - "$@" <<'PY'
import gzip, re, sys
matrix, log, out = sys.argv[1:]
conns = {}
for line in open(matrix):
    m = re.match(r"(\d+)->(\d+) id (\d+) start (\S+) size (\d+)", line)
    if m:
        conns[int(m[3])] = (int(m[1]), int(m[2]), int(m[5]), float(m[4]) / 1e6)  # start ps -> us
done = {}
pat = re.compile(r"Flow Uec_(\d+)_(\d+) flowId (\d+) .* finished at (\S+)")
for line in open(log, errors="replace"):
    m = pat.match(line)
    if m:
        fid = int(m[3])
        src, dst, _, _ = conns[fid]
        assert (src, dst) == (int(m[1]), int(m[2])), line
        done[fid] = float(m[4])
print(f"{len(done)}/{len(conns)}")
if len(done) == len(conns):
    with gzip.open(out, "wt") as fh:
        fh.write("src,dst,size_bytes,fct_us\n")
        for fid in sorted(conns):
            src, dst, size, start = conns[fid]
            fh.write(f"{src},{dst},{size},{done[fid] - start:.3f}\n")
PY
}

CASES=("$@")
if [ ${#CASES[@]} -eq 0 ]; then
    CASES=(ft128_1os_perm2MB ft128_4os_perm2MB ft128_8os_perm2MB ft128_1os_perm128KB
           ft128_1os_incast32 single_2MB single_128KB ls1024os_perm1MB
           ls1024os_failed4_perm1MB ft128_1os_a2a)
fi
[ -f "$LOGS/walltimes.tsv" ] || \
    printf 'run\twall_s\tfinished\tstatus\tcommand\n' > "$LOGS/walltimes.tsv"
failures=0
for case in "${CASES[@]}"; do
    read -r topo extra <<< "$(topology "$case")" || exit 2
    for matrix in "$HERE"/matrices/"${case}"_s*.cm; do
        seed="${matrix##*_s}"; seed="${seed%.cm}"
        if [ -n "${SEEDS:-}" ] && [[ " $SEEDS " != *" $seed "* ]]; then continue; fi
        for policy in $POLICIES; do
            name="${case}_${policy}_s${seed}"
            log="$LOGS/$name.log"
            scratch="$(mktemp -d "$LOGS/scratch.XXXXXX")"
            # shellcheck disable=SC2206
            cmd=("$HTSIM" -tm "$matrix" -topo "$TOPOS/$topo" $extra $(lb_flags "$policy")
                 -seed "$seed" -mtu "$MTU" -end "$END_US" -o "$scratch/logout.dat")
            t0=$(date +%s.%N)
            (cd "$scratch" && nice -n 19 "${cmd[@]}") > "$log" 2>&1
            rc=$?
            wall=$(python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.1f}')" "$t0")
            rm -rf "$scratch"
            csv="$HERE/results/$name.csv.gz"
            rm -f "$csv"
            finished=$(extract "$matrix" "$log" "$csv")
            status=ok
            if [ "$rc" -ne 0 ]; then status="exit_$rc"; fi
            if [[ ! "$finished" =~ ^[0-9]+/[0-9]+$ ]]; then status="parse_error"
            elif [ "${finished%/*}" != "${finished#*/}" ]; then status="unfinished"; fi
            if [ "$status" != ok ]; then failures=$((failures + 1)); rm -f "$csv"; fi
            # the command as one could rerun it elsewhere: no path of this machine in it
            command="${cmd[*]}"; command="${command//$BUILD/\$HTSIM_BUILD}"
            command="${command//$REPO\//}"
            printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$wall" "$finished" "$status" \
                "$command" >> "$LOGS/walltimes.tsv"
            echo "$name: $finished flows finished, $status, ${wall}s"
        done
    done
done
exit $((failures > 0))
