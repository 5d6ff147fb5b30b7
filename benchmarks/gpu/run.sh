#!/usr/bin/env bash
# What a GPU machine checks, in stages that each fit one command of the machine (at most 10 minutes), the most
# important first; each stage writes its results into $OUT as it goes, so a stage cut short still leaves what it
# measured. From the repository root:
#
#   OUT=/tmp/gpu-out bash benchmarks/gpu/run.sh speed         # ~4 min: where a training run's time goes, device
#                                                            #   loader against timm's; the model's own step
#   OUT=/tmp/gpu-out bash benchmarks/gpu/run.sh setup-2024    # ~8 min: the 2024 setup, 3 inits x 2 seeds, through
#                                                            #   the device loader (LOADER=timm: timm's loader)
#   OUT=/tmp/gpu-out bash benchmarks/gpu/run.sh setup-2025    # ~9 min: the 2025 setup's seed 0
#   OUT=/tmp/gpu-out bash benchmarks/gpu/run.sh cuda-tests    # ~5 min: tests/test_cuda.py
#   OUT=/tmp/gpu-out bash benchmarks/gpu/run.sh suite         # ~5 min: the suite with the GPU hidden
#   OUT=/tmp/gpu-out bash benchmarks/gpu/run.sh create-time   # ~2 min: model creation, CPU and device='cuda'
#
# Several stage names run those stages in that order, within BUDGET_S seconds in all (default 540: one command).
# Every stage first installs this package into the machine's Python without touching torch (a dry run first shows
# what pip would change), with the carried timm wheel only where the machine's timm is older (prepare.sh fills
# .gpu-carry/). The stages that train read CIFAR-10 from the packed copy .gpu-data/cifar10.tar.gz
# (benchmarks/gpu/pack_cifar10.py). Results: run.log, results.json (machine, versions, date, stages, test counts) and
# each stage's own files (speed.txt; setup-2024/ and setup-2025/ as benchmarks/gpu/compare_inits.sh writes them;
# cuda-tests.xml; suite.xml; benchmarks.txt). QUICK=1 shrinks every stage to a rehearsal, which also runs on a
# machine without a GPU (the CUDA parts skipped, the benchmarks on the CPU).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the results}"
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(speed)
for s in "${STAGES[@]}"; do
    case $s in speed|setup-2024|setup-2025|cuda-tests|suite|create-time) ;;
        *) echo "run.sh: stage '$s': valid stages are speed setup-2024 setup-2025 cuda-tests suite create-time" >&2
           exit 2 ;;
    esac
done
PY=${PYTHON:-python3}
CARRY=${CARRY:-.gpu-carry}
PACK=${PACK:-.gpu-data/cifar10.tar.gz}
QUICK=${QUICK:-0}
LOADER=${LOADER:-device}
BUDGET_S=${BUDGET_S:-540}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
left() { local s=$(( BUDGET_S - $(elapsed) - $1 )); echo $(( s < 30 ? 30 : s )); }
# stage NAME COMMAND...: runs it, logs its time and exit status (a failing stage does not stop the run)
stage() {
    local name=$1 t0 status
    shift
    echo "== [$(elapsed)s] $name: $*"
    t0=$(date +%s)
    "$@"
    status=$?
    printf '%s\t%s\t%s\n' "$name" $(( $(date +%s) - t0 )) "$status" >> "$OUT/stages.tsv"
    echo "== [$(elapsed)s] $name: exit $status"
    return 0
}
export PYTHONUNBUFFERED=1 TIMM_SCRIPTS_DIR=$PWD/$CARRY/timm-scripts
HAS_CUDA=$($PY -c 'import torch; print(int(torch.cuda.is_available()))')
DEVICE=cpu; [ "$HAS_CUDA" = 1 ] && DEVICE=cuda
echo "== $(date -u +%FT%TZ) $PY ($($PY --version 2>&1)), device $DEVICE, stages ${STAGES[*]}, QUICK=$QUICK, budget ${BUDGET_S}s"
[ "$HAS_CUDA" = 1 ] && nvidia-smi -L
[ "$HAS_CUDA" = 1 ] || echo "== no CUDA GPU: the CUDA tests skip and the benchmarks run on the CPU"

install() {
    local need
    need=$($PY - <<'EOF'
from importlib.metadata import version
from packaging.version import Version
import re, tomllib
floor = next(d for d in tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'] if d.startswith('timm'))
print(int(Version(version('timm')) < Version(re.search(r'>=\s*([\w.]+)', floor).group(1))))
EOF
)
    $PY -m pip list --format=freeze 2>/dev/null | sort > "$WORK/pip-before.txt"
    if [ "$need" = 1 ]; then
        echo "timm $($PY -c 'import timm; print(timm.__version__)') is older than this package needs:" \
            "installing the carried wheel"
        $PY -m pip install -q --no-deps --no-index "$CARRY"/wheels/timm-*.whl || return 1
    fi
    echo '$ pip install --dry-run --no-index --no-build-isolation .   (what pip resolves against what is installed)'
    $PY -m pip install --dry-run --no-index --no-build-isolation . 2>&1 | grep -v '^\s*$' | tail -5
    $PY -m pip install -q --no-deps --no-build-isolation -e . || return 1
    $PY -m pip list --format=freeze 2>/dev/null | sort > "$WORK/pip-after.txt"
    { echo "# pip list: before -> after the install"; diff "$WORK/pip-before.txt" "$WORK/pip-after.txt"
      echo "# pip check"; $PY -m pip check; true; } > "$WORK/pip.txt" 2>&1
    cat "$WORK/pip.txt"
    grep -i -E '^[<>] (torch|torchvision|huggingface.hub|safetensors|numpy)==' "$WORK/pip.txt" \
        && { echo "the install changed torch, torchvision, huggingface_hub, safetensors or numpy"; return 1; }
    $PY -c 'import timm_structinit, timm, torch; print("installed: timm_structinit from", timm_structinit.__file__,
                                                        "| timm", timm.__version__, "| torch", torch.__version__)'
}

unpack() {  # the packed CIFAR-10 copy, once, into $WORK/cifar10
    [ -d "$WORK/cifar10" ] && return 0
    [ -f "$PACK" ] || { echo "no $PACK: write it with python benchmarks/gpu/pack_cifar10.py --wheels"; return 1; }
    tar xzf "$PACK" -C "$WORK"
}

speed() {
    unpack || return 1
    local setup=2024 steps=30 rounds=(--rounds 3 --epochs 3)
    [ "$QUICK" = 1 ] && { setup=cpu; steps=5; rounds=(--rounds 1 --epochs 2 --train-subset 512 --depth 2); }
    timeout -k 10 "$(left 60)" $PY benchmarks/data_path.py --setup $setup --device $DEVICE --compile \
        --steps $steps --data-dir "$WORK/cifar10" --out "$OUT/speed.txt"
    # the model's own step: a registered class-token model against timm's, same loop and data (on the device)
    timeout -k 10 "$(left 10)" $PY benchmarks/train_throughput.py --device $DEVICE --workers 4 \
        --data-dir "$WORK/cifar10" "${rounds[@]}" --out "$WORK/train_throughput.txt" \
        && cat "$WORK/train_throughput.txt" >> "$OUT/speed.txt"
}

setup() {  # setup-2024 | setup-2025 through benchmarks/gpu/compare_inits.sh, results under $OUT/<stage>
    # the runs read their images through the device loader (LOADER=timm: through timm's workers instead)
    local year=${1#setup-} flags="--loader $LOADER" extra=() results=${RESULTS:-benchmarks/results/compare_inits}
    if [ "$QUICK" = 1 ]; then
        # a rehearsal: tiny runs (on the CPU where there is no GPU), into a scratch folder, not the committed results
        flags+=" --epochs 1 --train-subset 256 --val-subset 128 --batch-size 64 --model-kwargs depth=1"
        [ "$DEVICE" = cpu ] && flags+=" --device cpu"
        results=$WORK/compare_inits
    fi
    extra=(--train-flags "$flags")
    [ "$year" = 2025 ] && extra+=(--only gpu2025_default_s0 gpu2025_mimetic_s0 gpu2025_impulse_s0)
    # the timm wheel for a machine whose timm is older: prepare.sh's copy in $CARRY, else pack_cifar10.py --wheels's
    local wheels=${WHEELS:-}
    [ -z "$wheels" ] && compgen -G "$CARRY/wheels/timm-*.whl" > /dev/null && wheels=$CARRY/wheels
    OUT="$OUT/$1" RESULTS=$results WHEELS=${wheels:-.gpu-data/wheels} TIME_LIMIT=$(( $(left 90) - 60 )) \
        bash benchmarks/gpu/compare_inits.sh "$year" "${extra[@]}"
}

tests() {  # cuda-tests | suite: within the stage's time, the tests not started by then skipped (pytest_deadline.py)
    local which=$1 xdist=() files=(tests)
    export PYTEST_DEADLINE=$(( $(date +%s) + $(left 60) )) PYTHONPATH=$PWD:$PWD/benchmarks/gpu${PYTHONPATH:+:$PYTHONPATH}
    if [ "$which" = cuda-tests ]; then
        timeout -k 10 "$(left 0)" $PY -m pytest -q -p no:cacheprovider -p pytest_deadline -m cuda tests/test_cuda.py \
            -rs --junitxml "$OUT/cuda-tests.xml"
        return
    fi
    $PY -c 'import xdist' 2>/dev/null && xdist=(-n "$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))")
    [ "$QUICK" = 1 ] && files=(tests/test_recipes.py tests/test_cli_errors.py)
    CUDA_VISIBLE_DEVICES= timeout -k 10 "$(left 0)" $PY -m pytest -q -p no:cacheprovider -p pytest_deadline \
        -m 'not cuda' "${xdist[@]}" "${files[@]}" --junitxml "$OUT/suite.xml"
}

create_time() {
    local models=(vit_tiny_patch2_32_impulse3 vit_base_patch16_224_mimetic vit_base_patch16_224_impulse2025
                  mixer_s4_32_impulse3)
    [ "$QUICK" = 1 ] && models=(vit_tiny_patch2_32_impulse3)
    timeout -k 10 "$(left 60)" $PY benchmarks/create_time.py --device cpu --threads "$(nproc)" --repeats 2 \
        --models "${models[@]}" --out "$WORK/create_cpu.txt"
    cat "$WORK/create_cpu.txt" >> "$OUT/benchmarks.txt"
    if [ "$DEVICE" = cuda ]; then
        timeout -k 10 "$(left 10)" $PY benchmarks/create_time.py --device cuda --threads "$(nproc)" --repeats 2 \
            --models "${models[@]}" --out "$WORK/create_cuda.txt"
        cat "$WORK/create_cuda.txt" >> "$OUT/benchmarks.txt"
    fi
}

stage install install
for s in "${STAGES[@]}"; do
    case $s in
        speed) stage speed speed ;;
        setup-2024|setup-2025) stage "$s" setup "$s" ;;
        cuda-tests|suite) stage "$s" tests "$s" ;;
        create-time) stage create-time create_time ;;
    esac
done
$PY benchmarks/gpu/summarize.py --stages "$OUT/stages.tsv" --tests "$OUT" --pip "$WORK/pip.txt" \
    --out "$OUT/results.json"
echo "== [$(elapsed)s] done; in $OUT: $(ls "$OUT" | tr '\n' ' ')"
