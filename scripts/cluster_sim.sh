#!/usr/bin/env bash
# Predicted throughput at cluster scale, on paper: the simulator with the
# analytic A100 description (80 GB, docs/examples/a100-80gb.json) for the
# paper's shapes (gpt-6.7b, t5-11b), 8 pipeline stages x 1, 2 or 4 replicas
# (8 to 32 GPUs), max length 512 / 2048 / 8192 and global batches of 16k to
# 131k tokens (built-in FLAN-like lengths, seed 1, 3 global batches).
#
# Every baseline is tuned here by an explicit sweep of its knob, not left to
# its default: padding --mb-samples 1..32, packing and packing-docmask
# --pack-rows 1..8, token --mb-tokens L, 2L, 4L; each method's figure is its
# best tokens/s over the sweep and over the 1f1b and auto schedules (auto:
# best schedule x micro-batch order x recompute per batch) and over the
# recompute mode the planner assumes (none, selective, full: a knob that
# does not fit without recomputation may fit with it). dynapipe runs with
# its defaults: it keeps the fastest of its own plan and the baselines'.
# Prints one markdown table (docs/cluster-scale.md), the median of the last
# column and the winning knob of each baseline.
# Usage: scripts/cluster_sim.sh [BUILD_DIR]
# A subset (tests/cluster_sim_check.sh runs one row this way):
#   CLUSTER_MODELS="gpt:gpt-6.7b t5:t5-11b"  CLUSTER_LENGTHS="512 2048 8192"
#   CLUSTER_SIZES="8:16384 8:65536 16:65536 32:131072" (GPUs:global batch tokens)
#   CLUSTER_BATCHES=3
#   CLUSTER_DYN_FLAGS="--stage-objective bottleneck" (more flags for dynapipe's row)
set -euo pipefail
cd "$(dirname "$0")/.."
cli=${1:-build}/dynapipe
machine=docs/examples/a100-80gb.json
models=${CLUSTER_MODELS:-gpt:gpt-6.7b t5:t5-11b}
lengths=${CLUSTER_LENGTHS:-512 2048 8192}
sizes=${CLUSTER_SIZES:-8:16384 8:65536 16:65536 32:131072}
common=(--synthetic flan:1 --batches "${CLUSTER_BATCHES:-3}" --machine "$machine" --stages 8 --schedule 1f1b,auto --skip-infeasible --markdown)
[ -x "$cli" ] || { echo "cluster_sim.sh: $cli is not an executable (build first, or pass BUILD_DIR)" >&2; exit 2; }

# best tokens/s of one method's row over the schedules and the recompute
# modes (the planner's memory check assumes the mode given; auto then picks
# per batch): "tokens/s mode", or "" if infeasible in every mode.
# simulate labels a row "method" or "method (knob=value)": match both, and
# not a longer name ("packing" is not "packing-docmask (...)").
best_of() { # method, flags...
  local method=$1 rc out best="" bestrc=""; shift
  for rc in none selective full; do
    out=$("$cli" simulate "$@" --methods "$method" --recompute $rc "${common[@]}" 2>/dev/null) || continue
    out=$(awk -F'|' -v m="$method" '$2 ~ "^ " m "( [(].*[)])? $" { b = ""; for (i = 3; i < NF; i++) { split($i, w, " "); if (w[1] ~ /^[0-9.]+$/ && (b == "" || w[1] + 0 > b + 0)) b = w[1] } print b }' <<<"$out")
    if [ -n "$out" ] && { [ -z "$best" ] || awk -v a="$out" -v b="$best" 'BEGIN { exit !(a > b) }'; }; then
      best=$out; bestrc=$rc
    fi
  done
  [ -n "$best" ] && echo "$best $bestrc" || echo ""
}

# best over a knob's values: "tokens/s knob=value recompute"
sweep() { # method, knob flag, values...
  local method=$1 flag=$2 best="" bestv="" bestrc="" v r; shift 2
  local vals=("$@")
  for v in "${vals[@]}"; do
    r=$(best_of "$method" "${args[@]}" "$flag" "$v")
    [ -z "$r" ] && continue
    if [ -z "$best" ] || awk -v a="${r% *}" -v b="$best" 'BEGIN { exit !(a > b) }'; then
      best=${r% *}; bestv=$v; bestrc=${r#* }
    fi
  done
  [ -n "$best" ] && echo "$best ${flag#--}=$bestv $bestrc" || echo "- - -"
}

echo "| model | GPUs (S x D) | max len | global batch | dynapipe | padding | packing | packing-docmask | token | dynapipe / best baseline |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
knobs=""
ratios=""
for mk in $models; do
  kind=${mk%%:*}; preset=${mk#*:}
  for L in $lengths; do
    for gd in $sizes; do
      gpus=${gd%%:*}; gbt=${gd#*:}; D=$((gpus / 8))
      args=(--model "$kind" --model-config "$preset" --max-seqlen "$L" --global-batch-tokens "$gbt" --dp "$D")
      dyn=$(best_of dynapipe "${args[@]}" ${CLUSTER_DYN_FLAGS:-})
      pad=$(sweep padding --mb-samples 1 2 4 8 16 32)
      pk=$(sweep packing --pack-rows 1 2 4 8)
      pkd=$(sweep packing-docmask --pack-rows 1 2 4 8)
      tok=$(sweep token --mb-tokens "$L" $((2 * L)) $((4 * L)))
      d=${dyn% *}; d=${d:--}
      bb=$(printf '%s\n' "${pad%% *}" "${pk%% *}" "${pkd%% *}" "${tok%% *}" | grep -E '^[0-9.]+$' | sort -g | tail -1 || true)
      ratio=$( [ "$d" != "-" ] && [ -n "$bb" ] && awk -v a="$d" -v b="$bb" 'BEGIN { printf "%.2fx", a / b }' || echo "-")
      ratios+="${ratio%x}"$'\n'
      echo "| $preset | $gpus (8 x $D) | $L | $gbt | ${d} | ${pad%% *} | ${pk%% *} | ${pkd%% *} | ${tok%% *} | $ratio |"
      knobs+="$preset L=$L gbt=$gbt D=$D: dynapipe (recompute ${dyn#* }); padding ${pad#* }; packing ${pk#* }; packing-docmask ${pkd#* }; token ${tok#* }"$'\n'
    done
  done
done
echo
median=$(printf '%s' "$ratios" | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.2fx", v[(NR + 1) / 2]; else printf "%.2fx", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
echo "Median of dynapipe / best baseline over the rows: $median"
echo
echo "Tuned knobs (value, recompute mode):"
echo
printf '%s' "$knobs" | sed 's/^/    /'
