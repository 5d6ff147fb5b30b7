""" CUDA correctness: the registered models, the inits, mixed precision, the training command and timm's own scripts
on a GPU. Every test here carries the `cuda` marker (`python -m pytest -m cuda` selects them) and skips where
`torch.cuda.is_available()` is False, as on CI.

Where the weights come from on a GPU: every init computes on the CPU (its generator is a CPU `torch.Generator`, and
what it reads of the model, such as the position table of `impulse2025`, is copied to the CPU first) and copies the
result into the model, so an init gives the same weights, bit for bit, on a model on the GPU as on the same model on
the CPU. The weights an init does not write are timm's, drawn on the model's device: `device='cuda'` draws them from
the GPU's generator, so a model built there differs from one built on the CPU outside the init's weights, as plain
timm's do.

timm's train.py and benchmark.py are read from $TIMM_SCRIPTS_DIR (default ../shared/timm-scripts beside the
repository); their tests skip when the scripts are absent.
"""
import copy
import csv
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models.mlp_mixer import MlpMixer

import timm_structinit
from timm_structinit import train as train_mod
from timm_structinit.inits import apply_init_cfg
from timm_structinit.inits.heads import find_attention
from timm_structinit.inits.impulse import impulse_pseudo_input, impulse_target
from timm_structinit.inits.impulse_solvers import map_metrics
from timm_structinit.layers.pos_embed import sincos_pos_embed
from colour_images import write_colour_coded_splits

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(os.environ.get('TIMM_SCRIPTS_DIR') or REPO.parent / 'shared' / 'timm-scripts')
HAS_CUDA = torch.cuda.is_available()

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not HAS_CUDA, reason='needs a CUDA GPU: torch.cuda.is_available() is False'),
]
needs_scripts = pytest.mark.skipif(
    not (SCRIPTS / 'train.py').is_file(),
    reason=f"timm's train.py not found in {SCRIPTS} (set TIMM_SCRIPTS_DIR to the folder of timm's scripts)")

REGISTERED = sorted(m for m in timm.list_models()
                    if timm.models.model_entrypoint(m).__module__.startswith('timm_structinit'))
AMP_DTYPES = [torch.bfloat16, torch.float16]
# one model of every family and init, with impulse2025's large logits (Q/K factors of norm 7 over a x18 table)
AMP_MODELS = ['vit_tiny_patch2_32_mimetic', 'vit_tiny_patch2_32_impulse3', 'vit_tiny_patch16_224_impulse2025',
              'swin_tiny_patch2_window4_32_impulse3', 'swin_tiny_patch2_window4_32_mimetic', 'mixer_s4_32_impulse3']
TINY_VIT = ['--model', 'vit_tiny_patch2_32_impulse3',
            '--model-kwargs', 'embed_dim=32', 'depth=2', 'num_heads=2', 'patch_size=4']
FAST = ['--opt', 'adamw', '--lr', '1e-3', '--weight-decay', '0.01', '--warmup-epochs', '0', '--workers', '2',
        '--batch-size', '16', '--log-interval', '1000', '--seed', '3']
CLASSES = ('cat', 'dog', 'ship')


@pytest.fixture(scope='module', autouse=True)
def init_threads():
    """ The inits spread their CPU math over torch's threads (conftest keeps 2 for CI); a GPU machine has more cores,
    and the ViT-B mimetic builds here are most of this file's time. """
    threads = torch.get_num_threads()
    torch.set_num_threads(max(threads, min(4, os.cpu_count() or 1)))
    yield
    torch.set_num_threads(threads)


def _state_dicts_equal(a, b):
    a, b = a.state_dict(), b.state_dict()
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def _on_device(model, device_type: str) -> bool:
    return all(t.device.type == device_type for t in (*model.parameters(), *model.buffers()))


def _input_for(model, batch: int = 4, device='cuda') -> torch.Tensor:
    shape = model.pretrained_cfg['input_size']
    return torch.randn(batch, *shape, generator=torch.Generator().manual_seed(0)).to(device)


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))


def _run(args, cwd, timeout=300) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f'{args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}'
    return result


def _train(argv) -> None:
    assert train_mod.main([str(a) for a in argv]) == 0, argv


def _summary(run: Path):
    with open(run / 'summary.csv', newline='') as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------ apply_init on timm's models


def _timm_vit():
    return timm.create_model('vit_tiny_patch16_224', img_size=32, patch_size=4, depth=3, num_classes=10)


def _timm_swin():
    return timm.create_model('swin_tiny_patch4_window7_224', img_size=32, patch_size=2, window_size=4, num_classes=10)


def _timm_mixer():
    return MlpMixer(img_size=32, patch_size=4, num_blocks=2, embed_dim=128, mlp_ratio=(0.5, 4.0), num_classes=10)


@pytest.mark.parametrize('build, init, kwargs', [
    (_timm_vit, 'mimetic', {}),
    (_timm_vit, 'impulse', {}),
    (_timm_vit, 'impulse2025', {}),
    (_timm_vit, 'impulse', dict(solver='svd', content='orthogonal')),  # reads the patch embedding
    (_timm_vit, 'impulse', dict(solver='svd', layer_inputs='propagated', vproj='mimetic')),  # runs the blocks
    (_timm_swin, 'mimetic', {}),
    (_timm_swin, 'impulse', {}),
    (_timm_mixer, 'impulse', {}),
], ids=['vit-mimetic', 'vit-impulse', 'vit-impulse2025', 'vit-orthogonal', 'vit-propagated', 'swin-mimetic',
        'swin-impulse', 'mixer-impulse'])
def test_apply_init_on_a_timm_model_on_the_gpu(build, init, kwargs):
    torch.manual_seed(0)
    cpu = build()
    gpu = copy.deepcopy(cpu).cuda()
    record_cpu = timm_structinit.apply_init(cpu, init, seed=5, **kwargs)
    record_gpu = timm_structinit.apply_init(gpu, init, seed=5, **kwargs)
    assert _on_device(gpu, 'cuda')
    assert _state_dicts_equal(gpu, cpu)
    assert json.dumps(record_gpu, sort_keys=True) == json.dumps(record_cpu, sort_keys=True)


def test_apply_init_from_a_side_stream_writes_before_the_callers_next_kernel():
    """ The init's math runs on a helper thread; its writes land on the caller's current stream, so a kernel the
    caller queues next on that stream reads the initialized weights. """
    torch.manual_seed(0)
    cpu = _timm_vit()
    gpu = copy.deepcopy(cpu).cuda()
    timm_structinit.apply_init(cpu, 'mimetic', seed=5)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        timm_structinit.apply_init(gpu, 'mimetic', seed=5)
        read = {k: v.clone() for k, v in gpu.state_dict().items()}  # queued on the side stream, after the writes
    side.synchronize()
    assert all(torch.equal(read[k].cpu(), v) for k, v in cpu.state_dict().items())


# ------------------------------------------------------------------------------------------------ mixed precision


@pytest.mark.parametrize('dtype', AMP_DTYPES, ids=['bf16', 'fp16'])
@pytest.mark.parametrize('name', AMP_MODELS)
def test_autocast_forward_backward_is_finite(name, dtype):
    torch.manual_seed(0)
    model = timm.create_model(name, struct_init_seed=0).cuda().train()
    images = _input_for(model, batch=8)
    target = torch.arange(8, device='cuda') % model.num_classes
    with torch.autocast('cuda', dtype=dtype):
        logits = model(images)
        loss = F.cross_entropy(logits, target)
    assert logits.dtype == dtype
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum() for g in grads) > 0


def _pseudo_input_target_mass(model, dtype) -> float:
    """ Mean mass of the first layer's heads on their impulse targets, over the pseudo input the init solved on, the
    maps computed on the GPU by the attention kernel the model runs (scaled_dot_product_attention, whose output
    with the identity as values is the map itself), under autocast in `dtype` (None: float32). """
    attn = find_attention(model)[0]
    record = model.struct_init_record
    x = impulse_pseudo_input(model, attn.qkv.in_features, record['cfg']).cuda()
    tokens, dim = x.shape
    heads = attn.num_heads
    with torch.no_grad(), torch.autocast('cuda', dtype=dtype or torch.float32, enabled=dtype is not None):
        qkv = attn.qkv(x).reshape(tokens, 3, heads, dim // heads).permute(1, 2, 0, 3)
        q, k = qkv[0], qkv[1]
        eye = torch.eye(tokens, device='cuda', dtype=q.dtype).expand(heads, tokens, tokens)
        maps = F.scaled_dot_product_attention(q[None], k[None], eye[None])[0]
    assert maps.dtype == (dtype or torch.float32)
    grid = tuple(model.patch_embed.grid_size)
    targets = torch.stack([impulse_target(grid, tuple(o), record['cfg']['border']) for o in record['offsets'][0]])
    return map_metrics(maps.float().cpu(), targets)['target_mass'].mean().item()


@pytest.mark.parametrize('dtype', AMP_DTYPES, ids=['bf16', 'fp16'])
@pytest.mark.parametrize('name', ['vit_tiny_patch2_32_impulse3', 'vit_tiny_patch2_32_impulse5',
                                  'vit_tiny_patch16_224_impulse2025'])
def test_impulse_maps_keep_their_target_mass_in_half_precision(name, dtype):
    model = timm.create_model(name, struct_init_seed=0).cuda().eval()
    full = _pseudo_input_target_mass(model, None)
    half = _pseudo_input_target_mass(model, dtype)
    # the float32 maps on the GPU are those the init solved for on the CPU
    assert full == pytest.approx(sum(model.struct_init_record['target_mass'][0]) / model.blocks[0].attn.num_heads,
                                 rel=1e-3)
    assert half == pytest.approx(full, rel=0.01)


# ------------------------------------------------------------------------------------------- training command


@pytest.fixture(scope='module')
def image_folder(tmp_path_factory) -> Path:
    """ train/ and val/ ImageFolder splits of colour-coded 32x32 images, 16 and 4 per class. """
    return write_colour_coded_splits(tmp_path_factory.mktemp('images'), CLASSES, {'train': 16, 'val': 4})


def _data(folder: Path):
    return ['--data-dir', folder, '--train-split', 'train', '--val-split', 'val', '--num-classes', len(CLASSES)]


@pytest.fixture(scope='module')
def amp_runs(image_folder, tmp_path_factory):
    """ Two epochs of a tiny impulse ViT on the GPU under --amp in each dtype (the impulse target mass is tracked on
    the GPU too). """
    out = tmp_path_factory.mktemp('amp')
    for dtype in ('bfloat16', 'float16'):
        _train([*TINY_VIT, *FAST, *_data(image_folder), '--device', 'cuda', '--amp', '--amp-dtype', dtype,
                '--epochs', 2, '--output', out, '--experiment', dtype])
    return out


@pytest.mark.parametrize('dtype', ['bfloat16', 'float16'])
def test_train_amp(amp_runs, dtype):
    run = amp_runs / dtype
    rows = _summary(run)
    assert [r['epoch'] for r in rows] == ['0', '1']
    assert all(math.isfinite(float(r['train_loss'])) for r in rows)
    assert 0 < float(rows[-1]['eval_target_mass']) <= 1
    checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert all(torch.isfinite(v).all() for v in checkpoint['state_dict'].values() if v.is_floating_point())
    assert ('amp_scaler' in checkpoint) == (dtype == 'float16')  # a loss scaler for float16 only


def test_train_torchcompile_ema_and_grad_accum(image_folder, tmp_path):
    _train([*TINY_VIT, *FAST, *_data(image_folder), '--device', 'cuda', '--amp', '--amp-dtype', 'bfloat16',
            '--torchcompile', '--model-ema', '--grad-accum-steps', 2, '--epochs', 2, '--output', tmp_path,
            '--experiment', 'run'])
    rows = _summary(tmp_path / 'run')
    assert len(rows) == 2 and 'eval_ema_top1' in rows[0]
    checkpoint = torch.load(tmp_path / 'run' / 'last.pth.tar', map_location='cpu', weights_only=False)
    # 48 images / batch 16 = 3 batches an epoch, 2 updates with --grad-accum-steps 2 (the last group is shorter)
    assert checkpoint['optimizer']['state'][0]['step'].item() == 4
    assert not any(k.startswith('_orig_mod.') for k in checkpoint['state_dict'])  # saved unwrapped


def test_recipe_by_name_shrunk(image_folder, tmp_path):
    """ The 2025 recipe (ViT-T/16 at 224 px, impulse2025, --amp in float16, mixup, RandAugment), two blocks deep
    on the tiny folder for one epoch. """
    _train(['-c', 'impulse2025_vit_tiny_patch16_224_cifar10', '--dataset', '', *_data(image_folder),
            '--model-kwargs', 'img_size=224', 'weight_init=reset', 'depth=2', '--epochs', 1, '--warmup-epochs', 0,
            '--batch-size', 8, '--validation-batch-size', 8, '--workers', 2, '--device', 'cuda',
            '--output', tmp_path, '--experiment', 'recipe'])
    (row,) = _summary(tmp_path / 'recipe')
    assert float(row['train_loss']) > 0


def test_device_loader_trains_on_the_gpu(image_folder, tmp_path):
    """ --loader device on CUDA: the images decoded once onto the GPU, RandAugment, mixup and random erasing there,
    under AMP, with EMA; two epochs, the evaluation included. """
    _train([*TINY_VIT, *FAST, *_data(image_folder), '--device', 'cuda', '--loader', 'device', '--amp',
            '--amp-dtype', 'bfloat16', '--aa', 'rand-m9-mstd0.5-inc1', '--mixup', '0.8', '--cutmix', '1.0',
            '--reprob', '0.25', '--model-ema', '--epochs', 2, '--output', tmp_path, '--experiment', 'run'])
    rows = _summary(tmp_path / 'run')
    assert [r['epoch'] for r in rows] == ['0', '1'] and 'eval_ema_top1' in rows[0]
    assert all(math.isfinite(float(r['train_loss'])) for r in rows)


def test_device_transform_waits_for_the_gpu_a_few_times_a_batch():
    """ The device transform of the 2024 recipe (RandomResizedCrop, flips, rand-m9-mstd0.5-inc1, random erasing)
    waits for the GPU a bounded number of times per batch: counted in the code, one count per RandAugment layer, one
    per affine kind and filter split, one for a rotation's matrices, and the small host-to-device copies of
    constants (fill colours, the crop fallback), about 20 in all. A wait per op drawn (what the grouping by op did
    with a `nonzero` per op) gives over 50. Each wait stops the host from queueing the step's kernels ahead. """
    import warnings
    from timm_structinit.data.device_transforms import DeviceTrainTransform
    transform = DeviceTrainTransform((3, 32, 32), (0.08, 1.0), (3 / 4, 4 / 3), 0.5, 0.0, 0.4,
                                     'rand-m9-mstd0.5-inc1', 'random', (0.49, 0.48, 0.45), (0.25, 0.24, 0.26),
                                     re_prob=0.25, device=torch.device('cuda'))
    generator = torch.Generator(device='cuda').manual_seed(0)
    images = torch.randint(0, 256, (512, 3, 32, 32), dtype=torch.uint8, device='cuda')
    transform(images, generator)  # the policy's tables and the resize weights made once, before counting
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        try:
            transform(images, generator)
        finally:
            torch.cuda.set_sync_debug_mode('default')
    waits = [w for w in caught if 'synchroniz' in str(w.message)]
    assert len(waits) <= 32, f'{len(waits)} waits for the GPU in one batch'


def test_cuda_checkpoint_resumes_on_cpu_and_back(image_folder, tmp_path):
    common = [*TINY_VIT, *FAST, *_data(image_folder)]
    _train([*common, '--device', 'cuda', '--epochs', 1, '--output', tmp_path, '--experiment', 'run'])
    last = tmp_path / 'run' / 'last.pth.tar'
    _train([*common, '--device', 'cpu', '--epochs', 2, '--resume', last])
    _train([*common, '--device', 'cuda', '--epochs', 3, '--resume', last])
    assert [r['epoch'] for r in _summary(tmp_path / 'run')] == ['0', '1', '2']
    assert torch.load(last, map_location='cpu', weights_only=False)['epoch'] == 2


def test_torchrun_one_process(image_folder, tmp_path):
    """ Under torchrun on the GPU. A world of one process is not distributed for timm's `init_distributed_device`
    (WORLD_SIZE=1), as for timm's train.py: DDP over NCCL starts at two GPUs (`test_nccl_ddp_step` checks it). """
    _run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=1',
          '-m', 'timm_structinit.train', *TINY_VIT, *FAST, *_data(image_folder), '--epochs', 1,
          '--output', tmp_path, '--experiment', 'ddp'], cwd=tmp_path)
    assert len(_summary(tmp_path / 'ddp')) == 1
    checkpoint = torch.load(tmp_path / 'ddp' / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert checkpoint['args'].device.startswith('cuda')


DDP_STEP = """
import copy, sys, torch, timm, timm_structinit
torch.distributed.init_process_group('nccl', init_method='tcp://127.0.0.1:' + sys.argv[1], rank=0, world_size=1)
assert torch.distributed.get_backend() == 'nccl'
model = timm.create_model('vit_tiny_patch2_32_impulse3', embed_dim=32, depth=2, num_heads=2, patch_size=4,
                          struct_init_seed=0).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model), device_ids=[0])
images = torch.randn(8, 3, 32, 32, device='cuda')
target = torch.arange(8, device='cuda') % 10
for m in (model, ddp):
    torch.nn.functional.cross_entropy(m(images), target).backward()
for (name, a), b in zip(model.named_parameters(), ddp.module.parameters()):
    if a.requires_grad:  # (the attention kernels' backward may add in another order from run to run)
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)
torch.distributed.destroy_process_group()
"""


def test_nccl_ddp_step(tmp_path):
    """ A registered model in DistributedDataParallel over NCCL (one process, the GPU there is): its gradients,
    all-reduced by NCCL, are those of the model alone. """
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    _run([sys.executable, '-c', DDP_STEP, port], cwd=tmp_path)


def test_export_of_a_gpu_trained_model_loads_in_plain_timm(amp_runs, tmp_path):
    """ The bfloat16 run's checkpoint, exported, loads in timm without this package (a fresh process that does not
    import it) and gives the logits this package's model gives with the same weights, both on the CPU. """
    checkpoint = amp_runs / 'bfloat16' / 'last.pth.tar'
    _run([sys.executable, '-m', 'timm_structinit.cli', 'export', 'vit_tiny_patch2_32_impulse3', tmp_path / 'export',
          '--checkpoint', checkpoint], cwd=tmp_path)
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    torch.save(images, tmp_path / 'images.pt')
    plain = ("import sys, timm, torch\n"
             "model = timm.create_model(f'local-dir:{sys.argv[1]}', pretrained=True).eval()\n"
             "assert 'timm_structinit' not in sys.modules\n"
             "with torch.no_grad():\n"
             "    torch.save(model(torch.load(sys.argv[2])), sys.argv[3])\n")
    _run([sys.executable, '-c', plain, tmp_path / 'export', tmp_path / 'images.pt', tmp_path / 'plain.pt'],
         cwd=tmp_path)
    ours = timm.create_model('vit_tiny_patch2_32_impulse3', num_classes=len(CLASSES), embed_dim=32, depth=2,
                             num_heads=2, patch_size=4, weight_init='skip')
    ours.load_state_dict(torch.load(checkpoint, map_location='cpu', weights_only=False)['state_dict'])
    with torch.no_grad():
        expected = ours.eval()(images)
    torch.testing.assert_close(torch.load(tmp_path / 'plain.pt'), expected, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------ timm's scripts


@needs_scripts
def test_timm_train_script_on_cuda(image_folder, tmp_path):
    _run([sys.executable, '-m', 'timm_structinit.run', SCRIPTS / 'train.py', *TINY_VIT, *_data(image_folder),
          '--device', 'cuda', '--amp', '--amp-dtype', 'bfloat16', '--input-size', 3, 32, 32, '--epochs', 1,
          '-b', 16, '--workers', 2, '--opt', 'adamw', '--lr', '1e-3', '--warmup-epochs', 0, '--output', tmp_path,
          '--experiment', 'run', '--seed', 0], cwd=tmp_path)
    checkpoint = torch.load(tmp_path / 'run' / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert checkpoint['arch'] == 'vit_tiny_patch2_32_impulse3'
    assert all(torch.isfinite(v).all() for v in checkpoint['state_dict'].values() if v.is_floating_point())


@needs_scripts
def test_timm_benchmark_script_on_cuda(tmp_path):
    results = tmp_path / 'bench.json'
    _run([sys.executable, '-m', 'timm_structinit.run', SCRIPTS / 'benchmark.py', '--model',
          'vit_tiny_patch2_32_impulse3', '--device', 'cuda', '--amp', '--amp-dtype', 'bfloat16', '--bench', 'both',
          '--num-warm-iter', 2, '--num-bench-iter', 5, '-b', 32, '--results-file', results, '--results-format',
          'json'], cwd=tmp_path)
    result = json.loads(results.read_text())
    result = result[0] if isinstance(result, list) else result
    assert result['infer_samples_per_sec'] > 0 and result['train_samples_per_sec'] > 0


# ------------------------------------------------- every registered model (last: the longest, ViT-B mimetic builds)


@pytest.mark.parametrize('name', REGISTERED)
def test_init_on_a_model_moved_to_the_gpu_matches_the_cpu(name):
    """ Built on the CPU then moved: the init applied again on the GPU copy writes the same bits as on the CPU, and
    every weight stays on the GPU. """
    cpu = timm.create_model(name, struct_init_seed=1)
    gpu = copy.deepcopy(cpu).cuda()
    if cpu.struct_init is not None:
        apply_init_cfg(gpu, gpu.struct_init, gpu.struct_init_cfg, seed=1)
    assert _on_device(gpu, 'cuda')
    assert _state_dicts_equal(gpu, cpu)
    with torch.no_grad():
        assert torch.isfinite(gpu.eval()(_input_for(gpu))).all()


@pytest.mark.parametrize('name', REGISTERED)
def test_built_with_device_cuda(name):
    """ `timm.create_model(name, device='cuda')`: everything on the GPU, and the init's weights are those the init
    computes on the CPU from the same model (timm's own weights were drawn on the GPU: the reference copies them). """
    gpu = timm.create_model(name, device='cuda', struct_init_seed=0)
    assert _on_device(gpu, 'cuda')
    if getattr(gpu, 'sincos_pos_embed', False):  # the fixed table is the CPU's, bit for bit
        prefix = 0 if gpu.no_embed_class else gpu.num_prefix_tokens
        expected = sincos_pos_embed(list(gpu.patch_embed.grid_size), gpu.embed_dim, num_prefix_tokens=prefix)
        assert torch.equal(gpu.pos_embed.cpu(), expected * gpu.pos_embed_scale)
    if gpu.struct_init is not None:
        reference = copy.deepcopy(gpu).cpu()
        apply_init_cfg(reference, reference.struct_init, reference.struct_init_cfg, seed=0)
        assert _state_dicts_equal(gpu, reference)
        assert gpu.struct_init_record['seed'] == 0
    with torch.no_grad():
        assert torch.isfinite(gpu.eval()(_input_for(gpu))).all()
