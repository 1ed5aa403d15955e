"""What to buy, how many, and the most to spend, read from chat text (issue 24).

Three pure readers, each returning the value and the words of the text that gave it, a ``Need``
when Intake must ask, or None when the text says nothing:

- ``budget``: the entity ``max_price``, always the *total* cap as a decimal string with two places
  ("15.00"); a price "each" / "a piece" is multiplied by the count. An amount in another currency
  than the shop's is never converted: it becomes a question that carries what was heard.
- ``quantity``: a count ("3", "three", "a", "a couple", "5 x"); a measure ("2 litres of paint",
  "500g coffee") is one item; a bare plural or "some" gives none.
- ``query``: the thing to buy, without the count, the price, the receipt address or politeness,
  keeping the sizes and units that belong to it ("2 litres of white paint", "HDMI cables (2m)").

Libraries do the reading: ``text_to_num.alpha2digit`` turns number words into digits (each run
of number words separately, so the words as written can be given back), and
``price_parser.Price`` reads an amount ("49,90", "1.234,50") with its currency sign; ``pycountry``
names the ISO 4217 codes. Small named patterns only find the phrase to hand them.

Text with several lines is a conversation, one message a line: the last message that states a
budget or a count wins (an answer or a correction), the first that names a thing to buy wins.
No I/O, no clock; the readings of a line are memoized.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import pycountry
from price_parser import Price
from text_to_num import alpha2digit

from countersign.kernel import ascii_digits

from .models import Need

__all__ = ["budget", "quantity", "query"]

#: a value and the words that gave it, a question to ask, or nothing found
Got = tuple[Any, str] | Need | None

# ---- number words --------------------------------------------------------------------------------
#: English cardinal words, only to find the runs handed to ``alpha2digit`` (ordinals stay words)
_NUMBER_WORD = (
    r"(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen"
    r"|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fourty|fifty|sixty"
    r"|seventy|eighty|ninety|hundred|thousand)"
)
_NUMBER_RUN = re.compile(
    rf"\b(?:an?\s+(?=hundred|thousand))?{_NUMBER_WORD}(?:(?:[\s-]+|\s+and\s+){_NUMBER_WORD})*\b",
    re.I,
)

# ---- currencies ----------------------------------------------------------------------------------
#: every ISO 4217 code pycountry knows (upper case: "AUD", "SGD")
_CODES = frozenset(c.alpha_3 for c in pycountry.currencies)
#: signs and words → ISO 4217 (keys in lower case, spaces single)
_ISO_BY_MARK = {
    "$": "USD", "us$": "USD", "a$": "AUD", "au$": "AUD", "c$": "CAD", "ca$": "CAD",
    "nz$": "NZD", "s$": "SGD", "hk$": "HKD", "r$": "BRL", "€": "EUR", "£": "GBP", "¥": "JPY",
    "₹": "INR", "₩": "KRW", "₽": "RUB", "₺": "TRY", "₪": "ILS", "zł": "PLN", "rs": "INR",
    "rs.": "INR", "dollar": "USD", "dollars": "USD", "buck": "USD", "bucks": "USD",
    "euro": "EUR", "euros": "EUR", "pound": "GBP", "pounds": "GBP", "quid": "GBP",
    "pound sterling": "GBP", "pounds sterling": "GBP", "franc": "CHF", "francs": "CHF",
    "rupee": "INR", "rupees": "INR", "yen": "JPY", "yuan": "CNY", "reais": "BRL",
}  # fmt: skip
_ISO_BY_REGION = {
    "us": "USD", "american": "USD", "australian": "AUD", "canadian": "CAD", "singapore": "SGD",
    "hong kong": "HKD", "new zealand": "NZD", "swiss": "CHF",
}  # fmt: skip
#: a currency sign, word or code (lower-case codes only where they are no English word)
_MARK = (
    r"(?:US\$|AU?\$|CA?\$|NZ\$|S\$|HK\$|R\$|[$€£¥₹₩₽₺₪]|zł|\bRs\b\.?"
    r"|(?:(?:us|american|australian|canadian|singapore|hong\s+kong|new\s+zealand|swiss)\s+)?"
    r"(?:dollars?|bucks?|francs?)\b"
    r"|(?:euros?|pounds?(?:\s+sterling)?|quid|rupees?|yen|yuan|reais)\b"
    r"|(?:eur|usd|gbp|chf|aud|sgd|cad|nzd|inr|jpy|brl|sek|nok|dkk|pln|czk|huf|cny|hkd|mxn"
    r"|zar|krw)\b"
    r"|(?-i:\b[A-Z]{3}\b))"
)
#: words before an amount that make it a cap ("under", "no more than", "my budget's", "≤")
_CUE = (
    r"(?:under|below|beneath|(?:less|cheaper|lower)\s+th[ae]n"
    r"|(?:no|not|nothing|never)\s+(?:more\s+th[ae]n|over|above|higher\s+th[ae]n)"
    r"|(?:don'?t|do\s+not|dont)\s+(?:spend|pay|go)\s+(?:more\s+th[ae]n|over|above)"
    r"|up\s*to|at\s+(?:the\s+)?most|(?:max(?:imum)?\.?\s+|total\s+)?budget(?:'s|\s+is|\s+of)?:?"
    r"|max(?:imum)?\.?(?:\s+of)?:?|limit(?:ed\s+to|\s+of|\s+is)?:?|cap(?:ped\s+at|\s+of|\s+at)?:?"
    r"|spend(?:ing)?|around|about|approx(?:imately|\.)?|roughly|between|~|≤|<=?|hasta|bis"
    r"|jusqu'?à)"
)
_LEFT = re.compile(
    rf"(?:(?<![\w'])(?P<for>for\s+)?(?P<each>(?:each|per\s+(?:item|piece|unit))\s+)?"
    rf"(?P<cue>{_CUE})\s*|(?<![\w'])(?P<weak>for|at|@)\s*)?(?P<mark>{_MARK})?\s?"
    rf"(?:\d+(?:[.,]\d+)?\s?(?:{_MARK})?\s?(?:-|–|to|and)\s?(?:{_MARK})?)?\s?$",
    re.I,
)
#: words after an amount: "each" / "a piece" (per item), "or less", "max", "in total"
_EACH = r"(?:each|apiece|a\s+piece|per\s+(?:item|piece|unit|one|pc)|a\s+pop)"
_POST = rf"(?:{_EACH}|or\s+(?:less|under|below|lower|cheaper)|max(?:imum)?\b\.?|tops|at\s+(?:the\s+)?most|(?:in\s+)?total|altogether|all\s+in|overall)"
_RIGHT = re.compile(
    rf"(?P<mark>\s?{_MARK})?(?:\s(?P<cents>\d{{2}})(?![\d.,])(?=\s*(?:$|[^\w\s]|{_POST}\b)))?"
    rf"(?P<post>(?:\s*\b{_POST}\b|\s*/\s*(?:pc|piece|item|unit|ea)\b)*)",
    re.I,
)
#: a number (not inside a word, a time or a model name; "200-250": both ends)
_AMOUNT = re.compile(r"(?<![\w.,/:])(?<![^\W\d]-)\d+(?:[.,]\d+)*")
#: a word right after an amount that does not stop it being a price ("max 30 and mail …")
_FREE_AFTER = frozenset(
    ["and", "or", "please", "pls", "thanks", "thank", "including", "incl", "but", "if", "so"]
)
_NEXT_WORD = re.compile(r"\s*([^\W\d_][\w'-]*)")
_NEXT_TOKEN = re.compile(r"\s*[^\s,.;:!?]+")
_BARE_AMOUNT = re.compile(r"\s*(\d+(?:[.,](\d{1,2}))?)\s*[.!]?\s*$")

# ---- counts, measures and the object of the verb --------------------------------------------------
#: units of measure: a number before one of these is a size, not a count
_UNITS = (
    r"(?:k?g|kgs|kilos?|kilograms?|grams?|grammes?|mg|lbs?|pounds?|oz|ounces?|l|ltr|litres?"
    r"|liters?|ml|cl|dl|m|cm|mm|km|metres?|meters?|inch(?:es)?|ft|feet|foot|gb|tb|mb|w|watts?"
    r"|v|volts?|mah|hz|mp|gallons?|gal|pints?)"
)
#: the verbs of buying (misspellings of "purchase" and a few Spanish, German and French ones)
_VERBS = (
    r"buy|order|purchase|purchse|purchace|purhcase|get|grab|pick\s+up|find\s+me|need|want|wanna"
    r"|would\s+like|looking\s+for|comprar|compra|kaufen|kaufe|bestellen|acheter|commander"
)
_ME = r"(?:\s+(?:me|us|myself|for\s+me|for\s+us)(?![\w']))?"
_VERB = re.compile(
    rf"(?:(?<![\w'])(?:{_VERBS}|spend\b[^,.;!?]*?\bon)|'d\s+like)(?![\w']){_ME}", re.I
)
#: what a misspelt verb of buying is close to, and the words to compare with them
_VERB_WORDS = ["buy", "order", "purchase"]
_WORD = re.compile(r"[^\W\d_]{3,}")
#: a message that asks for something else ("cancel my order", "send $50 to …", "what's the
#: weather", "I want to move …"): it names no thing to buy and no count. Verbs that are also
#: things ("book", "clear", "wire", "push") count only before "my", "the", a name, an amount …
_ELSEWHERE = re.compile(
    r"(?:cancel|call\s+off|postpone|reschedule|delete|wipe|refund|decline|summari[sz]e|remind"
    r"|(?:what|how)(?!\s+about)|when|where|why|who|which)(?!\w)"
    r"|(?:book|clear|wire|transfer|push|move|shift|return|read|send|pay|forward|remove|apply"
    r"|set\s+up|arrange|schedule|surprise)\s+(?:(?:my|the|all|a|an|me|it|this|that|those|these"
    r"|our|his|her|for|off|to)\b|[$€£¥₹\d]|(?-i:[A-Z]))"
    r"|to\s",
    re.I,
)
#: "want to buy", "wanna by", "need to order", "like to have": the verb after the first one
_CHAIN = re.compile(rf"\s+(?:to\s+)?(?:{_VERBS}|by|have)(?![\w']){_ME}", re.I)
#: greetings and requests before an object given without a verb ("hi, 2 litres of paint")
_OPENING = re.compile(
    r"(?:\s*(?:hi|hello|hey|ok|okay|so|also|and|just|only|please|pls|plz|maybe|make\s+it"
    r"|(?:could|can|would|will)\s+(?:you|u))\b[\s,!]*)*",
    re.I,
)
#: "20 x 30 cm" and "20x30x5" are sizes, not "20 x" (a count)
_DIMS = r"(?!\s*\d+(?:[.,]\d+)?\s*(?:[x×]|cm|mm|m|in|inch(?:es)?|ft)\b)"
#: an explicit count anywhere: "Quantity: 3", "5 x AA batteries", "10 pcs", "usb hub x2"
_EXPLICIT = re.compile(
    r"\b(?:quantity|qty)\s*[:=]?\s*(\d+)\b"
    r"|(?<![\w.,])(\d+)\s*(?:[x×]\s+|[x×](?=[^\W\d])|(?:pcs|pieces|units)\b)"
    rf"{_DIMS}"
    r"|(?<=\s)[x×](\d+)\b",
    re.I,
)
#: the count at the start of the object
_COUNT = re.compile(
    rf"""\s*(?:
        (?P<couple>a\s+couple)\b
      | (?P<few>a\s+(?:few|lot|bunch|number)|several|some|any|more)\b
      | (?P<pair>(?:a|1)\s+pair)\b(?P<pair_of>\s+of\b)?
      | (?P<dozen>a\s+dozen)\b(?P<dozen_of>\s+\w)?
      | (?P<one>an?)\s+(?=\S)
      | (?P<num>\d+)(?![\d]|[.,]\d)(?P<measure>\s*{_UNITS}\b|-?[^\W\d_])?
    )""",
    re.I | re.X,
)
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")

# ---- the thing to buy -----------------------------------------------------------------------------
#: where the thing's words end: a clause, a dash, a receipt, politeness, a budget word
_END = re.compile(
    r"[,;!?:]|\.(?=\s|$)|\s[-–—]+\s|[–—]"
    r"|\s(?:and|but|then|so|also|plus)\s+(?=(?:please\s+)?(?:send|mail|e-?mail|ship|deliver"
    r"|forward|get|buy|order|put|add|let|tell|notify|have|make|use|pay|charge|keep|hold|cc|i|we)\b)"
    r"|\b(?:thanks|thank\s+you|thx|pls|please|plz|asap|cheers|receipt|invoice|confirmation"
    r"|budget|limit|price|priced|costing)\b"
    r"|\b(?:send|mail|e-?mail|ship|deliver)\s+(?:it|them|the|a|me|to)\b"
    r"|\b(?:nothing|not)\s+(?:over|above|more)\b|\b(?:don'?t|do\s+not|dont)\s+(?:spend|pay)\b"
    r"|\bor\s+(?:less|under|cheaper)\b|\bcheaper\s+th[ae]n\b|\bfor\s+(?:me|us|myself)\b",
    re.I,
)
#: words before the thing itself: a count, an article, "2 of those", "a pair of", "new", "cheap"
_LEAD = re.compile(
    rf"""\s*(?:
        \d+\s*[x×](?=\s){_DIMS}
      | \d+(?!\s*[x×]\s*\d)(?=\s+(?!{_UNITS}\b)[^\d\s])
      | a\s+couple(?:\s+of)? | a\s+(?:few|lot|bunch|number)\s+of | a\s+few | several | some
      | any | another | more | an? | the | those | these | just | only
      | un | une | una | uno | ein | eine | einen
      | of\s+(?:those|these|the|them) | (?:pairs?|packs?|packets?|pieces?)\s+of(?!\s*\d)
      | (?:pcs|units)\s+of | pcs | units
      | brand[\s-]new | new | cheap(?:er|est)? | good | nice | decent | affordable | inexpensive
      | my | our | your
    )(?=\s|$)""",
    re.I | re.X,
)
#: a size written on its own after the thing: "a french press, 1 litre, …", "webcam, 1080p"
_SPEC = re.compile(
    rf"\s*(?:\d+(?:[.,]\d+)?\s*(?:{_UNITS}|p|k|sheets|pages)|[a-c]\d{{1,2}})\s*", re.I
)
_QUOTE = re.compile(r"(?<![\w])['‘’\"“”]|['‘’\"“”](?![\w])")
_POSSESSIVE = re.compile(r"\b(?:my|our|your|his|her|their)\s+", re.I)
#: "for" and a bare plural or gerund at the end is a use, not a part ("webcam for video calls")
_PURPOSE = re.compile(
    r"\s+for\s+(?!(?:a|an|the|my|our|your|his|her|their|this|that|these|those)\b)"
    r"[a-z][a-z-]*(?:\s+[a-z][a-z-]*)*?(?:[a-z](?<!s)s|ing)\s*$"
)
#: words that name no thing to buy ("buy something", "a gift for Tom", "smth nice", "a pair")
_VAGUE = frozenset([
    "something", "smth", "sth", "anything", "stuff", "thing", "things", "item", "items", "it",
    "one", "ones", "them", "that", "this", "gift", "gifts", "present", "presents", "birthday",
    "christmas", "xmas", "little", "nice", "good", "cheap", "pair", "couple", "dozen", "pack",
    "quantity", "qty", "budget", "price", "total", "yes", "no", "ok", "okay", "sure", "thanks",
    "please",
])  # fmt: skip


@dataclass(frozen=True)
class _Money:
    """An amount read as a price: where (in the normalized line, cue words included), how much,
    in which currency (None when none was written), how sure (a cue word or a currency), and
    whether it is per item."""

    start: int
    end: int
    amount: Decimal
    iso: str | None
    score: int
    each: bool


@dataclass(frozen=True)
class _Line:
    """One message: as written, with its number words as digits, the way back from one to the
    other, the amounts that read as prices, and where the object of its verb starts."""

    orig: str
    norm: str
    #: (start, end) in ``norm`` and (start, end) in ``orig`` of each run of number words
    pieces: tuple[tuple[int, int, int, int], ...]
    money: tuple[_Money, ...]
    start: int

    def at(self, pos: int, *, end: bool = False) -> int:
        """The offset in ``orig`` of the offset ``pos`` in ``norm`` (inside a replaced run: its
        start, or its end when ``end``)."""
        shift = 0
        for n_start, n_end, o_start, o_end in self.pieces:
            if pos <= n_start:
                break
            if pos < n_end:
                return o_end if end else o_start
            shift = o_end - n_end
        return pos + shift

    def words(self, start: int, end: int) -> str:
        """The words as written of ``norm[start:end]``."""
        return self.orig[self.at(start) : self.at(end, end=True)].strip()


# ---- the three readers ----------------------------------------------------------------------------
def budget(text: str, currency: str = "EUR", *, asked: bool = False) -> Got:
    """``max_price``: the most to spend in total, as a decimal string with two places in the
    shop's ``currency`` ("15.00"), and the words that gave it. A price "each" / "a piece" is
    multiplied by the count (``quantity``). An amount written in another currency is a ``Need``
    whose ``heard`` is ``{"amount": <decimal>, "currency": <ISO 4217>}`` and whose question names
    both currencies: it is never converted. A bare number is a budget only when ``asked`` (Intake
    has just asked for it) or when it has cents ("49.90"). "cheap" is not an amount."""
    shop = currency.upper()
    found: tuple[_Line, _Money] | None = None
    for line in _lines(text):
        if line.start < 0:  # "transfer 200 euros to …" is no budget
            continue
        best = max(line.money, key=lambda m: m.score, default=None)
        found = (line, best) if best is not None else found
    if found is None:
        return _bare_budget(text, shop, asked)
    line, money = found
    amount, iso, words = money.amount, money.iso or shop, line.words(money.start, money.end)
    said = f"{_plain(amount)} {iso}"
    if money.each:
        count = quantity(text)
        if not isinstance(count, tuple):
            return Need(
                "max_price",
                f"You wrote {said} each. How many do you want, or what is the most you want "
                "to spend in total?",
                heard={"amount": _plain(amount), "currency": iso, "each": True},
            )
        amount = amount * count[0]
        said = f"{said} each for {count[0]} ({_plain(amount)} {iso} in total)"
    if iso != shop:
        return Need(
            "max_price",
            f"You wrote {said}, but this shop sells in {shop}. What is the most you want to "
            f"spend, in {shop}?",
            heard={"amount": _plain(amount), "currency": iso},
        )
    return (f"{amount.quantize(Decimal('0.01'))}", words)


def quantity(text: str) -> Got:
    """``quantity``: how many, as an int, and the words that gave it: a digit or number word
    ("3 notebooks", "three"), "a" / "an" / "one" = 1, "a couple" = 2, "a pair of socks" = 1,
    "5 x AA batteries" = 5, "Quantity: 2"; a measure is one item ("2 litres of paint", "a dozen
    eggs", "500g coffee" → 1). A bare plural, "some" or "a few" gives None (Intake asks). A bare
    answer works: "2", "two", "a couple", "a pair" (= 2), "a dozen" (= 12)."""
    found: Got = None
    for line in _lines(text):
        got = _count(line)
        if isinstance(got, tuple) and got[0] > 0:  # "0 x …" counts nothing
            found = got
    return found


def query(text: str) -> Got:
    """``query``: the thing to buy as written, without the count, the price, the receipt
    address, politeness or the words of another clause, keeping its sizes and units ("2 litres
    of white paint", "HDMI cables (2m)", "french press 1 litre"); possessives and quotes are
    dropped ("charger for my laptop" → "charger for laptop"). Nothing to search for ("buy
    something", "smth nice", "a gift for Tom" with no item, a bare "2") gives None."""
    for line in _lines(text):
        got = _thing(line)
        if got is not None:
            return got
    return None


# ---- reading a line ------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def _lines(text: str) -> tuple[_Line, ...]:
    """Each non-blank line of ``text``, read once."""
    return tuple(_read(part) for part in text.splitlines() if part.strip())


def _read(orig: str) -> _Line:
    """``orig`` with each run of number words as digits (``alpha2digit``), its prices and the
    start of its object."""
    parts: list[str] = []
    pieces: list[tuple[int, int, int, int]] = []
    pos = size = 0
    for m in _NUMBER_RUN.finditer(orig):
        digits = alpha2digit(re.sub(r"^an?\s+", "one ", m.group(0)), "en", threshold=0)
        if digits == m.group(0):
            continue
        parts.append(orig[pos : m.start()])
        size += m.start() - pos
        pieces.append((size, size + len(digits), m.start(), m.end()))
        parts.append(digits)
        size += len(digits)
        pos = m.end()
    parts.append(orig[pos:])
    norm = "".join(parts)
    return _Line(orig, norm, tuple(pieces), _prices(norm), _object_start(norm))


def _prices(norm: str) -> tuple[_Money, ...]:
    """The amounts in ``norm`` that read as prices: with a currency, or with a cue word before
    ("under", "max", "no more than") or after ("or less", "each max"), and not followed by a
    noun ("up to 3 days" is no price)."""
    found: list[_Money] = []
    for m in _AMOUNT.finditer(norm):
        if found and m.start() < found[-1].end:
            continue
        money = _price(norm, m)
        if money is not None:
            found.append(money)
    return tuple(found)


def _price(norm: str, m: re.Match[str]) -> _Money | None:
    """The price at the amount ``m``, or None when it reads as something else."""
    after = norm[m.end() : m.end() + 2]
    left = _LEFT.search(norm, max(0, m.start() - 48), m.start())
    right = _RIGHT.match(norm, m.end())
    attached = after[:1] == "%" or re.match(r":\d|-?[^\W\d_]", after)
    if left is None or right is None or (attached and not right.group("mark")):
        return None
    mark = _mark(left.group("mark")) or _mark(right.group("mark"), norm, right.end("mark"))
    cue = bool(left.group("cue") or right.group("post").strip(" /"))
    weak = bool(left.group("weak"))
    nxt = _NEXT_WORD.match(norm, right.end())
    noun_after = nxt is not None and nxt.group(1).lower() not in _FREE_AFTER
    if not (mark or cue or weak) or (not mark and (noun_after or (weak and not cue))):
        return None
    written = f"{left.group('mark') or ''}{m.group(0)} {right.group('mark') or ''}"
    price = Price.fromstring(written)
    if price.amount is None or price.amount <= 0:
        return None
    amount = price.amount + (Decimal(right.group("cents")) / 100 if right.group("cents") else 0)
    each = bool(left.group("each") or re.search(_EACH, right.group("post"), re.I))
    start = left.start() if left.group(0).strip() else m.start()
    return _Money(start, right.end(), amount, mark, 2 * cue + bool(mark), each)


def _mark(token: str | None, norm: str = "", end: int = 0) -> str | None:
    """The ISO 4217 code of a currency sign, word or code (None if it is none: "pounds of"
    is a weight)."""
    if not token or not token.strip():
        return None
    key = re.sub(r"\s+", " ", token.strip().lower())
    if key.startswith("pound") and re.match(r"\s+of\b", norm[end:]):
        return None
    words = key.split(" ")
    region = " ".join(words[:-1])
    if region and words[-1] in {"dollar", "dollars", "buck", "bucks", "franc", "francs"}:
        return _ISO_BY_REGION.get(region)
    if key in _ISO_BY_MARK:
        return _ISO_BY_MARK[key]
    return key.upper() if key.upper() in _CODES else None


def _bare_budget(text: str, shop: str, asked: bool) -> Got:
    """A reply that is only a number: the budget in the shop's currency when it was asked for,
    or when it has cents ("49.90")."""
    lines = _lines(text)
    m = _BARE_AMOUNT.match(lines[-1].norm) if lines else None
    if m is None or not (asked or (m.group(2) and len(m.group(2)) == 2)):
        return None
    amount = Price.fromstring(m.group(1)).amount
    if amount is None or amount <= 0:
        return None
    return (f"{amount.quantize(Decimal('0.01'))}", lines[-1].words(m.start(1), m.end(1)))


def _plain(amount: Decimal) -> str:
    """A decimal as written, with a point: "15", "49.90", "12.50"."""
    whole = amount == amount.to_integral_value()
    return format(amount if whole else amount.quantize(Decimal("0.01")), "f")


def _object_start(norm: str) -> int:
    """Where the object of the buying verb starts ("get me |3 notebooks", "I want to buy
    |headphones"); with no verb, after any greeting or "could you"; -1 when the message asks
    for something else."""
    opening = _OPENING.match(norm)
    begin = opening.end() if opening else 0
    if _ELSEWHERE.match(norm, begin):
        return -1
    m = _VERB.search(norm)
    if m is None:
        return _misspelt_verb(norm, begin)
    end = m.end()
    while (chained := _CHAIN.match(norm, end)) is not None:
        end = chained.end()
    rest = len(norm) - len(norm[end:].lstrip())
    return -1 if _ELSEWHERE.match(norm, rest) else end


def _misspelt_verb(norm: str, begin: int) -> int:
    """After a misspelt verb of buying in the first two words ("ordr a kettle", "i buyy"),
    else ``begin`` (``difflib``, cutoff 0.8)."""
    for word in list(_WORD.finditer(norm, begin))[:2]:
        if difflib.get_close_matches(word.group(0).lower(), _VERB_WORDS, n=1, cutoff=0.8):
            return word.end()
    return begin


def _blank(line: _Line) -> str:
    """The normalized line with its prices and e-mail addresses blanked (offsets kept)."""
    chars = list(line.norm)
    spans = [(p.start, p.end) for p in line.money]
    spans += [(e.start(), e.end()) for e in _EMAIL.finditer(line.norm)]
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


def _count(line: _Line) -> Got:
    """The count one message states: explicit ("Quantity: 2", "5 x"), else at the start of
    the object of its verb."""
    plain = _blank(line)
    explicit = _EXPLICIT.search(plain)
    if explicit is not None:
        digits = next(g for g in explicit.groups() if g)
        return (int(digits), line.words(explicit.start(), explicit.end()).rstrip(" x×"))
    m = _COUNT.match(plain, line.start) if line.start >= 0 else None
    if m is None or m.group("few"):
        return None
    bare = not plain[m.end() :].strip(" .!?")
    kind = next(k for k in ("couple", "pair", "dozen", "one", "num") if m.group(k))
    if kind == "num":
        value = 1 if m.group("measure") else int(m.group("num"))
    else:
        singles = {"couple": 2, "pair": 2 if bare else 1, "dozen": 12 if bare else 1, "one": 1}
        value = singles[kind]
    following = _NEXT_TOKEN.match(plain, m.end())
    end = following.end() if following is not None and kind != "num" else m.end()
    return (value, line.words(m.start(kind), end)) if value > 0 else None


def _thing(line: _Line) -> Got:
    """The thing one message asks to buy, or None. A vague or gift object ("a gift for my
    mum: a silk scarf", "a present for Tom — a board game") is followed to the item after the
    colon or dash."""
    start = line.start
    for _ in range(3 if start >= 0 else 0):
        start, end, stop, after = _clause(line, start)
        if not _vague(line.norm[start:end]):
            return _tidy(line, start, end, _specs(line, after, stop))
        if stop not in {":", "-", "–", "—"}:
            return None
        start = after
    return None


def _clause(line: _Line, start: int) -> tuple[int, int, str, int]:
    """The words of the thing from ``start``: past the count and fillers, up to the end of the
    clause or the price; what ended it ("," ":" "—" … or "") and where the text goes on."""
    lead, moved = start, True
    while moved:
        moved = False
        if (m := _LEAD.match(line.norm, lead)) is not None and m.end() > lead:
            lead, moved = m.end(), True
        for money in line.money:
            if money.start <= lead < money.end or lead < money.start < lead + 2:
                lead, moved = money.end, True
    stop = _END.search(line.norm, lead)
    end = stop.start() if stop else len(line.norm)
    for money in line.money:
        if lead <= money.start < end:
            end = money.start
    for email in _EMAIL.finditer(line.norm, lead, end):
        end = min(end, email.start())
    if stop is not None and stop.start() == end:
        return lead, end, stop.group(0).strip(), stop.end()
    return lead, end, "", end


def _specs(line: _Line, after: int, stop: str) -> list[tuple[int, int]]:
    """The sizes written as clauses of their own right after the thing ("…, 1 litre, …",
    "— A4, 500 sheets —"); ``after``: where the text goes on past ``stop``."""
    specs: list[tuple[int, int]] = []
    while stop in {",", "-", "–", "—"}:
        nxt = _END.search(line.norm, after)
        until = nxt.start() if nxt else len(line.norm)
        if not _SPEC.fullmatch(line.norm, after, until):
            break
        specs.append((after, until))
        after, stop = (nxt.end(), nxt.group(0).strip()) if nxt else (until, "")
    return specs


def _tidy(line: _Line, start: int, end: int, specs: list[tuple[int, int]]) -> Got:
    """The thing as written, without quotes, possessives or a use ("for video calls"), with
    its sizes; and the words it came from."""
    words = line.words(start, end)
    thing = _PURPOSE.sub("", _POSSESSIVE.sub("", _QUOTE.sub("", words)))
    thing = " ".join([thing, *(line.words(s, e) for s, e in specs)])
    thing = " ".join(thing.split()).strip(" .,-")
    return (thing, words) if thing else None


def _vague(words: str) -> bool:
    """True when ``words`` name nothing to search for: only vague, gift or filler words before
    any "for", or only numbers."""
    head = re.split(r"\bfor\b", words.lower(), maxsplit=1)[0]
    tokens = re.findall(r"[^\W_]+", head)
    return all(t in _VAGUE or ascii_digits(t) for t in tokens)
