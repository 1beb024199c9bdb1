#!/usr/bin/env bash
# Each optional extra of pyproject.toml, alone, on a fresh virtual environment: `pip install -e ".[<extra>]"`
# and nothing else, then the command its docs give, checked for what it must show.
#
#   scripts/check-extras.sh [python] [extra ...]     # default: python3; peers ray sweep docs
#
# peers  tcgexp-bench train --parts steps: the JAX and PyTorch rows are timed and verified (not "needs ...")
# ray    docs/beyond-one-machine.md's smoke sweep on a local Ray (hydra/launcher=ray): both jobs complete
# sweep  a small halving sweep, then optuna-dashboard on its study (docs/sweeps.md): the API lists the study;
#        the study-database drivers (psycopg, PyMySQL) import
# docs   mkdocs build --strict (CONTRIBUTING.md)
# cabt   a demo day of the real game (docs/real-game.md): self-play, import, build; the day's manifest is there
# Exit status: 0 when every extra checked passed; the failing ones are named on the last line.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}
shift || true
extras=("$@")
[ ${#extras[@]} -gt 0 ] || extras=(peers ray sweep docs cabt)
root=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()

check_peers() {
  tcgexp-bench train --dataset 1d --root "$work/data" --parts steps --chunks 16 --hiddens 32 --steps 30 \
    --rounds 1 --peers jax eager | tee "$work/peers.out"
  ! grep -q "needs the 'peers' extra\|failed:" "$work/peers.out" &&
    grep -E '^\| 16 +\| 32 +\| JAX jit +\| [0-9,]+ ' "$work/peers.out" >/dev/null &&
    grep -E '^\| 16 +\| 32 +\| PyTorch eager +\| [0-9,]+ ' "$work/peers.out" >/dev/null
}

check_ray() {
  (cd "$work" && RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_USAGE_STATS_ENABLED=0 \
    python -m tcgexp.train --multirun +experiment=smoke hydra/launcher=ray hydra.launcher.ray.init.address=local \
    +hydra.launcher.ray.init.num_cpus=2 +hydra.launcher.ray.init.include_dashboard=false \
    hydra.sweep.dir="$work/ray-sweep" tracking=off) &&
    [ -f "$work/ray-sweep/0/result.json" ] && [ -f "$work/ray-sweep/1/result.json" ]
}

check_sweep() {
  python -c "import psycopg, pymysql" || return 1
  (cd "$work" && python -m tcgexp.train --multirun hydra/sweeper=halving hydra.sweeper.n_trials=2 \
    hydra.sweeper.min_epochs=1 hydra.sweeper.max_epochs=2 hydra.sweeper.sampler=grid 'optimizer.lr=choice(1e-3,3e-3)' \
    dataset.root="$work/data-sweep" dataset.rows_per_day=500 dataset.row_group_rows=128 model.hidden=8 \
    tbptt.chunk=4 tbptt.batch_size=64 tracking=off hydra.sweep.dir="$work/halving") || return 1
  local port
  port=$(python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  optuna-dashboard "sqlite:///$work/halving/optuna.db" --host 127.0.0.1 --port "$port" >"$work/dash.log" 2>&1 &
  local dash=$! ok=1
  for _ in $(seq 60); do
    if python -c "import json, sys, urllib.request as u; d = json.load(u.urlopen('http://127.0.0.1:$port/api/studies'));
sys.exit(0 if d['study_summaries'] else 1)" 2>/dev/null; then ok=0; break; fi
    sleep 1
  done
  kill "$dash" 2>/dev/null; wait "$dash" 2>/dev/null
  [ $ok -eq 0 ] || { echo "optuna-dashboard did not list the study:"; tail -5 "$work/dash.log"; }
  return $ok
}

check_docs() {
  NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$work/site"
}

check_cabt() {
  (cd "$work" && python -m tcgexp.data dataset=cabt_demo dataset.root="$work/cabt" dataset.demo.episodes_per_day=4) &&
    ls "$work"/cabt/bc_data/*.manifest.json >/dev/null
}

for extra in "${extras[@]}"; do
  echo "== extra '$extra': a fresh environment, pip install -e \".[$extra]\" alone"
  env="$work/venv-$extra"
  if "$python" -m venv "$env" && "$env/bin/pip" install -q -e "$root[$extra]" &&
     (source "$env/bin/activate" && "check_$extra"); then
    echo "== extra '$extra': ok"
  else
    echo "== extra '$extra': FAILED"
    failed+=("$extra")
  fi
  rm -rf "$env"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "check-extras: failed: ${failed[*]}"
  exit 1
fi
echo "check-extras: ${extras[*]}: ok"
