#!/usr/bin/env bash
# Gather what benchmarks/gpu/run.sh needs and a GPU machine may lack into .gpu-carry/ (ignored by git): timm's own
# scripts (they ship in timm's source repository, not in its wheel) and the timm wheel this package needs, which
# run.sh installs only where the machine's timm is older.
#   TIMM_SCRIPTS_DIR=path/to/pytorch-image-models bash benchmarks/gpu/prepare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts=${TIMM_SCRIPTS_DIR:-../shared/timm-scripts}
timm_version=${TIMM_VERSION:-1.0.31}
if [ ! -f "$scripts/train.py" ] || [ ! -f "$scripts/benchmark.py" ]; then
    echo "prepare.sh: error: no train.py and benchmark.py in $scripts; set TIMM_SCRIPTS_DIR to the folder of timm's scripts" >&2
    exit 2
fi
rm -rf .gpu-carry.partial
mkdir -p .gpu-carry.partial/timm-scripts .gpu-carry.partial/wheels
for f in train.py benchmark.py validate.py inference.py LICENSE; do
    if [ -f "$scripts/$f" ]; then cp "$scripts/$f" .gpu-carry.partial/timm-scripts/; fi
done
python3 -m pip download -q --no-deps --only-binary=:all: "timm==$timm_version" -d .gpu-carry.partial/wheels
rm -rf .gpu-carry && mv .gpu-carry.partial .gpu-carry
du -sh .gpu-carry
ls .gpu-carry/timm-scripts .gpu-carry/wheels
