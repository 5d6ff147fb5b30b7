""" The statistics of a comparison, as pure functions: each arm's mean and spread over seeds, its gain over the plain
init with a 95% interval (Welch's t: unequal variances, Welch-Satterthwaite degrees of freedom), and the decision a
user reads.

Student's t quantile is computed here (the regularized incomplete beta function by its continued fraction, then
bisection on the distribution function) so that the command needs no SciPy; tests/test_compare.py checks it against
SciPy's.
"""
import math
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from ..utils.words import counted, plural

__all__ = ['ArmStats', 'Gain', 'arm_stats', 'welch_gain', 't_quantile', 'decide', 'beats_majority', 'not_learned',
           'seeds_needed', 'CONFIDENCE', 'POWER', 'MOST_SEEDS']

CONFIDENCE = 0.95
POWER = 0.8  # the chance that the seeds `seeds_needed` names decide a gain of the size and spread seen
MOST_SEEDS = 50  # beyond this many seeds per arm, a gain too small for its spread is said to be so


@dataclass(frozen=True)
class ArmStats:
    """ An arm's final and best top-1 over its seeds: means, sample standard deviations (None for one seed). """
    arm: str
    seeds: int
    final_mean: float
    final_sd: Optional[float]
    best_mean: float
    best_sd: Optional[float]


@dataclass(frozen=True)
class Gain:
    """ An arm's gain in final top-1 over the plain init: the difference of the means and the half-width of its 95%
    interval (None where either arm has a single seed: no spread to estimate it from); `margin`, how far the arm's
    lowest run lies above the plain init's highest (negative where they overlap); `seeds_needed`, the seeds per arm
    that the spread seen needs to decide a gain of this size (`seeds_needed`). """
    arm: str
    gain: float
    half_width: Optional[float]
    df: Optional[float]
    margin: Optional[float] = None
    seeds_needed: Optional[int] = None

    @property
    def verdict(self) -> str:
        """ 'better' or 'worse' when the interval excludes zero, 'unclear' otherwise. """
        if self.half_width is None or abs(self.gain) <= self.half_width:
            return 'unclear'
        return 'better' if self.gain > 0 else 'worse'


def _mean_sd(values: Sequence[float]):
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else None)


def arm_stats(arm: str, finals: Sequence[float], bests: Sequence[float]) -> ArmStats:
    final_mean, final_sd = _mean_sd(finals)
    best_mean, best_sd = _mean_sd(bests)
    return ArmStats(arm, len(finals), final_mean, final_sd, best_mean, best_sd)


def _betacf(a: float, b: float, x: float) -> float:
    """ The continued fraction of the incomplete beta function (Lentz's method). """
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                          -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """ The regularized incomplete beta function I_x(a, b). """
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """ The p-quantile of Student's t with `df` degrees of freedom (any df > 0, not only whole numbers). """
    if not 0 < p < 1 or df <= 0:
        raise ValueError(f't_quantile(p={p}, df={df}): p must lie in (0, 1) and df be positive')
    low, high = -1e6, 1e6
    for _ in range(200):
        mid = (low + high) / 2
        if _t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _welch(var_a: float, n_a: int, var_b: float, n_b: int):
    """ (variance of the difference of the means, Welch-Satterthwaite degrees of freedom). """
    va, vb = var_a / n_a, var_b / n_b
    return va + vb, (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))


def seeds_needed(finals: Sequence[float], plain: Sequence[float], confidence: float = CONFIDENCE,
                 power: float = POWER, most: int = MOST_SEEDS) -> Optional[int]:
    """ The seeds per arm with which a gain of the size seen, with each arm's spread as seen, would show in the
    `confidence` interval with probability `power`: the fewest n for which

        (t(1/2 + confidence/2, df_n) + t(power, df_n)) * sqrt((s_a^2 + s_b^2) / n) <= |mean_a - mean_b|,

    df_n the Welch-Satterthwaite degrees of freedom of n seeds each, s the sample standard deviations (the usual
    approximation of a two-sample t test's power, with Student's quantiles). None where it cannot be said: an arm
    with one seed (no spread) or no gain; `most + 1` when even `most` seeds would not do. """
    if len(finals) < 2 or len(plain) < 2:
        return None
    gain = abs(statistics.mean(finals) - statistics.mean(plain))
    var_a, var_b = statistics.variance(finals), statistics.variance(plain)
    if gain == 0:
        return None
    if var_a + var_b == 0:
        return 2
    for n in range(2, most + 1):
        variance, df = _welch(var_a, n, var_b, n)
        if (t_quantile(0.5 + confidence / 2, df) + t_quantile(power, df)) * math.sqrt(variance) <= gain:
            return n
    return most + 1


def welch_gain(arm: str, finals: Sequence[float], plain: Sequence[float]) -> Gain:
    """ mean(finals) - mean(plain), with the half-width of its 95% Welch interval where both have two or more, how
    far the arm's runs lie above the plain ones (`margin`) and the seeds the spread needs (`seeds_needed`). """
    gain = statistics.mean(finals) - statistics.mean(plain)
    margin = min(finals) - max(plain)
    if len(finals) < 2 or len(plain) < 2:
        return Gain(arm, gain, None, None, margin)
    var_a, var_b = statistics.variance(finals), statistics.variance(plain)
    if var_a + var_b == 0:  # identical values within each arm: the difference is exact
        return Gain(arm, gain, 0.0, math.inf, margin, 2)
    variance, df = _welch(var_a, len(finals), var_b, len(plain))
    return Gain(arm, gain, t_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(variance), df, margin,
                seeds_needed(finals, plain))


def beats_majority(arm: ArmStats, majority: float) -> bool:
    """ Whether an arm's final top-1 beats the majority class beyond its seed spread: its mean less its standard
    deviation over seeds above `majority` (one seed, no spread: its top-1 above it). """
    return arm.final_mean - (arm.final_sd or 0.0) > majority


def not_learned(arms: Sequence[ArmStats], chance: float, majority: float,
                train_subset: Optional[int] = None) -> Optional[str]:
    """ The decision when no arm learned anything a classifier without the images could not do (always answering the
    test split's largest class scores `majority`), else None: comparing inits on such runs tells nothing, and more
    seeds would not change that. What it advises applies to the runs: more of the training split only where they
    took a subset of it (`train_subset`, its images; `--train-subset` only ever shrinks the split). """
    if not arms or any(beats_majority(a, majority) for a in arms):
        return None
    best = max(arms, key=lambda a: a.final_mean)
    spread = f' ± {best.final_sd:.2f}' if best.final_sd is not None else ''
    data = (f', on more of the training split (--train-subset above its {train_subset:,} images, or none)'
            if train_subset else '')
    return (f'the runs did not learn: no arm beats the majority class of the test split ({majority:.2f}% top-1 by '
            f'always answering its largest class; chance {chance:.2f}%) beyond its seed spread (best: {best.arm} '
            f'{best.final_mean:.2f}{spread}), so they cannot tell the inits apart; train longer (--epochs){data} '
            f'{"or" if not data else "or on"} a model the data suits (--model-kwargs: fewer or wider layers, '
            f'another patch_size), then compare again')


def _more_seeds(gain: Gain, seeds: Dict[str, int], run_seconds: Optional[float]) -> str:
    """ What more seeds would take to decide `gain`: how many per arm the spread seen needs, the runs that adds to
    every arm and their time (by the mean time of the runs so far), or that the gain is too small for its spread. """
    needed = gain.seeds_needed
    if needed is None:
        return 'more seeds would tell'
    if needed > MOST_SEEDS:
        return (f'with the spread seen, even {MOST_SEEDS} seeds per arm would not tell a gain of {gain.gain:+.2f} '
                f'from none')
    have = min(seeds.values())
    if needed <= have:  # the spread seen would do, but this draw of it did not: more seeds tell
        needed = have + 1
    runs = sum(needed - min(needed, n) for n in seeds.values())
    cost = f' (about {_duration(run_seconds * runs)} one at a time)' if run_seconds else ''
    return (f'the spread seen needs {counted(needed, "seed")} per arm to decide a gain of {gain.gain:+.2f} '
            f'({POWER:.0%} of the time): --seeds {needed} with the same --out trains {runs} more '
            f'{plural(runs, "run")}{cost}')


def _duration(seconds: float) -> str:
    return f'{seconds / 60:.0f} min' if seconds >= 90 else f'{seconds:.0f} s'


def decide(gains: List[Gain], seeds: Dict[str, int], plain: str, run_seconds: Optional[float] = None) -> str:
    """ The one-line answer: the best arm that beats the plain init beyond the seed spread, or why none does; when
    none does, how many seeds the spread seen needs to decide the largest gain, and their time (`run_seconds`: a
    run's mean seconds so far). An arm whose every run lies above every plain run, whose interval still holds zero,
    is said to be so: that is what a reader of the table sees, and what the interval does not yet confirm. """
    if not gains:
        return f'only the {plain} arm has results: nothing to compare yet'
    counts = sorted(set(seeds.values()))
    each = f'{counted(counts[0], "seed")} each' if len(counts) == 1 else \
        'seeds: ' + ', '.join(f'{a} {n}' for a, n in seeds.items())
    if any(g.half_width is None for g in gains):
        best = max(gains, key=lambda g: g.gain)
        return (f'{best.arm}: {best.gain:+.2f} over the {plain} init with one seed per arm: no spread to judge it '
                f'by; run two or more seeds (--seeds, 3 by default) to tell')
    better = [g for g in gains if g.verdict == 'better']
    if better:
        best = max(better, key=lambda g: g.gain - g.half_width)
        return f'{best.arm}: {best.gain:+.2f} ± {best.half_width:.2f} over the {plain} init, {each}: use it'
    worse = [g for g in gains if g.verdict == 'worse']
    tail = f'; {", ".join(g.arm for g in worse)} did worse' if worse else ''
    best = max(gains, key=lambda g: g.gain)
    above = sorted((g for g in gains if (g.margin or 0) > 0), key=lambda g: -g.gain)
    if above:
        lead = above[0]
        others = [g.arm for g in above[1:]]
        also = f'; {", ".join(others)} likewise' if others else ''
        return (f'{lead.arm}: each of its {counted(seeds[lead.arm], "run")} beat every {plain} run, by '
                f'{lead.margin:.2f} points at least (gain {lead.gain:+.2f}), but with {each} the 95% interval '
                f'(± {lead.half_width:.2f}) still holds zero: '
                f'the seed spread may yet explain it{also}{tail}; {_more_seeds(lead, seeds, run_seconds)}')
    more = _more_seeds(best, seeds, run_seconds) if best.gain > 0 else 'more seeds would tell'
    return f'no init beats the {plain} one beyond the seed spread ({each}){tail}; {more}'
