""" Counts in the package's messages: a noun in the number its count takes ('1 epoch', '2 epochs'), so that no line
says '1 epochs' or hedges with 'epoch(s)'. """

__all__ = ['plural', 'counted']


def plural(count: int, noun: str, nouns: str = '') -> str:
    """ `noun` as `count` of it is said: itself for one, else `nouns`, by default its plural by the regular rule
    (-es after s, x, z and sh, else -s; 'epochs', not 'epoches': a noun whose plural the rule misses gives it). """
    if count == 1:
        return noun
    return nouns or noun + ('es' if noun.endswith(('s', 'x', 'z', 'sh')) else 's')


def counted(count: int, noun: str, nouns: str = '') -> str:
    """ '1 epoch', '3 epochs', '0 loader processes'. """
    return f'{count} {plural(count, noun, nouns)}'
