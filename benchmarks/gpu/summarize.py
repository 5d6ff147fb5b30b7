""" The one JSON of a benchmarks/gpu/run.sh run: machine, versions, date, what the install changed, how long each
stage took and how it ended, and the test counts (from the JUnit files the test stages wrote).

    python benchmarks/gpu/summarize.py --stages OUT/stages.tsv --tests OUT --pip PIP_TXT --out OUT/results.json
"""
import argparse
import json
import os
import platform
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

PACKAGES = ('torch', 'torchvision', 'timm', 'huggingface_hub', 'safetensors', 'numpy', 'pyyaml', 'tqdm', 'pillow',
            'pytest', 'timm-structinit')


def versions() -> dict:
    out = {'python': platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def machine() -> dict:
    import torch
    out = {'cpus': os.cpu_count(), 'platform': platform.platform(), 'cuda_available': torch.cuda.is_available()}
    if torch.cuda.is_available():
        out.update(gpu=torch.cuda.get_device_name(), torch_cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version(), gpu_memory_gib=round(
                       torch.cuda.get_device_properties(0).total_memory / 2 ** 30, 1))
        try:
            out['driver'] = subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
                                           capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out['driver'] = None
    return out


def junit_counts(path: Path) -> dict:
    """ tests, failures, errors, skipped and seconds of a pytest JUnit file, and the names of what failed. """
    if not path.is_file():
        return {'missing': str(path.name)}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == 'testsuite' else list(root)
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ('tests', 'failures', 'errors', 'skipped')}
    counts['seconds'] = round(sum(float(s.get('time', 0)) for s in suites), 1)
    counts['failed'] = [f'{c.get("classname")}::{c.get("name")}' for s in suites for c in s.iter('testcase')
                        if c.find('failure') is not None or c.find('error') is not None]
    counts['passed'] = counts['tests'] - counts['failures'] - counts['errors'] - counts['skipped']
    return counts


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--stages', required=True, help='the stages file run.sh wrote (name, seconds, exit status)')
    parser.add_argument('--tests', required=True, help='the folder of the JUnit files')
    parser.add_argument('--pip', default='', help="pip's changes as run.sh recorded them")
    parser.add_argument('--out', required=True)
    args = parser.parse_args(argv)
    stages = {}
    if Path(args.stages).is_file():
        for line in Path(args.stages).read_text().splitlines():
            name, seconds, status = line.split('\t')
            stages[name] = {'seconds': int(seconds), 'exit_status': int(status)}
    pip = Path(args.pip).read_text().splitlines() if args.pip and Path(args.pip).is_file() else []
    report = {
        'date': datetime.now(timezone.utc).isoformat(timespec='seconds'),
        'machine': machine(),
        'versions': versions(),
        'install': [f'changed: {line}' for line in pip if line.startswith(('<', '>'))],
        'stages': stages,
        'cuda_tests': junit_counts(Path(args.tests) / 'cuda-tests.xml'),
        'suite': junit_counts(Path(args.tests) / 'suite.xml'),
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + '\n')
    print(json.dumps({k: report[k] for k in ('machine', 'versions', 'stages', 'cuda_tests', 'suite')}, indent=1))


if __name__ == '__main__':
    main()
