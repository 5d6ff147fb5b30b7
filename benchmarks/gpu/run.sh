#!/usr/bin/env bash
# Everything a GPU machine checks, in one call, from the repository root:
#   1. installs this package into the machine's Python without touching torch (a dry run first shows what pip would
#      change; then `pip install --no-deps --no-build-isolation -e .`), with the carried timm wheel only where the
#      machine's timm is older than the one this package needs;
#   2. the CUDA tests (tests/test_cuda.py, marker cuda) and, beside them with the GPU hidden, the rest of the suite,
#      within TEST_S seconds (default 240; the tests not started by then are skipped, and both runs still report);
#   3. the speed benchmarks on the idle machine: training img/s against timm's train.py and inference img/s through
#      timm's benchmark.py (benchmarks/gpu/anchor_throughput.py), model creation on the CPU and with device='cuda'
#      (benchmarks/create_time.py), within what is left of BUDGET_S;
#   4. results in $OUT, 6 files: run.log, results.json (machine, versions, date, test counts, ratios), benchmarks.txt,
#      pip.txt, cuda-tests.xml, suite.xml.
# Prepare first, where timm's scripts are: bash benchmarks/gpu/prepare.sh (fills .gpu-carry/).
#   OUT=/tmp/gpu-out bash benchmarks/gpu/run.sh
#   QUICK=1 OUT=/tmp/gpu-out bash benchmarks/gpu/run.sh   # shrunk benchmarks and a slice of the suite (a rehearsal)
# Without a GPU it runs end to end: the CUDA tests skip, the benchmarks run on the CPU. BUDGET_S (default 480)
# bounds the whole run: each benchmark gets a time limit from what the tests left.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the results}"
PY=${PYTHON:-python3}
CARRY=${CARRY:-.gpu-carry}
QUICK=${QUICK:-0}
BUDGET_S=${BUDGET_S:-480}
WORK=$(mktemp -d)
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
# stage NAME COMMAND...: runs it, logs its time and exit status (a failing stage does not stop the run)
stage() {
    local name=$1 t0 status
    shift
    echo "== [$(elapsed)s] $name: $*"
    t0=$(date +%s)
    "$@"
    status=$?
    printf '%s\t%s\t%s\n' "$name" $(( $(date +%s) - t0 )) "$status" >> "$WORK/stages.tsv"
    echo "== [$(elapsed)s] $name: exit $status"
    return 0
}
export PYTHONUNBUFFERED=1 TIMM_SCRIPTS_DIR=$PWD/$CARRY/timm-scripts
HAS_CUDA=$($PY -c 'import torch; print(int(torch.cuda.is_available()))')
DEVICE=cpu; [ "$HAS_CUDA" = 1 ] && DEVICE=cuda
echo "== $(date -u +%FT%TZ) $PY ($($PY --version 2>&1)), device $DEVICE, QUICK=$QUICK, budget ${BUDGET_S}s"
[ "$HAS_CUDA" = 1 ] && nvidia-smi -L
[ "$HAS_CUDA" = 1 ] || echo "== no CUDA GPU: the CUDA tests skip and the benchmarks run on the CPU"

# ---- 1. install
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
      echo "# pip check"; $PY -m pip check; true; } > "$OUT/pip.txt" 2>&1
    cat "$OUT/pip.txt"
    grep -i -E '^[<>] (torch|torchvision|huggingface.hub|safetensors|numpy)==' "$OUT/pip.txt" \
        && { echo "the install changed torch, torchvision, huggingface_hub, safetensors or numpy"; return 1; }
    grep -E '^[<>] ' "$OUT/pip.txt" | sed 's/^/changed: /' > "$WORK/install.txt"
    $PY -c 'import timm_structinit, timm, torch; print("installed: timm_structinit from", timm_structinit.__file__,
                                                        "| timm", timm.__version__, "| torch", torch.__version__)'
}
stage install install

# ---- 2. tests: the CUDA tests, and beside them the suite on the CPU (GPU hidden), within TEST_S seconds: then the
# tests not started yet are skipped (pytest_deadline.py) and both runs still report; a hard limit 90 s later
TEST_S=${TEST_S:-240}
# the working tree first: what the tests import is this checkout, installed or not
export PYTEST_DEADLINE=$(( $(date +%s) + TEST_S )) PYTHONPATH=$PWD:$PWD/benchmarks/gpu${PYTHONPATH:+:$PYTHONPATH}
XDIST=(); $PY -c 'import xdist' 2>/dev/null && XDIST=(-n "$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))")
SUITE=(tests); [ "$QUICK" = 1 ] && SUITE=(tests/test_recipes.py tests/test_cli_errors.py)
echo "== [$(elapsed)s] tests: ${TEST_S}s; suite: ${SUITE[*]} ${XDIST[*]}"
stage suite env CUDA_VISIBLE_DEVICES= timeout -k 10 $(( TEST_S + 90 )) $PY -m pytest -q -p no:cacheprovider \
    -p pytest_deadline -m 'not cuda' "${XDIST[@]}" "${SUITE[@]}" --junitxml "$OUT/suite.xml" > "$WORK/suite.log" 2>&1 &
suite_pid=$!
stage cuda_tests timeout -k 10 $(( TEST_S + 90 )) $PY -m pytest -q -p no:cacheprovider -p pytest_deadline -m cuda \
    tests/test_cuda.py -rs --junitxml "$OUT/cuda-tests.xml"
wait $suite_pid
echo "== suite (last lines of its output):"; tail -n 25 "$WORK/suite.log"

# ---- 3. benchmarks, on the machine the tests left idle, within what is left of BUDGET_S
if [ "$QUICK" = 1 ]; then
    ANCHOR=(--models vit_tiny_patch2_32_impulse3 --batch-size 32 --workers 2 --epochs 2 --train-images 128
            --warm-iter 1 --bench-iter 5 --model-kwargs depth=1)
    CREATE=(--repeats 1 --models vit_tiny_patch2_32_impulse3)
else
    ANCHOR=(--batch-size 128 --workers 12 --epochs 3 --warm-iter 5 --bench-iter 30)
    CREATE=(--repeats 2 --models vit_tiny_patch2_32_impulse3 vit_base_patch16_224_mimetic
            vit_base_patch16_224_impulse2025 mixer_s4_32_impulse3)
fi
left() { local s=$(( BUDGET_S - $(elapsed) - $1 )); echo $(( s < 30 ? 30 : s )); }
AMP=bfloat16; [ "$DEVICE" = cpu ] && AMP=''
if [ -f "$TIMM_SCRIPTS_DIR/train.py" ]; then
    stage anchor_throughput timeout -k 10 "$(left 80)" $PY benchmarks/gpu/anchor_throughput.py \
        --scripts "$TIMM_SCRIPTS_DIR" --device $DEVICE --amp-dtype "$AMP" "${ANCHOR[@]}" \
        --out "$WORK/anchor.txt" --json "$WORK/anchor.json"
else
    echo "== no timm scripts in $TIMM_SCRIPTS_DIR (run benchmarks/gpu/prepare.sh): speed against timm's scripts skipped"
fi
stage create_time_cpu timeout -k 10 "$(left 50)" $PY benchmarks/create_time.py --device cpu --threads "$(nproc)" \
    "${CREATE[@]}" --out "$WORK/create_cpu.txt"
if [ "$DEVICE" = cuda ]; then
    stage create_time_cuda timeout -k 10 "$(left 10)" $PY benchmarks/create_time.py --device cuda \
        --threads "$(nproc)" "${CREATE[@]}" --out "$WORK/create_cuda.txt"
else
    echo "== no CUDA GPU: model creation with device='cuda' skipped"
fi

# ---- 4. results
cat "$WORK"/anchor.txt "$WORK"/create_cpu.txt "$WORK"/create_cuda.txt > "$OUT/benchmarks.txt" 2>/dev/null
$PY benchmarks/gpu/summarize.py --work "$WORK" --tests "$OUT" --out "$OUT/results.json"
rm -rf "$WORK"
echo "== [$(elapsed)s] done; in $OUT: $(ls "$OUT" | tr '\n' ' ')"
