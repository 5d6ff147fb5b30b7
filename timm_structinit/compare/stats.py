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

__all__ = ['ArmStats', 'Gain', 'arm_stats', 'welch_gain', 't_quantile', 'decide', 'beats_majority', 'not_learned',
           'CONFIDENCE']

CONFIDENCE = 0.95


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
    interval (None where either arm has a single seed: no spread to estimate it from). """
    arm: str
    gain: float
    half_width: Optional[float]
    df: Optional[float]

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


def welch_gain(arm: str, finals: Sequence[float], plain: Sequence[float]) -> Gain:
    """ mean(finals) - mean(plain), with the half-width of its 95% Welch interval where both have two or more. """
    gain = statistics.mean(finals) - statistics.mean(plain)
    if len(finals) < 2 or len(plain) < 2:
        return Gain(arm, gain, None, None)
    va, vb = statistics.variance(finals) / len(finals), statistics.variance(plain) / len(plain)
    if va + vb == 0:  # identical values within each arm: the difference is exact
        return Gain(arm, gain, 0.0, math.inf)
    df = (va + vb) ** 2 / (va ** 2 / (len(finals) - 1) + vb ** 2 / (len(plain) - 1))
    return Gain(arm, gain, t_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(va + vb), df)


def beats_majority(arm: ArmStats, majority: float) -> bool:
    """ Whether an arm's final top-1 beats the majority class beyond its seed spread: its mean less its standard
    deviation over seeds above `majority` (one seed, no spread: its top-1 above it). """
    return arm.final_mean - (arm.final_sd or 0.0) > majority


def not_learned(arms: Sequence[ArmStats], chance: float, majority: float) -> Optional[str]:
    """ The decision when no arm learned anything a classifier without the images could not do (always answering the
    test split's largest class scores `majority`), else None: comparing inits on such runs tells nothing, and more
    seeds would not change that. """
    if not arms or any(beats_majority(a, majority) for a in arms):
        return None
    best = max(arms, key=lambda a: a.final_mean)
    spread = f' ± {best.final_sd:.2f}' if best.final_sd is not None else ''
    return (f'the runs did not learn: no arm beats the majority class of the test split ({majority:.2f}% top-1 by '
            f'always answering its largest class; chance {chance:.2f}%) beyond its seed spread (best: {best.arm} '
            f'{best.final_mean:.2f}{spread}), so they cannot tell the inits apart; train longer (--epochs), on more '
            f'data (--train-subset), or a model the data suits (--model-kwargs: fewer or wider layers, another '
            f'patch_size), then compare again')


def decide(gains: List[Gain], seeds: Dict[str, int], plain: str) -> str:
    """ The one-line answer: the best arm that beats the plain init beyond the seed spread, or why none does. """
    if not gains:
        return f'only the {plain} arm has results: nothing to compare yet'
    counts = sorted(set(seeds.values()))
    each = f'{counts[0]} seed{"s" if counts[0] != 1 else ""} each' if len(counts) == 1 else \
        'seeds: ' + ', '.join(f'{a} {n}' for a, n in seeds.items())
    if any(g.half_width is None for g in gains):
        best = max(gains, key=lambda g: g.gain)
        return (f'{best.arm}: {best.gain:+.2f} over the {plain} init with one seed per arm: no spread to judge it '
                f'by; run two or more seeds (--seeds) to tell')
    better = [g for g in gains if g.verdict == 'better']
    if better:
        best = max(better, key=lambda g: g.gain - g.half_width)
        return f'{best.arm}: {best.gain:+.2f} ± {best.half_width:.2f} over the {plain} init, {each}: use it'
    worse = [g for g in gains if g.verdict == 'worse']
    tail = f'; {", ".join(g.arm for g in worse)} did worse' if worse else ''
    return f'no init beats the {plain} one beyond the seed spread ({each}){tail}; more seeds would tell'
