#!/usr/bin/env bash
# One GPU setup of benchmarks/compare_inits.py as one command on the GPU machine (docs/studies.md, "At the papers'
# model size (GPU)"): unpack the packed CIFAR-10 images (benchmarks/gpu/pack_cifar10.py), put the carried timm wheel
# first on the path where the machine's timm is older than the package needs, train the setup's runs inside the
# time limit, and leave in $OUT each run this command finished (runs/<run>/result.json) and one archive of the logs,
# the training folders and the report (logs.tar.gz): at most 7 files, two folders deep.
#
#   bash benchmarks/gpu/compare_inits.sh 2024        # carry: .gpu-data
#   bash benchmarks/gpu/compare_inits.sh 2025
#
# Environment: OUT (required: where the results go), PYTHON (python3), TIME_LIMIT (seconds in which runs start and
# end, 500: with unpacking, start-up and the last final evaluations the command ends inside 9 minutes), PACK
# (.gpu-data/cifar10.tar.gz), WHEELS (.gpu-data/wheels), RESULTS (benchmarks/results/compare_inits: the committed
# runs count as done, so a second call trains what the first left). Further arguments go to compare_inits.py (a
# rehearsal's --train-flags and --concurrent).
set -u -o pipefail
setup=${1:-}
case $setup in
  2024|2025) shift ;;
  *) echo "compare_inits.sh: setup '$setup': must be 2024 or 2025" >&2; exit 2 ;;
esac
if [ -z "${OUT:-}" ]; then
  echo "compare_inits.sh: OUT is not set: name the folder that receives the results" >&2
  exit 2
fi
python=${PYTHON:-python3}
limit=${TIME_LIMIT:-500}
pack=${PACK:-.gpu-data/cifar10.tar.gz}
wheels=${WHEELS:-.gpu-data/wheels}
results=${RESULTS:-benchmarks/results/compare_inits}
if [ ! -f "$pack" ]; then
  echo "compare_inits.sh: PACK $pack: no such file; write it with python benchmarks/gpu/pack_cifar10.py --wheels" >&2
  exit 2
fi

mkdir -p "$results/runs" || exit 1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tar xzf "$pack" -C "$scratch" || exit 1
touch "$scratch/started"

# timm: the machine's own, unless older than the floor in pyproject.toml; then the carried wheel, installed apart
site=
if ! "$python" - <<'EOF'
import re, sys, timm
from packaging.version import Version
floor = re.search(r'"timm>=([0-9.]+)"', open('pyproject.toml').read()).group(1)
print(f'timm {timm.__version__} here, the package needs >= {floor}', flush=True)
sys.exit(Version(timm.__version__) < Version(floor))
EOF
then
  PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --no-index --no-deps --no-compile --target "$scratch/site" "$wheels"/timm-*.whl || exit 1
  site="$scratch/site:"
fi
export PYTHONPATH="$site$PWD" PYTHONUNBUFFERED=1

timeout -s INT $((limit + 90)) "$python" benchmarks/compare_inits.py --gpu-$setup --data-dir "$scratch/cifar10" \
  --out-dir "$results" --time-limit "$limit" "$@" 2>&1 | tee "$scratch/compare_inits.log"
status=$?

# what this command finished, then everything else it wrote, in one archive
mkdir -p "$OUT/runs"
for result in $(find "$results/runs" -name result.json -newer "$scratch/started"); do
  run=$(basename "$(dirname "$result")")
  mkdir -p "$OUT/runs/$run" && cp "$result" "$OUT/runs/$run/"
done
results=$(cd "$results" && pwd)
# checkpoints stay behind: a stopped run's would pass the 16 MiB a returned file may hold
tar czf "$OUT/logs.tar.gz" --exclude='*.pth.tar' -C "$scratch" compare_inits.log -C "$results" results.md \
  $(cd "$results" && find runs -maxdepth 1 -name "gpu${setup}_*" -newer "$scratch/started")
ls -R "$OUT"
exit $status
