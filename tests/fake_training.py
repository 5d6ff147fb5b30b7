""" A stand-in for the training command in the tests of compare's jobs: the files and lines of a run in a fraction of
a second. It reads the options compare gives a run (`--output DIR --experiment NAME --epochs N [--resume DIR]
[--stop-signals ...]`), trains `--epochs` epochs of `--epoch-seconds` each (its summary.csv gains a row and its
last.pth.tar is written at each one's end; a resume goes on after the rows there), prints an `epoch  k/N` line per
epoch as the training command does, stops on its --stop-signals with exit status 128 + the signal, keeping the
finished epochs, and with `--fail` fails as the training command does: one `error:` line, exit status 2. Its top-1 of
epoch k is 10 k, whatever the parts it was trained in. """
import argparse
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    for option in ('--output', '--experiment', '--resume'):
        parser.add_argument(option, default='')
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--epoch-seconds', type=float, default=0.2)
    parser.add_argument('--stop-signals', nargs='*', default=['SIGTERM'])
    parser.add_argument('--fail', action='store_true')
    args, _ = parser.parse_known_args()
    if args.fail:
        print('timm-structinit-train: error: --lr -1 must be > 0', flush=True)
        return 2

    def stop(signum, frame):
        raise SystemExit(128 + signum)
    for name in args.stop_signals:
        signal.signal(getattr(signal, name), stop)
    folder = Path(args.output) / args.experiment
    folder.mkdir(parents=True, exist_ok=True)
    summary = folder / 'summary.csv'
    if not args.resume or not summary.is_file():
        summary.write_text('epoch,train_loss,eval_top1\n')
    done = len(summary.read_text().splitlines()) - 1
    for epoch in range(done, args.epochs):
        time.sleep(args.epoch_seconds)
        with open(summary, 'a') as f:
            f.write(f'{epoch},{1.0 / (epoch + 1)},{10.0 * (epoch + 1)}\n')
        (folder / 'last.pth.tar').write_bytes(b'epoch %d' % epoch)
        print(f'epoch {epoch + 1:>3d}/{args.epochs}  train loss {1.0 / (epoch + 1):.4f}', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
