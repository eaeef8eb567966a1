import re
import time
from datetime import date, datetime

import pytest

from heed.data.corpus import read_tsv
from heed.data.dates import DATE_LANGUAGES, YEAR, _generate, generate_dates, write_splits

MONTHS = ["january", "february", "march", "april", "may", "june", "july",
          "august", "september", "october", "november", "december"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
SMALL = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
ORDINAL_WORDS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth", "twentieth"]


def number(word: str) -> int:
    """English 1..99: "ninety-eight" -> 98."""
    if word in SMALL:
        return SMALL.index(word)
    tens, _, ones = word.partition("-")
    return TENS[tens] + (SMALL.index(ones) if ones else 0)


def ordinal_day(word: str) -> int:
    """"third" -> 3, "twenty-first" -> 21, "thirtieth" -> 30."""
    if word in ORDINAL_WORDS:
        return ORDINAL_WORDS.index(word) + 1
    if word == "thirtieth":
        return 30
    tens, _, ones = word.partition("-")
    return TENS[tens] + ORDINAL_WORDS.index(ones) + 1


def year_from_words(words: str) -> int:
    """"nineteen ninety-eight" -> 1998, "two thousand and five" -> 2005, "nineteen oh five" -> 1905."""
    parts = words.split()
    if parts[:2] == ["two", "thousand"]:
        rest = [p for p in parts[2:] if p != "and"]
        return 2000 + (number(rest[0]) if rest else 0)
    century = number(parts[0]) * 100
    if parts[1] == "hundred":
        return century
    if parts[1] == "oh":
        return century + number(parts[2])
    return century + number(parts[1])


def full_year(text: str) -> int:
    """A written year; two digits follow POSIX's pivot, as strptime's %y reads them (69 -> 1969,
    68 -> 2068)."""
    if len(text) == 2:
        return datetime.strptime(text, "%y").year
    return int(text)


def check_pair(src: str, tgt: str) -> None:
    """Parse `src` independently of the generator wherever its form allows, and compare."""
    d = date.fromisoformat(tgt)
    assert date(1900, 1, 1) <= d <= date(2099, 12, 31)
    s = src.lower()
    if m := re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)", s):
        assert s == tgt
    elif m := re.fullmatch(r"(\d{8})", s):
        assert s == tgt.replace("-", "")
    elif m := re.fullmatch(r"(\d{1,2})([./-])(\d{1,2})\2(\d{2}|\d{4})", s):
        a, b, y = int(m[1]), int(m[3]), full_year(m[4])
        assert y == d.year
        if m[2] == "/":  # written month-first (en-US) and day-first (fr, es): must not matter
            assert (d.month, d.day) in ((a, b), (b, a))
            assert a == b or max(a, b) > 12, f"{src!r} reads as two dates"
        else:  # "." and "-" forms are all day-first
            assert (d.day, d.month) == (a, b), src
    elif m := re.fullmatch(r"(\d{2}|\d{4})(?:\. |/|년 )(\d{1,2})(?:\. |/|월 )(\d{1,2})(?:\.|일.*)", s):
        assert (full_year(m[1]), int(m[2]), int(m[3])) == (d.year, d.month, d.day)
    else:
        years = re.findall(r"\b\d{4}\b", s)
        assert all(int(y) == d.year for y in years), src
        for name in re.findall(r"[a-z]+", s):
            if name in MONTHS:
                assert MONTHS.index(name) == d.month - 1, src
            if name in WEEKDAYS:
                assert WEEKDAYS.index(name) == d.weekday(), src
        if m := re.search(r"\b(\d{1,2})(st|nd|rd|th)\b", s):
            assert int(m[1]) == d.day, src
        month = "|".join(MONTHS)
        if m := re.search(rf"\b(\d{{1,2}}) (?:{month})\b", s) or re.search(rf"\b(?:{month}) (\d{{1,2}})\b", s):
            assert int(m[1]) == d.day, src
        if m := re.search(r"the ([a-z-]+?)(?: day)? of", s) or re.search(r"(?:may|[a-z]{4,}) the ([a-z-]+),", s):
            assert ordinal_day(m[1]) == d.day, src
        if not years and (m := re.search(r"(?:, |in the year )([a-z -]+)$", s)):
            assert year_from_words(m[1].removeprefix("in the year ")) == d.year, src


@pytest.fixture(scope="module")
def splits():
    return generate_dates(n_train=20000, n_dev=2000, n_test=2000, seed=0)


def test_same_seed_same_data_other_seed_other_data(splits):
    assert generate_dates(n_train=20000, n_dev=2000, n_test=2000, seed=0) == splits
    assert generate_dates(n_train=200, n_dev=20, n_test=20, seed=1).train != splits.train[:200]


def test_splits_have_requested_sizes_and_share_no_source(splits):
    assert [len(s) for s in splits] == [20000, 2000, 2000]
    sources = [p.src for s in splits for p in s]
    assert len(set(sources)) == len(sources)


def test_every_target_is_the_iso_form_of_its_source(splits):
    for pair in (p for s in splits for p in s):
        check_pair(*pair)


def test_the_checker_catches_wrong_targets():
    for src, wrong in [("03/15/1998", "1998-03-16"), ("15.03.98", "2098-03-15"), ("1998년 3월 3일", "1998-03-04"),
                       ("Tuesday, March 3, 1998", "1998-03-04"),
                       ("March 3, 2005", "2005-03-04"), ("3 march 2005", "2005-03-04"), ("the third of March, nineteen oh five", "2005-03-03"),
                       ("May the twenty-first, two thousand and five", "2005-05-20"), ("04/03/1998", "1998-03-04")]:
        with pytest.raises(AssertionError):
            check_pair(src, wrong)


def test_every_two_digit_year_follows_the_posix_pivot():
    """"16" is 2016 and "75" is 1975, as strptime's %y reads them: every year the generator writes
    with two digits lies in 1969..2068 and reads back as itself, and both centuries occur."""
    pairs, segments = _generate(20000, 0, 0, 0, DATE_LANGUAGES, True)
    two_digit = [(text, int(pair.tgt[:4])) for pair, pieces in zip(pairs, segments)
                 for text, positions in pieces if positions == YEAR and len(text) == 2]
    assert len(two_digit) > 500
    assert all(datetime.strptime(text, "%y").year == year for text, year in two_digit)
    assert {year // 100 for _, year in two_digit} == {19, 20}
    assert min(year for _, year in two_digit) == 1969 and max(year for _, year in two_digit) == 2068
    assert datetime.strptime("16", "%y").year == 2016 and datetime.strptime("75", "%y").year == 1975


def test_the_checker_reads_two_digit_years_as_strptime_does():
    check_pair("3/27/16", "2016-03-27")
    check_pair("3/27/75", "1975-03-27")
    for src, wrong in [("3/27/16", "1916-03-27"), ("27.03.50", "1950-03-27")]:
        with pytest.raises(AssertionError):
            check_pair(src, wrong)


def test_dates_span_the_whole_range_and_forms_are_varied(splits):
    years = [int(p.tgt[:4]) for p in splits.train]
    assert min(years) < 1905 and max(years) > 2095
    lengths = [len(p.src) for p in splits.train]
    assert min(lengths) <= 8 and max(lengths) >= 80  # "3/15/98" .. the verbose forms
    text = "\n".join(p.src for p in splits.train)
    for sample in ("march", "MARCH", "March", "2nd", "nineteen", "in the year", "Tuesday"):
        assert sample in text


def test_all_requested_languages_appear(splits):
    text = "\n".join(p.src for p in splits.train).lower()
    assert re.search("[\uac00-\ud7a3]", text)  # Hangul
    for words in (["janvier", "février", "décembre", "mardi"], ["januar", "februar", "märz", "dienstag"],
                  ["enero", "febrero", "diciembre", "martes"], ["january", "february", "december", "tuesday"]):
        assert all(w in text for w in words)


def test_languages_and_verbose_forms_can_be_left_out():
    en = generate_dates(n_train=3000, n_dev=0, n_test=0, languages=("en",), verbose_forms=False)
    assert not any(re.search("[\uac00-\ud7a3]", p.src) for p in en.train)
    assert max(len(p.src) for p in en.train) < 40
    ko = generate_dates(n_train=500, n_dev=0, n_test=0, languages=("ko",))
    assert not any(re.search("[a-zA-Z]", p.src) for p in ko.train)
    with pytest.raises(ValueError, match="subset of"):
        generate_dates(n_train=1, n_dev=0, n_test=0, languages=("xx",))


def test_fifty_thousand_pairs_in_a_few_seconds():
    start = time.perf_counter()
    splits = generate_dates(n_train=50000, n_dev=1000, n_test=1000, seed=7, languages=DATE_LANGUAGES)
    assert time.perf_counter() - start < 10
    assert len(splits.train) == 50000


def test_written_splits_read_back_identically(tmp_path, splits):
    small = type(splits)(splits.train[:500], splits.dev[:50], splits.test[:50])
    paths = write_splits(small, tmp_path / "dates")
    assert {k: p.name for k, p in paths.items()} == {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
    for name, pairs in small._asdict().items():
        assert list(read_tsv(paths[name])) == pairs
    assert sorted(p.name for p in (tmp_path / "dates").iterdir()) == ["dev.tsv", "test.tsv", "train.tsv"]


def test_no_source_string_names_two_dates_in_a_large_sample():
    # generate_dates raises AssertionError the moment one string is produced for two dates
    splits = generate_dates(n_train=150000, n_dev=0, n_test=0, seed=11)
    slash = [p for p in splits.train if re.fullmatch(r"\d{1,2}/\d{1,2}/\d+", p.src)]
    assert len(slash) > 1000
    for pair in slash:
        check_pair(*pair)


def test_both_readings_of_a_numeric_shape_are_drawn_evenly():
    """"5/14/95" (US, month first) as often as "14/5/95" (day first): drawn by language, day first
    outnumbered month first five to one, and a trained model wrote 1995-14-14 for 5/14/95."""
    import re
    from collections import Counter

    splits = generate_dates(n_train=30000, n_dev=10, n_test=10, seed=0)
    readings = Counter()
    for pair in splits.train:
        m = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{2})", pair.src)
        if m and m.group(1) != m.group(2):
            first, second = int(m.group(1)), int(m.group(2))
            month_first = pair.tgt[5:7] == f"{first:02d}"
            assert (first if month_first else second) <= 12 < (second if month_first else first), pair
            readings["month first" if month_first else "day first"] += 1
    assert min(readings.values()) > 150 and max(readings.values()) / min(readings.values()) < 1.5, readings
