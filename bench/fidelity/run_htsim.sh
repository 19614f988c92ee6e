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
#   RESEED    htsim seeds to rerun each case's seed-1 matrix with instead: the same flows on
#             the same fabric, other hash salts and random draws. Results go to
#             results/reseed/<case>_<policy>_s1_r<seed>.csv.gz (spread.py reads them): how
#             far htsim's own quantiles move from run to run, the noise under a target.
#   DOUBLE_TURN  set: htsim's NIC as the pinned commit has it, a flow whose timer fires while
#             it waits in the NIC's FIFO queued there a second time. Unset (the calibration's
#             reference), every run exports HTSIM_ONE_TURN: htsim_one_turn.patch applies the
#             guard htsim's own sendIfPermitted has (HTSIM.md, "One turn"). Results go to
#             results/double_turn/ (compare.py prints them beside the reference's rows).
#   STATS     set: htsim counts where and when packets are trimmed, every flow's resends,
#             timeouts, NACKs and ACKs, and REPS's EV sources (htsim_transport_stats.patch; no event
#             changes). The CSVs go to LOGS beside the logs, not to results/;
#             transport_stats.py reads the logs.
#   EV_ROUTES set (with STATS): every sprayed packet's switch choices, once per flow, EV
#             and switch, go into the log as "evroute <flowId> <entropy> <egress queue>" (the
#             route-dump patch; no event changes); ev_paths.py reads them.
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
#
# Multi-plane cases (`mp<P>_...`): htsim has no planes (it asserts -planes 1), so every plane
# is its own run on the single-plane topology with matrices/per_plane/<case>_s<seed>.cm (1/P
# of every flow's bytes), its own seed (<seed> x 100 + plane: other hash salts and sender
# draws) and -paths divided by P (a flow's EVs are split equally over its planes). A flow's
# FCT is its slowest plane's; each plane's run is one line of walltimes.tsv (`..._p<plane>`).
# HTSIM.md says why this is faithful for equal splits and where it is not.
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
mkdir -p "$HERE/results" "$HERE/routes" "$LOGS"
[ -z "${RESEED:-}" ] || mkdir -p "$HERE/results/reseed"
[ -z "${DOUBLE_TURN:-}" ] || mkdir -p "$HERE/results/double_turn"
[ -x "$HTSIM" ] || { echo "no htsim_uec at $HTSIM" >&2; exit 2; }

topology() {    # case -> topology file [extra flags]
    case "$1" in
        ft128_1os_*|single_*) echo "fat_tree_128_1os.topo" ;;
        ft128_4os_*) echo "fat_tree_128_4os.topo" ;;
        ft128_8os_*) echo "fat_tree_128_8os.topo" ;;
        ls1024_failed8_*) echo "leaf_spine_1024.topo -failed 8" ;;
        ls1024_*|mp*_ls1024_*) echo "leaf_spine_1024.topo" ;;   # mp*_deg0_*: plane_flags
        ls1024os_failed4_*) echo "leaf_spine_1024_oversub.topo -failed 4" ;;
        ls1024os_*) echo "leaf_spine_1024_oversub.topo" ;;
        *) echo "unknown case $1" >&2; return 1 ;;
    esac
}

plane_flags() { # case plane -> extra flags of that plane's run: plane 0 of a `mp<P>_ls1024_deg0_*`
                # case is degraded as ls1024_failed8 is (every leaf's links to spines 0-7 at 25%)
    if [[ "$1" == mp*_ls1024_deg0_* ]] && [ "$2" -eq 0 ]; then echo "-failed 8"; fi
}

planes() {      # case -> planes (P of a case named mp<P>_..., else 1)
    if [[ "$1" =~ ^mp([0-9]+)_ ]]; then echo "${BASH_REMATCH[1]}"; else echo 1; fi
}

evs_per_plane() {  # case planes -> a plane's EVs: N of a case named ..._ev<N>, else 128 / planes
    if [[ "$1" =~ _ev([0-9]+)$ ]]; then echo "${BASH_REMATCH[1]}"; else echo $((128 / $2)); fi
}

lb_flags() {    # policy planes case -> load-balancing flags (128 EVs per flow, equal per plane,
                # unless the case names its EVs a plane)
    local evs; evs=$(evs_per_plane "$3" "$2")
    case "$1" in
        ecmp) echo "-load_balancing_algo oblivious -paths 1" ;;
        spray) echo "-load_balancing_algo oblivious -paths $evs" ;;
        mrc_reps) echo "-load_balancing_algo reps -paths $evs" ;;
        mrc_bitmap) echo "-load_balancing_algo bitmap -paths $evs" ;;
        *) echo "unknown policy $1" >&2; return 1 ;;
    esac
}

# Turn the stdout of a run (or of one run per plane) into the CSV. htsim prints, at the sender,
# one line per flow when the cumulative ACK covers the whole flow: "Flow Uec_<src>_<dst> flowId
# <id> ... finished at <us>". The flowId is the matrix's `id`, so src, dst, size and start come
# from the matrix line; with several logs a flow finishes when its last plane does.
extract() {     # matrix csv log [log ...] -> prints "finished/connections"
    python3 - "$@" <<'PY'
import gzip, re, sys
matrix, out, *logs = sys.argv[1:]
conns = {}
for line in open(matrix):
    m = re.match(r"(\d+)->(\d+) id (\d+) start (\S+) size (\d+)", line)
    if m:
        conns[int(m[3])] = (int(m[1]), int(m[2]), int(m[5]), float(m[4]) / 1e6)  # start ps -> us
pat = re.compile(r"Flow Uec_(\d+)_(\d+) flowId (\d+) .* finished at (\S+)")
per_log = []
for log in logs:
    done = {}
    for line in open(log, errors="replace"):
        m = pat.match(line)
        if m:
            fid = int(m[3])
            src, dst, _, _ = conns[fid]
            assert (src, dst) == (int(m[1]), int(m[2])), line
            done[fid] = float(m[4])
    per_log.append(done)
done = {fid: max(d[fid] for d in per_log) for fid in conns if all(fid in d for d in per_log)}
print(f"{len(done)}/{len(conns)}")
if len(done) == len(conns):
    with gzip.open(out, "wt") as fh:
        fh.write("src,dst,size_bytes,fct_us\n")
        for fid in sorted(conns):
            src, dst, size, start = conns[fid]
            fh.write(f"{src},{dst},{size},{done[fid] - start:.3f}\n")
PY
}

# The route-dump lines of an ECMP run ("route <flowId> <egress queue>", one per flow and switch
# with a choice, from its first data packet) as a gzip CSV id,from,to of htsim switch names
# (LS<n> edge/leaf, US<n> aggregation/spine, CS<n> core).
routes() {      # log out
    python3 - "$@" <<'PY'
import gzip, re, sys
log, out = sys.argv[1:]
pat = re.compile(r"route (\d+) .*?\b(LS|US|CS)_?(\d+)->(LS|US|CS)_?(\d+)\(")
rows = sorted({(int(m[1]), f"{m[2]}{m[3]}", f"{m[4]}{m[5]}")
               for m in map(pat.match, open(log, errors="replace")) if m})
with gzip.open(out, "wt") as fh:
    fh.write("id,from,to\n")
    fh.writelines(f"{i},{a},{b}\n" for i, a, b in rows)
PY
}

CASES=("$@")
if [ ${#CASES[@]} -eq 0 ]; then
    CASES=(ft128_1os_perm2MB ft128_4os_perm2MB ft128_8os_perm2MB ft128_1os_perm128KB
           ft128_1os_incast32 single_2MB single_128KB ls1024os_perm1MB
           ls1024os_failed4_perm1MB ft128_1os_a2a mp4_ls1024_perm2MB mp4_ls1024_ring1MB
           ls1024_perm1MB ls1024_failed8_perm1MB ft128_1os_perm64KB ft128_1os_perm512KB
           ft128_1os_permmix ft128_1os_ring2MB ft128_1os_a2a_shift
           mp8_ls1024_perm1MB mp8_ls1024_perm8MB mp8_ls1024_deg0_perm8MB
           mp8_ls1024_perm16MB mp8_ls1024_perm2MB_ev8 mp8_ls1024_perm4MB_ev32
           mp8_ls1024_deg0_perm4MB_ev32
           ft128_1os_perm1MB ft128_4os_perm512KB ft128_8os_perm4MB ft128_1os_ring512KB
           ft128_1os_incast16 ft128_1os_a2a32_256KB ls1024os_perm2MB ls1024os_failed4_perm512KB
           ls1024_failed8_perm2MB ls1024_ring2MB mp4_ls1024_perm512KB
           mp8_ls1024_deg0_perm2MB_ev8)
fi
[ -f "$LOGS/walltimes.tsv" ] || \
    printf 'run\twall_s\tcpu_s\tfinished\tstatus\tcommand\n' > "$LOGS/walltimes.tsv"
failures=0
run_one() {     # name matrix seed policy planes -> one htsim run; sets $log, $status
    local name="$1" matrix="$2" seed="$3" policy="$4" nplanes="$5"
    log="$LOGS/$name.log"
    local scratch; scratch="$(mktemp -d "$LOGS/scratch.XXXXXX")"
    # shellcheck disable=SC2206
    local cmd=("$HTSIM" -tm "$matrix" -topo "$TOPOS/$topo" $extra
               $(lb_flags "$policy" "$nplanes" "$case")
               -seed "$seed" -mtu "$MTU" -end "$END_US" -o "$scratch/logout.dat")
    # bash's `time`: wall seconds, and htsim's own CPU seconds (user + system), which a
    # machine shared with other jobs inflates far less than the wall time
    local TIMEFORMAT='%R %U %S' timing
    timing=$( { time { (cd "$scratch" && if [ "$policy" = ecmp ]; then export HTSIM_ROUTES=1; fi
                              if [ -z "${DOUBLE_TURN:-}" ]; then export HTSIM_ONE_TURN=1; fi
                              if [ -n "${STATS:-}" ]; then
                                  export HTSIM_TRIM_STATS=1 HTSIM_FLOW_STATS=1 HTSIM_REPS_STATS=1
                                  if [ -n "${EV_ROUTES:-}" ]; then export HTSIM_EV_ROUTES=1; fi
                              fi
                              nice -n 19 "${cmd[@]}") > "$log" 2>&1; }
                echo "$?" >&2; } 2>&1 )
    local wall cpu rc
    read -r wall cpu rc <<< "$(awk 'NR == 1 {printf "%.1f %.1f", $1, $2 + $3}
                                  NR == 2 {printf " %d", $1}' <<< "$timing")"
    rm -rf "$scratch"
    local check="$LOGS/$name.check.csv.gz"
    local finished; finished=$(extract "$matrix" "$check" "$log")
    rm -f "$check"
    status=ok
    if [ "$rc" -ne 0 ]; then status="exit_$rc"; fi
    if [[ ! "$finished" =~ ^[0-9]+/[0-9]+$ ]]; then status="parse_error"
    elif [ "${finished%/*}" != "${finished#*/}" ]; then status="unfinished"; fi
    # the command as one could rerun it elsewhere: no path of this machine in it
    local command="${cmd[*]}"; command="${command//$BUILD/\$HTSIM_BUILD}"
    command="${command//$REPO\//}"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$wall" "$cpu" "$finished" "$status" \
        "$command" >> "$LOGS/walltimes.tsv"
    echo "$name: $finished flows finished, $status, ${wall}s (${cpu}s CPU)"
}

for case in "${CASES[@]}"; do
    read -r topo extra <<< "$(topology "$case")" || exit 2
    nplanes=$(planes "$case")
    # (matrix seed, htsim seed, where the CSV goes) per run
    runs=()
    for matrix in "$HERE"/matrices/"${case}"_s[0-9]*.cm; do
        seed="${matrix##*_s}"; seed="${seed%.cm}"
        if [ -n "${RESEED:-}" ]; then
            if [ "$seed" = 1 ]; then
                for again in $RESEED; do runs+=("1 $again reseed/"); done
            fi
        elif [ -z "${SEEDS:-}" ] || [[ " $SEEDS " == *" $seed "* ]]; then
            runs+=("$seed $seed ${DOUBLE_TURN:+double_turn/}")
        fi
    done
    for run in "${runs[@]}"; do
        read -r matrix_seed seed out <<< "$run"
        matrix="$HERE/matrices/${case}_s$matrix_seed.cm"
        for policy in $POLICIES; do
            name="${case}_${policy}_s${matrix_seed}"
            [ "$seed" = "$matrix_seed" ] || name="${name}_r$seed"
            csv="$HERE/results/$out$name.csv.gz"
            [ -z "${STATS:-}" ] || csv="$LOGS/$name.csv.gz"
            rm -f "$csv"
            logs=()
            ok=1
            if [ "$nplanes" -eq 1 ]; then
                run_one "$name" "$matrix" "$seed" "$policy" 1
                logs+=("$log"); [ "$status" = ok ] || ok=0
            else
                for ((plane = 0; plane < nplanes; plane++)); do
                    # a healthy plane of a degraded case is its healthy case's run (the same
                    # per-plane matrix, seed and flags): its log is read, not run again
                    healthy="$LOGS/${name/_deg0_/_}_p$plane.log"
                    if [[ "$case" == *_deg0_* ]] && [ "$plane" -gt 0 ] && [ -f "$healthy" ] \
                        && cmp -s "$HERE/matrices/per_plane/${case}_s$matrix_seed.cm" \
                                  "$HERE/matrices/per_plane/${case/_deg0_/_}_s$matrix_seed.cm"; then
                        logs+=("$healthy"); continue
                    fi
                    local_extra="$extra"
                    extra="$extra $(plane_flags "$case" "$plane")"
                    run_one "${name}_p$plane" \
                        "$HERE/matrices/per_plane/${case}_s$matrix_seed.cm" \
                        $((seed * 100 + plane)) "$policy" "$nplanes"
                    extra="$local_extra"
                    logs+=("$log"); [ "$status" = ok ] || ok=0
                done
            fi
            finished=$(extract "$matrix" "$csv" "${logs[@]}")
            # ECMP's paths as htsim's switches hashed them (HTSIM_ROUTES, the route-dump patch
            # of build_htsim.sh): compare.py runs fabricjax's ECMP rows on the same paths (a
            # multi-plane case: every plane's run, routes/<name>_p<plane>.csv.gz)
            if [ "$policy" = ecmp ] && [ -z "$out" ] && [ -z "${STATS:-}" ] && [ -f "$csv" ]; then
                if [ "$nplanes" -eq 1 ]; then
                    routes "${logs[0]}" "$HERE/routes/$name.csv.gz"
                else
                    for ((plane = 0; plane < nplanes; plane++)); do
                        routes "${logs[$plane]}" "$HERE/routes/${name}_p$plane.csv.gz"
                    done
                fi
            fi
            if [ "$ok" -ne 1 ] || [ "${finished%/*}" != "${finished#*/}" ]; then
                failures=$((failures + 1)); rm -f "$csv"
            fi
            [ "$nplanes" -eq 1 ] || echo "$name: $finished flows finished on all $nplanes planes"
        done
    done
done
exit $((failures > 0))
