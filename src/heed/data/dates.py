"""The built-in "dates" task: many written forms of a date -> ISO 8601 `YYYY-MM-DD`.

The classic task for watching attention work: to write "1998-03-03" from "Tuesday the 3rd of March,
nineteen ninety-eight" the decoder must look at the year words for the year digits, the month name
for the month and the ordinal for the day, in a different order from the source.

Sources come in English (hand-written forms: ordinals, year words, long verbose phrasings, plus
numeric US, day-first, ISO-like and dotted forms) and, through Babel's CLDR data (shipped in the
package, nothing downloaded), French, German, Spanish and Korean (the locale's full / long / medium /
short formats and a few custom patterns each). Letters appear in any case (as written, lower,
UPPER, Title).

The target is always determined by the source:
- Dates are uniform over 1900-01-01..2099-12-31; a two-digit year is only written for 1969..2068,
  POSIX's pivot (strptime's `%y`, Python's too): "69".."99" are 1969..1999 and "00".."68" are
  2000..2068, so "3/27/16" is 2016-03-27 and "3/27/75" is 1975-03-27. Other years are written with
  four digits.
- Numeric forms that write the day and month as numbers with the year last are ambiguous when
  another active form writes the same shape in the other order ("03/04/1998" is 4 March in
  en-US and 3 April in French). Such forms are only used for dates where the reading does not
  matter: day > 12 (the other reading has no such month) or day == month. Forms with no rival
  shape (German "03.04.1998", ISO "1998-04-03") are used for every date.
- Where a shape has two readings, each reading is drawn equally often, whatever the number of
  languages and forms behind it: "5/14/95" (US, CLDR's en short form M/d/yy) is as common as
  "14/5/95" (French, Spanish). Drawn by language, day-first outnumbered month-first five to one,
  and a model learnt to read every N/N/yy day first, writing 1995-14-14 for 5/14/95.
- Train, dev and test never share a source string (the same date may appear in several splits,
  written differently), and generation fails loudly if two dates ever produced the same string.

Gold alignments by construction (`generate_dates_aligned`), between the source's whitespace words
and the target's characters (`heed align --tgt-units chars`): every date is rendered field by field,
so each source word is known to write some of "YYYY-MM-DD":
- sure: a word and every target character it writes. "14 juillet 1989": "1989" -> the four year
  digits, "juillet" -> the month's "0" and "7", "14" -> the day's. A word holding several fields
  ("14/07/1989") writes all of theirs; a two-digit year ("89") writes all four year digits; year
  words split the digits ("nineteen" -> "1", "9"; "ninety-eight" -> "9", "8"; "two thousand and
  five": "two" -> "2", "thousand" -> "0", "0", "five" -> "5");
- possible: each "-" with the words of the two fields it separates;
- nothing: words that write no digit ("the", "of", "de", weekdays, "and").
"""
from __future__ import annotations

import functools
import os
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import NamedTuple, TypeVar

from babel import Locale
from babel.dates import DateTimeFormat, tokenize_pattern

from heed.data.corpus import Pair, normalize
from heed.plumbing.files import atomic_open

DATE_LANGUAGES: tuple[str, ...] = ("en", "fr", "de", "es", "ko")
_T = TypeVar("_T")
FIRST_DATE = date(1900, 1, 1)
LAST_DATE = date(2099, 12, 31)
# The only years written with two digits, POSIX's pivot (strptime's %y): 69..99 -> 19xx, 00..68 -> 20xx.
TWO_DIGIT_YEARS = (1969, 2068)


class DateSplits(NamedTuple):
    train: list[Pair]
    dev: list[Pair]
    test: list[Pair]


Gold = tuple[frozenset[tuple[int, int]], frozenset[tuple[int, int]]]  # (sure, possible) (source word, target char)


class GoldSplits(NamedTuple):
    """Gold alignments by construction, one (sure, possible) per pair of each split."""

    train: list[Gold]
    dev: list[Gold]
    test: list[Gold]


# CLDR patterns (https://unicode.org/reports/tr35/tr35-dates.html#Date_Field_Symbol_Table) per
# locale, beside its "full", "long", "medium" and "short" formats.
_PATTERNS: dict[str, tuple[str, ...]] = {
    "en": (
        "EEEE, d MMMM y", "d MMMM y", "d MMM y", "EEE, MMM d, y",
        "MM/dd/y", "d/M/y", "dd-MM-yy", "y-MM-dd", "yyyyMMdd", "dd.MM.y",
    ),
    "fr": ("'le' d MMMM y", "EEE d MMM y", "d/M/yy", "dd-MM-y"),
    "de": ("'am' d. MMMM y", "EEEE, 'den' d. MMMM y", "d.M.y", "d. MMM y", "EEE, d. MMM y"),
    "es": ("'el' d 'de' MMMM 'de' y", "EEEE d 'de' MMMM 'de' y", "dd/MM/y", "d-M-y", "EEE, d MMM y"),
    "ko": ("yy년 M월 d일", "y년 M월 d일 (E)", "y-MM-dd", "y/M/d"),
}
_STANDARD = ("full", "long", "medium", "short")

# English by hand, for what CLDR has no pattern for: ordinals and years in words.
_MONTHS = ("January", "February", "March", "April", "May", "June", "July",
           "August", "September", "October", "November", "December")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")  # date.weekday()
_ONES = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_ORDINAL_ONES = ("", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
                 "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
                 "seventeenth", "eighteenth", "nineteenth")
_ORDINAL_TENS = {20: "twentieth", 30: "thirtieth"}


def _words(n: int) -> str:
    """1..99 in English words: 42 -> "forty-two"."""
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


def _ordinal_words(n: int) -> str:
    """1..31 -> "first" .. "thirty-first"."""
    if n < 20:
        return _ORDINAL_ONES[n]
    tens, ones = divmod(n, 10)
    return _ORDINAL_TENS[tens * 10] if not ones else f"{_TENS[tens]}-{_ORDINAL_ONES[ones]}"


def _ordinal(n: int) -> str:
    """3 -> "3rd", 11 -> "11th", 22 -> "22nd"."""
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _year_words(year: int, rng: random.Random) -> list[_Segment]:
    """1998 -> "nineteen ninety-eight", 1905 -> "nineteen oh five", 1900 -> "nineteen hundred",
    2000 -> "two thousand", 2005 -> "two thousand (and) five", 2017 -> "twenty seventeen".
    Each phrase names one year. As segments: each word with the year digits it writes."""
    century, rest = divmod(year, 100)
    if year == 2000:
        return _words_of(("two", (0,)), ("thousand", (1, 2, 3)))
    if 2000 < year < 2010:
        joiner = rng.choice(("", "and "))
        return _words_of(("two", (0,)), ("thousand", (1, 2)), *([("and", ())] if joiner else []), (_ONES[rest], (3,)))
    if rest == 0:
        return _words_of((_words(century), (0, 1)), ("hundred", (2, 3)))
    if rest < 10:
        return _words_of((_words(century), (0, 1)), ("oh", (2,)), (_ONES[rest], (3,)))
    return _words_of((_words(century), (0, 1)), (_words(rest), (2, 3)))


# A piece of a written date and the positions of "YYYY-MM-DD" it writes (empty: none, e.g. "the").
_Segment = tuple[str, tuple[int, ...]]
YEAR, MONTH, DAY = (0, 1, 2, 3), (5, 6), (8, 9)  # in the ISO target
_SEPARATORS = {4: (YEAR, MONTH), 7: (MONTH, DAY)}  # a "-" sits between two fields


def _words_of(*words: _Segment) -> list[_Segment]:
    """Segments joined by single spaces."""
    out: list[_Segment] = []
    for k, word in enumerate(words):
        out += [(" ", ())] * (k > 0) + [word]
    return out


def _fill(template: str, **fields: list[_Segment] | _Segment) -> list[_Segment]:
    """"the {day} of {month} {year}" with each field's segment(s); the template's own text writes
    nothing of the target."""
    out: list[_Segment] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        if literal:
            out.append((literal, ()))
        if name is not None:
            value = fields[name]
            out += value if isinstance(value, list) else [value]
    return out


_Render = Callable[[date, random.Random], list[_Segment]]


def _month(d: date) -> _Segment:
    return (_MONTHS[d.month - 1], MONTH)


_EN_ORDINAL_FORMS: tuple[_Render, ...] = (
    lambda d, r: _fill("the {day} of {month} {year}", day=(_ordinal(d.day), DAY), month=_month(d), year=(str(d.year), YEAR)),
    lambda d, r: _fill("{month} {day}, {year}", month=_month(d), day=(_ordinal(d.day), DAY), year=(str(d.year), YEAR)),
    lambda d, r: _fill("{day} {month} {year}", day=(_ordinal(d.day), DAY), month=_month(d), year=(str(d.year), YEAR)),
    lambda d, r: _fill("{weekday}, the {day} of {month} {year}", weekday=(_WEEKDAYS[d.weekday()], ()),
                       day=(_ordinal(d.day), DAY), month=_month(d), year=(str(d.year), YEAR)),
    lambda d, r: _fill("{month} {day}, {year}", month=(_MONTHS[d.month - 1][:3], MONTH), day=(_ordinal(d.day), DAY),
                       year=(str(d.year), YEAR)),
)
_EN_VERBOSE_FORMS: tuple[_Render, ...] = (
    lambda d, r: _fill("on the {day} day of {month} in the year {year}", day=(_ordinal_words(d.day), DAY),
                       month=_month(d), year=(str(d.year), YEAR)),
    lambda d, r: _fill("{weekday} the {day} of {month}, {year}", weekday=(_WEEKDAYS[d.weekday()], ()),
                       day=(_ordinal(d.day), DAY), month=_month(d), year=_year_words(d.year, r)),
    lambda d, r: _fill("the {day} of {month}, {year}", day=(_ordinal_words(d.day), DAY), month=_month(d),
                       year=_year_words(d.year, r)),
    lambda d, r: _fill("{month} the {day}, {year}", month=_month(d), day=(_ordinal_words(d.day), DAY),
                       year=_year_words(d.year, r)),
    lambda d, r: _fill("it was a {weekday}, the {day} day of the month of {month}, in the year {year}",
                       weekday=(_WEEKDAYS[d.weekday()], ()), day=(_ordinal_words(d.day), DAY), month=_month(d),
                       year=_year_words(d.year, r)),
)


def _render_cldr(pattern: str, locale: Locale, d: date, r: random.Random) -> list[_Segment]:
    """A _Render of a CLDR pattern (the random choice is unused: CLDR forms have one spelling)."""
    return _cldr_segments(pattern, d, locale)


def _cldr_segments(pattern: str, d: date, locale: Locale) -> list[_Segment]:
    """A CLDR pattern rendered field by field (as babel's format_date renders it whole)."""
    fields = DateTimeFormat(d, locale)
    out: list[_Segment] = []
    for _, value in tokenize_pattern(pattern):
        if isinstance(value, str):  # a "chars" token: the text between fields; a field is (letter, count)
            out.append((value, ()))
            continue
        letter, count = value
        out.append((fields[letter * count], YEAR if letter == "y" else MONTH if letter in "ML" else
                    DAY if letter == "d" else ()))
    return out


@dataclass(frozen=True)
class _Form:
    """One way of writing a date."""

    name: str  # CLDR pattern, or "en:ordinal:3"-style name for hand-written forms
    render: _Render
    two_digit_year: bool = False
    order_sensitive: bool = False  # numeric day and month whose order another form reverses
    shape: tuple[str, ...] = ()  # _shape's, for order-sensitive forms
    order: str = ""

    def allows(self, d: date) -> bool:
        if self.two_digit_year and not TWO_DIGIT_YEARS[0] <= d.year <= TWO_DIGIT_YEARS[1]:
            return False
        return not (self.order_sensitive and d.day <= 12 and d.day != d.month)


def _shape(pattern: str) -> tuple[tuple[str, ...], str]:
    """A pattern's shape with numeric day/month fields blurred to "N", and their order.

    "M/d/yy" and "d/M/yy" -> (("N", "/", "N", "/", "yy"), "Md" / "dM"); the same shape in two
    orders is an ambiguity. Text fields keep their letter, so "d MMMM y" has order "d".
    """
    shape: list[str] = []
    order = ""
    for _, value in tokenize_pattern(pattern):
        if isinstance(value, str):  # a "chars" token: the text between fields; a field is (letter, count)
            shape.append(value)
            continue
        letter, count = value
        if letter in "dM" and count <= 2:
            shape.append("N")
            order += letter
        elif letter == "y":
            shape.append("yy" if count == 2 else "y")
        else:
            shape.append(letter * count)
    return tuple(shape), order


@functools.lru_cache(maxsize=8)
def _forms(languages: tuple[str, ...], verbose: bool) -> dict[str, tuple[_Form, ...]]:
    """The forms of each language, with order-sensitivity decided across all of them."""
    patterns: dict[str, list[tuple[str, Locale]]] = {}
    for lang in dict.fromkeys(languages):
        locale = Locale.parse(lang)
        standard = [locale.date_formats[f].pattern for f in _STANDARD]
        patterns[lang] = [(p, locale) for p in dict.fromkeys([*standard, *_PATTERNS[lang]])]
    orders_by_shape: dict[tuple[str, ...], set[str]] = {}
    for entries in patterns.values():
        for pattern, _ in entries:
            shape, order = _shape(pattern)
            if len(order) == 2:
                orders_by_shape.setdefault(shape, set()).add(order)
    forms: dict[str, tuple[_Form, ...]] = {}
    for lang, entries in patterns.items():
        lang_forms = []
        for pattern, locale in entries:
            shape, order = _shape(pattern)
            lang_forms.append(
                _Form(
                    name=f"{lang}:{pattern}",
                    render=functools.partial(_render_cldr, pattern, locale),
                    two_digit_year="yy" in shape,
                    order_sensitive=len(order) == 2 and len(orders_by_shape[shape]) > 1,
                    shape=shape,
                    order=order,
                )
            )
        if lang == "en":
            lang_forms += [_Form(f"en:ordinal:{i}", f) for i, f in enumerate(_EN_ORDINAL_FORMS)]
            if verbose:
                lang_forms += [_Form(f"en:verbose:{i}", f) for i, f in enumerate(_EN_VERBOSE_FORMS)]
        forms[lang] = tuple(lang_forms)
    return forms


def _recase(text: str, rng: random.Random) -> str:
    """As written (half the time), lower, UPPER or Title case (first letter of each word only, so
    "3rd" stays "3rd")."""
    if not any(c.isalpha() for c in text):
        return text
    r = rng.random()
    if r < 0.5:
        return text
    if r < 0.7:
        return text.lower()
    if r < 0.9:
        return text.upper()
    return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))


def generate_dates(
    *,
    n_train: int,
    n_dev: int,
    n_test: int,
    seed: int = 0,
    languages: Sequence[str] = DATE_LANGUAGES,
    verbose_forms: bool = True,
) -> DateSplits:
    """Generate (written date, ISO date) pairs, split into train/dev/test with no shared source.

    Each pair: a date uniform over 1900..2099, a language uniform over `languages`, a form uniform
    over that language's forms usable for the date (a numeric form with a rival order: its reading
    drawn evenly, see the module doc), then a random letter case. `verbose_forms`
    adds long English phrasings (up to ~100 characters). The same arguments give the same splits.
    """
    pairs, _ = _generate(n_train, n_dev, n_test, seed, languages, verbose_forms)
    return DateSplits(*_cut(pairs, n_train, n_dev))


def generate_dates_aligned(
    *,
    n_train: int,
    n_dev: int,
    n_test: int,
    seed: int = 0,
    languages: Sequence[str] = DATE_LANGUAGES,
    verbose_forms: bool = True,
) -> tuple[DateSplits, GoldSplits]:
    """`generate_dates`'s splits and, pair for pair, their gold alignments by construction (the
    module doc's "Gold alignments")."""
    pairs, segments = _generate(n_train, n_dev, n_test, seed, languages, verbose_forms)
    golds = [_gold(pieces, pair.src) for pieces, pair in zip(segments, pairs)]
    return DateSplits(*_cut(pairs, n_train, n_dev)), GoldSplits(*_cut(golds, n_train, n_dev))


def _cut(items: list[_T], n_train: int, n_dev: int) -> tuple[list[_T], list[_T], list[_T]]:
    return items[:n_train], items[n_train : n_train + n_dev], items[n_train + n_dev :]


def _generate(n_train: int, n_dev: int, n_test: int, seed: int, languages: Sequence[str],
              verbose_forms: bool) -> tuple[list[Pair], list[list[_Segment]]]:
    """The pairs (see generate_dates), each with the segments its source was rendered from."""
    for name, n in (("n_train", n_train), ("n_dev", n_dev), ("n_test", n_test)):
        if n < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
    unknown = [lang for lang in languages if lang not in DATE_LANGUAGES]
    if unknown or not languages:
        raise ValueError(f"dates languages must be a non-empty subset of {', '.join(DATE_LANGUAGES)}; got {list(languages)}")
    langs = tuple(languages)
    forms = _forms(langs, verbose_forms)
    # Each order-sensitive shape's readings: {shape: {order: its forms, any language}}.
    readings: dict[tuple[str, ...], dict[str, list[_Form]]] = {}
    for lang_forms in forms.values():
        for f in lang_forms:
            if f.order_sensitive:
                readings.setdefault(f.shape, {}).setdefault(f.order, []).append(f)
    rng = random.Random(seed)
    lo, hi = FIRST_DATE.toordinal(), LAST_DATE.toordinal()
    total = n_train + n_dev + n_test
    target_of: dict[str, str] = {}
    pairs: list[Pair] = []
    rendered: list[list[_Segment]] = []
    tries_left = 20 * total + 1000
    while len(pairs) < total:
        tries_left -= 1
        if tries_left < 0:
            raise ValueError(f"could only find {len(pairs)} distinct date strings of the {total} asked for")
        d = date.fromordinal(rng.randint(lo, hi))
        form = rng.choice([f for f in forms[rng.choice(langs)] if f.allows(d)])
        if form.order_sensitive:  # a reading drawn evenly, then one of its forms (see the module doc)
            rivals = readings[form.shape]
            form = rng.choice(rivals[rng.choice(sorted(rivals))])
        segments = form.render(d, rng)
        src = normalize(_recase("".join(text for text, _ in segments), rng))
        tgt = d.isoformat()
        earlier = target_of.get(src)
        if earlier is None:
            target_of[src] = tgt
            pairs.append(Pair(src, tgt))
            rendered.append(segments)
        elif earlier != tgt:  # a bug in the forms above, not a user error
            raise AssertionError(f"form {form.name} wrote {src!r} for both {earlier} and {tgt}")
    return pairs, rendered


def _gold(segments: list[_Segment], src: str) -> Gold:
    """(sure, possible) links between the source's words and the target's characters: a word is
    linked to every position a piece of it writes; a "-" possibly to the words of its two fields."""
    words: list[set[int]] = []
    in_word = False  # whether the text so far ends inside a word
    for text, positions in segments:
        pieces = text.split()
        if pieces:
            if not (in_word and not text[0].isspace()):  # the first piece starts a word
                words.append(set())
            words[-1].update(positions)
            words += [set(positions) for _ in pieces[1:]]
        if text:
            in_word = not text[-1].isspace()
    if len(words) != len(src.split()):  # recasing or normalizing split or joined a word: a bug here
        raise AssertionError(f"{src!r}: {len(src.split())} words, but its segments make {len(words)}")
    sure = frozenset((i, j) for i, positions in enumerate(words) for j in positions)
    possible = sure | {(i, dash) for dash, fields in _SEPARATORS.items() for i, positions in enumerate(words)
                       if any(positions & set(f) for f in fields)}
    return sure, frozenset(possible)


def write_splits(splits: DateSplits, directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Write `train.tsv`, `dev.tsv`, `test.tsv` (source<TAB>target per line) into `directory`,
    each through a temp file and os.replace. Returns {"train": path, "dev": path, "test": path}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, pairs in splits._asdict().items():
        path = directory / f"{name}.tsv"
        with atomic_open(path) as f:
            f.writelines(f"{src}\t{tgt}\n" for src, tgt in pairs)
        paths[name] = path
    return paths
